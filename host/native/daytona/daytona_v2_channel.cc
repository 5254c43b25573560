// The daytona provider's channel over the process API v2 (daytona_v2.h):
// one `kind: exec` process with stdin piped. Output: one server-sent-event
// log stream with base64 frames, resumed after a cut from the last cursor
// (no replay); a cursor the daemon evicted (409 CURSOR_EXPIRED) is a gap,
// reported as a failed channel (the tunnel reattaches through a new one and
// the supervisor's offsets make the gap good). Input: armored text queued
// and sent in as few POST .../stdin as it can: one at a time, what queued
// while one was under way going in the next (as v1's input). A minimum
// interval between them was tried and measured: at ~3 a second the host's
// acknowledgements went back so slowly that bulk output fell to 2.4 MB/s
// against v1's 37 (the supervisor waits for credit); without it a line
// every 20 ms still costs under 2 requests a second. EOF goes through the
// same call's flag.
#include "host/native/daytona/daytona_v2_channel.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "absl/strings/str_cat.h"
#include "host/codec/sse.h"
#include "host/native/daytona/daytona_v2.h"
#include "host/net/retry_after.h"
#include "host/support/condition.h"
#include "host/support/sleep.h"
#include "tether/output_helpers.h"

namespace tether::daytona {

namespace asio = boost::asio;

namespace {

constexpr int kStreamFailures = 8;                     // log stream (re)connects in a row without progress
constexpr std::chrono::milliseconds kMaxBackoff{2000};
constexpr std::size_t kReadBuffer = 64 * 1024;         // one read of the event stream
constexpr std::size_t kMaxBuffered = 2u << 20;         // stdout read ahead of the caller
constexpr std::size_t kMaxQueuedStdin = 1u << 20;      // a Write waits while more is queued
constexpr std::size_t kDiagnosticsBytes = 4096;        // the stderr tail kept for messages

using internal::Sleep;

struct V2State {
  explicit V2State(const asio::any_io_executor& ex) : changed(ex) {}
  asio::any_io_executor ex;
  std::shared_ptr<DaytonaApi> api;
  std::string path;          // {prefix}/{id}
  std::string buf;           // stdout not yet read by the caller
  std::size_t buf_pos = 0;
  std::string cursor;        // where the log resumes ("" from the start)
  bool eof = false;          // all output delivered
  bool completed = false;    // the process is terminal
  std::optional<absl::Status> error;
  std::optional<int> exit;
  std::string diag;
  bool closed = false;
  std::string stdin_queue;
  bool sending = false;
  bool eof_wanted = false;
  std::optional<absl::Status> write_error;
  std::unique_ptr<net::BodyStream> stream;
  internal::Condition changed;
  std::size_t buffered() const { return buf.size() - buf_pos; }
};

void Fail(V2State& s, absl::Status st) {
  if (!s.error) s.error = s.api->Clean(st);
  s.changed.NotifyAll();
}

// The process record, for its exit when the stream's state event had none.
asio::awaitable<void> LearnExit(std::shared_ptr<V2State> s) {
  absl::StatusOr<net::Response> r = co_await s->api->Call(s->api->toolbox, "GET", s->path, "");
  if (!r.ok()) co_return;
  absl::StatusOr<v2::ProcessView> p = v2::ParseProcess(r->body);
  if (p.ok() && p->terminal) s->exit = v2::ExitStatusOf(*p);
}

// Streams the log (reconnecting from the cursor) until its eof event.
asio::awaitable<void> ReadLoop(std::shared_ptr<V2State> s) {
  DaytonaApi& api = *s->api;
  int failures = 0;
  std::chrono::milliseconds backoff = kCallBackoff;
  std::vector<char> tmp(kReadBuffer);
  const std::string what = "GET .../logs";
  for (;;) {
    if (s->closed) co_return;
    net::Request req;
    req.method = "GET";
    req.target = absl::StrCat(s->path, "/logs?encoding=base64&follow=true",
                              s->cursor.empty() ? std::string() : absl::StrCat("&cursor=", v2::CursorQuery(s->cursor)));
    req.headers = api.Headers("");
    req.headers.emplace_back("Accept", "text/event-stream");
    absl::StatusOr<std::unique_ptr<net::BodyStream>> opened = co_await api.toolbox->Open(std::move(req));
    if (s->closed) co_return;
    bool progress = false;
    bool ended = false;
    absl::Status why;
    std::optional<std::chrono::milliseconds> delay = backoff;
    if (!opened.ok()) {
      why = opened.status();
    } else if ((*opened)->head().status != 200) {
      net::Response r = co_await net::ReadErrorResponse(**opened);
      if (r.status == 409 && v2::ErrorCodeOf(r.body) == "CURSOR_EXPIRED") {
        Fail(*s, absl::UnavailableError(
                     "daytona: the process's log no longer holds what follows our cursor (evicted under its size "
                     "cap): the channel is given up and the process reattached through a new one"));
        co_return;
      }
      why = HttpFailure(r, what, api.sandbox_id);
      if (why.code() != absl::StatusCode::kUnavailable) {
        Fail(*s, why);
        co_return;
      }
      if (r.status == 429) delay = net::RetryDelay(r, backoff);
      if (!delay) {
        Fail(*s, absl::UnavailableError(absl::StrCat("daytona: ", what, " answered 429 with Retry-After ",
                                                     std::string(r.header("Retry-After")), ", above the ",
                                                     net::kMaxRetryAfter.count(), " s tether waits")));
        co_return;
      }
    } else {
      s->stream = *std::move(opened);
      codec::SseDecoder sse(v2::kMaxLogEventBytes);
      std::vector<codec::SseEvent> events;
      for (;;) {
        while (!s->closed && s->buffered() >= kMaxBuffered) {
          if (!co_await s->changed.Wait()) co_return;
        }
        if (s->closed) co_return;
        absl::StatusOr<std::size_t> n = co_await s->stream->ReadSome(std::span<char>(tmp));
        if (s->closed) co_return;
        if (!n.ok()) {
          why = n.status();
          break;
        }
        if (*n == 0) {
          why = absl::UnavailableError("daytona: the log stream ended before its eof event");
          break;
        }
        events.clear();
        if (absl::Status st = sse.Feed(std::string_view(tmp.data(), *n), events); !st.ok()) {
          Fail(*s, st);
          co_return;
        }
        for (codec::SseEvent& e : events) {
          if (e.event == "log") {
            absl::StatusOr<v2::LogFrame> f = v2::ParseLogFrame(e.data);
            if (!f.ok()) {
              Fail(*s, f.status());
              co_return;
            }
            if (f->stream == 1) {
              if (s->buf_pos == s->buf.size()) {
                s->buf.clear();
                s->buf_pos = 0;
              }
              s->buf.append(f->bytes);
            } else if (f->stream == 2) {
              s->diag.append(f->bytes);
              if (s->diag.size() > 2 * kDiagnosticsBytes) s->diag.erase(0, s->diag.size() - kDiagnosticsBytes);
            }
            s->cursor = std::move(f->cursor);
            progress = true;
            s->changed.NotifyAll();
          } else if (e.event == "state") {
            absl::StatusOr<v2::ProcessView> p = v2::ParseProcess(e.data);
            if (p.ok() && p->terminal) s->exit = v2::ExitStatusOf(*p);
          } else if (e.event == "warning") {
            // Frames we had not read yet were evicted under the log's cap and
            // the stream goes on past them: a gap in the middle of our bytes.
            Fail(*s, absl::UnavailableError(
                         "daytona: the process's log evicted output this channel had not read yet (a slow "
                         "reader): the channel is given up and the process reattached through a new one"));
            co_return;
          } else if (e.event == "eof") {
            absl::StatusOr<std::string> c = v2::ParseEofCursor(e.data);
            if (c.ok() && !c->empty()) s->cursor = *c;
            ended = true;
            break;
          }
          // (Other events and comments: nothing to do.)
        }
        if (ended) break;
      }
      s->stream->Close();
      s->stream.reset();
    }
    if (s->closed) co_return;
    if (ended) {
      if (!s->exit) co_await LearnExit(s);
      if (s->closed) co_return;
      s->completed = true;
      s->eof = true;
      s->changed.NotifyAll();
      co_return;
    }
    if (progress) {
      failures = 0;
      backoff = kCallBackoff;
      continue;
    }
    if (++failures >= kStreamFailures) {
      Fail(*s, absl::UnavailableError(absl::StrCat("daytona: the log stream failed ", failures,
                                                   " times in a row: ", why.message())));
      co_return;
    }
    co_await Sleep(*delay);
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

// One POST .../stdin. Data is sent once (no offset, no request id: a
// resend after a lost answer could apply it twice): a 5xx or a lost
// connection gives the channel up, and the tunnel resends through a new one
// what the supervisor lacks. The EOF alone is safe to repeat.
asio::awaitable<absl::Status> PostStdin(std::shared_ptr<V2State> s, std::string body, bool eof_only) {
  DaytonaApi& api = *s->api;
  const std::string target = absl::StrCat(s->path, "/stdin");
  absl::StatusOr<net::Response> r = absl::UnknownError("");
  if (eof_only) {
    r = co_await api.Call(api.toolbox, "POST", target, std::move(body));
  } else {
    r = co_await api.CallOnce(api.toolbox, "POST", target, std::move(body));
  }
  if (r.ok()) co_return absl::OkStatus();
  const std::string m(r.status().message());
  if (eof_only && m.find("HTTP 409") != std::string::npos) co_return absl::OkStatus();  // closed or ended already
  co_return absl::UnavailableError(absl::StrCat(m, eof_only ? "" : " (the input may have been applied: not sent again)"));
}

asio::awaitable<void> StdinSender(std::shared_ptr<V2State> s) {
  while (!s->closed && !s->write_error && (!s->stdin_queue.empty() || s->eof_wanted)) {
    const bool eof_only = s->stdin_queue.empty();
    std::string text = std::move(s->stdin_queue);
    s->stdin_queue.clear();
    if (eof_only) s->eof_wanted = false;
    absl::StatusOr<std::string> body = v2::StdinJson(text, eof_only);
    if (!body.ok()) {
      s->write_error = body.status();
      break;
    }
    s->changed.NotifyAll();  // room in the queue
    absl::Status st = co_await PostStdin(s, *std::move(body), eof_only);
    if (!st.ok() && !s->closed) {
      s->write_error = st;
      Fail(*s, st);
    }
  }
  s->sending = false;
  s->changed.NotifyAll();
}

void StartSender(const std::shared_ptr<V2State>& s) {
  if (s->sending) return;
  s->sending = true;
  asio::co_spawn(s->ex, StdinSender(s), asio::detached);
}

// A channel given up: its bridge is killed (the supervisor's daemon lives
// on), then the record and its logs are purged; an ended one only purged.
asio::awaitable<void> Release(std::shared_ptr<DaytonaApi> api, std::string path, bool kill) {
  if (kill) {
    absl::StatusOr<net::Response> k = co_await api->Call(api->toolbox, "POST", absl::StrCat(path, "/signals"),
                                                         v2::SignalJson("KILL"));
    (void)k;
  }
  absl::StatusOr<net::Response> d = co_await api->Call(api->toolbox, "DELETE", path, "");
  (void)d;
}

class V2Channel final : public Channel {
 public:
  explicit V2Channel(std::shared_ptr<V2State> s) : s_(std::move(s)) {}
  ~V2Channel() override { Close(); }

  asio::awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf) override {
    if (buf.empty()) co_return absl::InvalidArgumentError("daytona: ReadSome with an empty buffer");
    for (;;) {
      if (s_->closed) co_return absl::UnavailableError("daytona: the process's channel was closed");
      if (s_->buffered() > 0) {
        const std::size_t n = std::min(buf.size(), s_->buffered());
        std::memcpy(buf.data(), s_->buf.data() + s_->buf_pos, n);
        s_->buf_pos += n;
        s_->changed.NotifyAll();
        co_return n;
      }
      if (s_->error) co_return *s_->error;
      if (s_->eof) co_return 0;
      const bool woken = co_await s_->changed.Wait();  // (g++ 12: no co_await in a condition)
      if (!woken) co_return absl::CancelledError("daytona: reading the process's output: cancelled");
    }
  }

  asio::awaitable<absl::Status> Write(std::string_view bytes) override {
    if (s_->closed) co_return absl::UnavailableError("daytona: the process's channel was closed");
    if (s_->write_error) co_return *s_->write_error;
    if (bytes.empty()) co_return absl::OkStatus();
    if (s_->eof_wanted || eof_sent_) co_return absl::FailedPreconditionError("daytona: Write after CloseWrite");
    if (bytes.size() > v2::kMaxStdinBytes || !IsValidUtf8(bytes)) co_return v2::StdinJson(bytes, false).status();
    // One request holds at most kMaxStdinBytes: wait while the queue could not take these.
    while (s_->stdin_queue.size() + bytes.size() > std::min(kMaxQueuedStdin, v2::kMaxStdinBytes)) {
      if (s_->closed) co_return absl::UnavailableError("daytona: the process's channel was closed");
      if (s_->write_error) co_return *s_->write_error;
      const bool woken = co_await s_->changed.Wait();
      if (!woken) co_return absl::CancelledError("daytona: writing to the process's stdin: cancelled");
    }
    if (s_->closed) co_return absl::UnavailableError("daytona: the process's channel was closed");
    if (s_->write_error) co_return *s_->write_error;
    s_->stdin_queue.append(bytes);
    StartSender(s_);
    co_return absl::OkStatus();
  }

  void CloseWrite() override {
    if (s_->closed || eof_sent_) return;
    eof_sent_ = true;
    s_->eof_wanted = true;
    StartSender(s_);
  }

  void Close() override {
    if (s_->closed) return;
    s_->closed = true;
    if (s_->stream) s_->stream->Close();
    s_->changed.NotifyAll();
    asio::co_spawn(s_->ex, Release(s_->api, s_->path, !s_->completed), asio::detached);
  }

  std::optional<int> exit_code() const override { return s_->exit; }
  std::string Diagnostics() const override {
    const std::string& d = s_->diag;
    return d.size() <= kDiagnosticsBytes ? d : d.substr(d.size() - kDiagnosticsBytes);
  }

 private:
  std::shared_ptr<V2State> s_;
  bool eof_sent_ = false;
};

}  // namespace

std::unique_ptr<Channel> MakeDaytonaV2Channel(asio::any_io_executor ex, std::shared_ptr<DaytonaApi> api,
                                              std::string prefix, std::string id) {
  auto s = std::make_shared<V2State>(ex);
  s->ex = ex;
  s->api = std::move(api);
  s->path = absl::StrCat(prefix, "/", net::UrlEncode(id));
  asio::co_spawn(ex, ReadLoop(s), asio::detached);
  return std::unique_ptr<Channel>(new V2Channel(std::move(s)));
}

}  // namespace tether::daytona
