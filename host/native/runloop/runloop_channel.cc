#include "host/native/runloop/runloop_channel.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <array>
#include <chrono>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "absl/strings/str_cat.h"
#include "host/support/condition.h"
#include "host/native/runloop/runloop_api.h"
#include "host/net/http.h"
#include "host/net/retry_after.h"
#include "tether/output_helpers.h"

namespace tether::runloop {

namespace {

constexpr int kStreamFailures = 8;          // SSE (re)connects in a row that failed without progress
constexpr std::size_t kReadBuffer = 64 * 1024;        // one SSE read
constexpr std::size_t kMaxBuffered = 2u << 20;        // stdout read ahead of the caller
// stdin is batched: a Write is queued and returns; one send_std_in carries
// everything queued, at most one per kStdinInterval while writes keep
// coming (the first after a pause goes at once), so a stream of small
// acknowledgements costs ~5 requests/s instead of one per frame.
constexpr std::chrono::milliseconds kStdinInterval{200};
constexpr std::size_t kMaxQueuedStdin = 1u << 20;     // a Write waits while more is queued

// One streaming execution, shared by its channel and its background reader.
struct StreamState {
  explicit StreamState(const asio::any_io_executor& ex) : changed(ex) {}
  std::shared_ptr<RunloopApi> api;
  std::shared_ptr<StdinVerdict> verdict;
  std::string eid;
  std::string buf;              // stdout not yet read by the caller
  std::size_t buf_pos = 0;
  std::uint64_t offset = 0;     // where the SSE stream resumes
  bool eof = false;             // all output delivered and the exit known
  std::optional<absl::Status> error;
  std::optional<int> exit;
  std::string diag;
  bool closed = false;
  bool completed = false;
  // stdin: Writes queue here (each valid UTF-8, so any concatenation is);
  // one sender drains it; EOF goes after it.
  std::string stdin_queue;
  bool sending = false;
  bool eof_wanted = false;
  std::optional<absl::Status> write_error;
  std::chrono::steady_clock::time_point last_send{};
  std::unique_ptr<net::BodyStream> stream;
  internal::Condition changed;
  std::size_t buffered() const { return buf.size() - buf_pos; }
};

asio::awaitable<void> FailStream(std::shared_ptr<StreamState> s, absl::Status st) {
  if (!s->error) s->error = s->api->Fail(st);
  s->changed.NotifyAll();
  co_return;
}

// Streams stdout (reconnecting from the offset), then learns the exit.
asio::awaitable<void> ReadLoop(std::shared_ptr<StreamState> s) {
  RunloopApi& api = *s->api;
  int failures = 0;
  std::chrono::milliseconds backoff = kCallBackoff;
  std::vector<char> tmp(kReadBuffer);
  for (;;) {
    if (s->closed) co_return;
    net::Request req;
    req.method = "GET";
    req.target = absl::StrCat(api.ExecPath(s->eid, "stream_stdout_updates"), "?offset=", s->offset);
    req.headers = api.Headers("");
    req.headers.emplace_back("Accept", "text/event-stream");
    absl::StatusOr<std::unique_ptr<net::BodyStream>> opened = co_await api.calls->Open(std::move(req));
    if (s->closed) co_return;
    bool progress = false;
    bool ended = false;   // the service closed the stream cleanly: output complete
    absl::Status why;     // why this connection failed
    std::optional<std::chrono::milliseconds> delay = backoff;  // before the next connection
    if (!opened.ok()) {
      why = opened.status();
    } else if ((*opened)->head().status != 200) {
      net::Response r = co_await net::ReadErrorResponse(**opened);
      why = runloop::HttpFailure(r, "GET .../stream_stdout_updates", api.devbox_id);
      if (why.code() != absl::StatusCode::kUnavailable) co_return co_await FailStream(s, why);
      if (r.status == 429) delay = net::RetryDelay(r, backoff);
      if (!delay) {
        co_return co_await FailStream(
            s, absl::UnavailableError(absl::StrCat("runloop: GET .../stream_stdout_updates answered 429 with "
                                                   "Retry-After ", std::string(r.header("Retry-After")),
                                                   ", above the ", net::kMaxRetryAfter.count(), " s tether waits")));
      }
    } else {
      s->stream = *std::move(opened);
      runloop::SseDecoder sse;
      std::vector<runloop::SseEvent> events;
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
          if (sse.partial()) {
            why = absl::UnavailableError("runloop: the output stream ended inside an event");
          } else {
            ended = true;
          }
          break;
        }
        events.clear();
        if (absl::Status st = sse.Feed(std::string_view(tmp.data(), *n), events); !st.ok()) {
          co_return co_await FailStream(s, st);
        }
        bool reconnect = false;
        for (runloop::SseEvent& e : events) {
          if (e.event == "error") {
            const int code = runloop::ErrorEventCode(e.data);
            // 408: the service's idle limit, the normal way a stream ends early.
            if (code == 408) {
              progress = true;
            } else {
              why = absl::UnavailableError(absl::StrCat("runloop: the output stream reported error ", code));
            }
            reconnect = true;
            break;
          }
          if (!e.event.empty() && e.event != "message") continue;
          absl::StatusOr<runloop::OutputChunk> c = runloop::ParseOutputChunk(e.data);
          if (!c.ok()) co_return co_await FailStream(s, c.status());
          if (s->buf_pos == s->buf.size()) {
            s->buf.clear();
            s->buf_pos = 0;
          }
          s->buf.append(c->output);
          s->offset = c->offset ? *c->offset : s->offset + c->output.size();
          progress = true;
          s->changed.NotifyAll();
        }
        if (reconnect) break;
      }
      s->stream->Close();
      s->stream.reset();
    }
    if (s->closed) co_return;
    if (ended) {
      // Complete, unless a proxy closed it cleanly: one long poll says which.
      absl::StatusOr<std::optional<runloop::ExecutionView>> v = co_await api.PollCompleted(s->eid);
      if (s->closed) co_return;
      if (!v.ok()) co_return co_await FailStream(s, v.status());
      if (v->has_value()) {
        s->completed = true;
        s->exit = (*v)->exit_status;
        s->diag = Tail((*v)->stderr_text);
        s->eof = true;
        s->changed.NotifyAll();
        co_return;
      }
      progress = true;  // still running: resume the stream
    }
    if (progress) {
      failures = 0;
      backoff = kCallBackoff;
      continue;
    }
    if (++failures >= kStreamFailures) {
      co_return co_await FailStream(
          s, absl::UnavailableError(absl::StrCat("runloop: the output stream failed ", failures,
                                                 " times in a row: ", why.message())));
    }
    co_await Sleep(*delay);
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

// One send_std_in with `body`; detects an execution that stdin killed.
// Text is sent once (Repeat::kOnce: it has no offset or request id, so a
// resend after a lost answer could apply it twice): a 5xx or a failed
// connection gives the channel up (UNAVAILABLE), and the tunnel reattaches
// through a new execution, resending by its own offsets what the
// supervisor lacks. The EOF signal is safe to repeat (stdin closes once);
// an EOF refused because the execution no longer runs has nothing left to
// close.
asio::awaitable<absl::Status> PostStdin(std::shared_ptr<StreamState> s, std::string body, bool eof) {
  absl::StatusOr<net::Response> resp =
      co_await s->api->Post(s->api->ExecPath(s->eid, "send_std_in"), std::move(body),
                            eof ? RunloopApi::Repeat::kAnyFailure : RunloopApi::Repeat::kOnce);
  absl::Status st;
  if (!resp.ok()) {
    st = resp.status();
    if (!eof && st.code() == absl::StatusCode::kUnavailable) {
      st = absl::UnavailableError(absl::StrCat(st.message(), " (the input may have been applied: not sent again)"));
    }
  } else if (!net::IsSuccess(*resp)) {
    st = runloop::HttpFailure(*resp, "POST .../send_std_in", s->api->devbox_id);
    if (!eof && resp->status >= 500) {
      st = absl::UnavailableError(absl::StrCat(
          st.message(), " (the input may have been applied, the answer lost on the way: not sent again; the "
                        "channel is given up)"));
    } else if (st.code() == absl::StatusCode::kInvalidArgument ||
               st.code() == absl::StatusCode::kFailedPrecondition) {
      // A 4xx other than auth and not-found: the execution is no longer running.
      if (eof) co_return absl::OkStatus();
      st = absl::UnavailableError(absl::StrCat("runloop: the execution no longer takes stdin (", st.message(), ")"));
    }
  } else {
    absl::StatusOr<runloop::ExecutionView> v = runloop::ParseExecutionView(resp->body);
    if (!v.ok()) {
      st = v.status();
    } else if (v->completed()) {
      if (s->verdict->state == StdinVerdict::kUnknown) s->verdict->state = StdinVerdict::kKills;
      st = absl::UnavailableError(
          "runloop: sending stdin ended the execution (this service kills executions that get stdin); "
          "later starts use one-shot executions (the exchange tunnel)");
    }
  }
  co_return s->api->Fail(st);
}

// Drains the stdin queue: everything queued in one send_std_in, at most
// one per kStdinInterval; then the EOF when asked. A failure fails the
// channel (reads too: the tunnel reattaches).
asio::awaitable<void> StdinSender(std::shared_ptr<StreamState> s) {
  while (!s->closed && !s->write_error && (!s->stdin_queue.empty() || s->eof_wanted)) {
    const auto next = s->last_send + kStdinInterval;
    const auto now = std::chrono::steady_clock::now();
    if (now < next) {
      co_await Sleep(std::chrono::duration_cast<std::chrono::milliseconds>(next - now) + std::chrono::milliseconds(1));
      continue;
    }
    std::string body;
    const bool eof = s->stdin_queue.empty();
    if (eof) {
      body = runloop::SendEofJson();
      s->eof_wanted = false;
    } else {
      absl::StatusOr<std::string> b = runloop::SendStdinJson(s->stdin_queue);
      s->stdin_queue.clear();
      if (!b.ok()) {
        s->write_error = b.status();
        break;
      }
      body = *std::move(b);
    }
    s->last_send = std::chrono::steady_clock::now();
    s->changed.NotifyAll();  // room in the queue
    absl::Status st = co_await PostStdin(s, std::move(body), eof);
    if (!st.ok() && !s->closed) {
      s->write_error = st;
      if (!s->error) s->error = st;
    }
  }
  s->sending = false;
  s->changed.NotifyAll();
}

void StartSender(const std::shared_ptr<StreamState>& s) {
  if (s->sending) return;
  s->sending = true;
  asio::co_spawn(s->api->executor, StdinSender(s), asio::detached);
}

class StreamChannel final : public Channel {
 public:
  explicit StreamChannel(std::shared_ptr<StreamState> s) : s_(std::move(s)) {}
  ~StreamChannel() override { Close(); }

  asio::awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf) override {
    if (buf.empty()) co_return absl::InvalidArgumentError("runloop: ReadSome with an empty buffer");
    for (;;) {
      if (s_->closed) co_return absl::UnavailableError("runloop: the execution's channel was closed");
      if (s_->buffered() > 0) {
        const std::size_t n = std::min(buf.size(), s_->buffered());
        std::memcpy(buf.data(), s_->buf.data() + s_->buf_pos, n);
        s_->buf_pos += n;
        s_->changed.NotifyAll();  // the reader may be waiting for room
        co_return n;
      }
      if (s_->error) co_return *s_->error;
      if (s_->eof) co_return 0;
      const bool woken = co_await s_->changed.Wait();  // (g++ 12: no co_await in a condition)
      if (!woken) co_return absl::CancelledError("runloop: reading the execution's output: cancelled");
    }
  }

  asio::awaitable<absl::Status> Write(std::string_view bytes) override {
    if (s_->closed) co_return absl::UnavailableError("runloop: the execution's channel was closed");
    if (s_->write_error) co_return *s_->write_error;
    if (bytes.empty()) co_return absl::OkStatus();
    if (s_->eof_wanted) co_return absl::FailedPreconditionError("runloop: Write after CloseWrite");
    if (bytes.size() > runloop::kMaxStdinTextBytes || !IsValidUtf8(bytes)) {
      co_return runloop::SendStdinJson(bytes).status();  // the reason, as a Status
    }
    while (s_->stdin_queue.size() + bytes.size() > std::max(kMaxQueuedStdin, bytes.size())) {
      if (s_->closed) co_return absl::UnavailableError("runloop: the execution's channel was closed");
      if (s_->write_error) co_return *s_->write_error;
      const bool woken = co_await s_->changed.Wait();  // (g++ 12: no co_await in a condition)
      if (!woken) co_return absl::CancelledError("runloop: writing to the execution's stdin: cancelled");
    }
    if (s_->closed) co_return absl::UnavailableError("runloop: the execution's channel was closed");
    if (s_->stdin_queue.size() + bytes.size() > runloop::kMaxStdinTextBytes && !s_->stdin_queue.empty()) {
      // One send_std_in holds at most kMaxStdinTextBytes: wait for the queue to go.
      while (!s_->stdin_queue.empty() && !s_->closed && !s_->write_error) {
        const bool woken = co_await s_->changed.Wait();
        if (!woken) co_return absl::CancelledError("runloop: writing to the execution's stdin: cancelled");
      }
      if (s_->closed) co_return absl::UnavailableError("runloop: the execution's channel was closed");
      if (s_->write_error) co_return *s_->write_error;
    }
    s_->stdin_queue.append(bytes);
    StartSender(s_);
    co_return absl::OkStatus();
  }

  void CloseWrite() override {
    if (s_->closed || s_->eof_wanted || eof_sent_) return;
    eof_sent_ = true;
    s_->eof_wanted = true;
    StartSender(s_);
  }

  void Close() override {
    if (s_->closed) return;
    s_->closed = true;
    if (s_->stream) s_->stream->Close();
    s_->changed.NotifyAll();
    if (!s_->completed) {
      // Abandoned: the bridge goes (the daemon has its own session).
      asio::co_spawn(s_->api->executor,
                     PostDetached(s_->api, s_->api->ExecPath(s_->eid, "kill"), runloop::KillJson()), asio::detached);
    }
  }

  std::optional<int> exit_code() const override { return s_->exit; }
  std::string Diagnostics() const override { return s_->diag; }

 private:
  std::shared_ptr<StreamState> s_;
  bool eof_sent_ = false;
};

// One synchronous execute, as a Channel: its stdout once done, then EOF.
struct OneShotState {
  explicit OneShotState(const asio::any_io_executor& ex) : changed(ex) {}
  std::optional<absl::StatusOr<runloop::ExecutionView>> result;
  bool closed = false;
  internal::Condition changed;
};

asio::awaitable<void> RunOneShot(std::shared_ptr<RunloopApi> api, std::shared_ptr<OneShotState> s,
                                 std::string command) {
  absl::StatusOr<runloop::ExecutionView> v = co_await api->RunOnce(std::move(command));
  s->result = std::move(v);
  s->changed.NotifyAll();
}

class OneShotChannel final : public Channel {
 public:
  explicit OneShotChannel(std::shared_ptr<OneShotState> s) : s_(std::move(s)) {}
  ~OneShotChannel() override { Close(); }

  asio::awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf) override {
    if (buf.empty()) co_return absl::InvalidArgumentError("runloop: ReadSome with an empty buffer");
    while (!s_->closed && !s_->result) {
      const bool woken = co_await s_->changed.Wait();
      if (!woken) co_return absl::CancelledError("runloop: reading the command's output: cancelled");
    }
    if (s_->closed) co_return absl::UnavailableError("runloop: the command's channel was closed");
    const absl::StatusOr<runloop::ExecutionView>& r = *s_->result;
    if (!r.ok()) co_return r.status();
    const std::size_t n = std::min(buf.size(), r->stdout_text.size() - offset_);
    std::memcpy(buf.data(), r->stdout_text.data() + offset_, n);
    offset_ += n;
    co_return n;
  }
  asio::awaitable<absl::Status> Write(std::string_view bytes) override {
    if (s_->closed) co_return absl::UnavailableError("runloop: the command's channel was closed");
    if (bytes.empty()) co_return absl::OkStatus();
    co_return absl::FailedPreconditionError(
        "runloop: a one-shot execution has no stdin; input goes through the exchange tunnel instead");
  }
  void CloseWrite() override {}
  void Close() override {
    if (s_->closed) return;
    s_->closed = true;
    s_->changed.NotifyAll();
  }
  std::optional<int> exit_code() const override {
    if (!s_->result || !s_->result->ok()) return std::nullopt;
    return (*s_->result)->exit_status;
  }
  std::string Diagnostics() const override {
    if (!s_->result || !s_->result->ok()) return {};
    return Tail((*s_->result)->stderr_text);
  }

 private:
  std::shared_ptr<OneShotState> s_;
  std::size_t offset_ = 0;
};

}  // namespace

std::unique_ptr<Channel> StartStreamChannel(const asio::any_io_executor& ex, std::shared_ptr<RunloopApi> api,
                                            std::shared_ptr<StdinVerdict> verdict, std::string eid) {
  auto state = std::make_shared<StreamState>(ex);
  state->api = std::move(api);
  state->verdict = std::move(verdict);
  state->eid = std::move(eid);
  asio::co_spawn(ex, ReadLoop(state), asio::detached);
  return std::unique_ptr<Channel>(new StreamChannel(std::move(state)));
}

std::unique_ptr<Channel> StartOneShotChannel(const asio::any_io_executor& ex, std::shared_ptr<RunloopApi> api,
                                             std::string command) {
  auto state = std::make_shared<OneShotState>(ex);
  asio::co_spawn(ex, RunOneShot(std::move(api), state, std::move(command)), asio::detached);
  return std::unique_ptr<Channel>(new OneShotChannel(std::move(state)));
}

}  // namespace tether::runloop
