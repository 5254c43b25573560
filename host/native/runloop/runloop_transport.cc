#include "host/native/runloop/runloop_transport.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "host/internal/condition.h"
#include "host/internal/random.h"
#include "host/native/runloop/runloop_api.h"
#include "host/net/http.h"
#include "protocol/sha256.h"
#include "tether/output_helpers.h"
#include "tether/shell_setup.h"

namespace tether {

namespace asio = boost::asio;

namespace {

constexpr std::string_view kDefaultBaseUrl = "https://api.runloop.ai";  // the SDK's default
constexpr int kCallAttempts = 6;                        // a call that failed transiently
constexpr std::chrono::milliseconds kCallBackoff{100};  // doubled per attempt, up to kMaxBackoff
constexpr std::chrono::milliseconds kMaxBackoff{2000};
constexpr std::chrono::milliseconds kCallTimeout{60000};     // a call; long polls hold ~25 s
constexpr std::chrono::milliseconds kUploadTimeout{300000};  // one upload_file
constexpr int kStreamFailures = 8;          // SSE (re)connects in a row that failed without progress
constexpr int kMaxLongPolls = 400;          // wait_for_status rounds (408 each ~25 s): ~2.8 h
constexpr std::size_t kReadBuffer = 64 * 1024;        // one SSE read
constexpr std::size_t kMaxBuffered = 2u << 20;        // stdout read ahead of the caller
// stdin is batched: a Write is queued and returns; one send_std_in carries
// everything queued, at most one per kStdinInterval while writes keep
// coming (the first after a pause goes at once), so a stream of small
// acknowledgements costs ~5 requests/s instead of one per frame.
constexpr std::chrono::milliseconds kStdinInterval{200};
constexpr std::size_t kMaxQueuedStdin = 1u << 20;     // a Write waits while more is queued
constexpr std::size_t kDiagnosticsBytes = 4096;       // the stderr tail kept for messages
constexpr std::size_t kMaxErrorBody = 64 * 1024;      // a failed stream's body, read for its message
constexpr std::size_t kCheckFirstBytes = 64 * 1024;   // larger files: ask whether they are there first
constexpr const char* kLastN = "100000";             // execute's last_n: every line of a reply

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

asio::awaitable<void> Sleep(std::chrono::milliseconds d) {
  asio::steady_timer t(co_await asio::this_coro::executor, d);
  co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
}

std::string Tail(std::string_view s) {
  return std::string(s.size() <= kDiagnosticsBytes ? s : s.substr(s.size() - kDiagnosticsBytes));
}

// The REST calls, shared by the transport and every execution in flight
// (a background reader or a kill outlives a channel closed early).
struct RunloopApi {
  std::shared_ptr<net::Client> calls;   // request_timeout kCallTimeout
  std::shared_ptr<net::Client> files;   // request_timeout kUploadTimeout
  std::string devbox_id, api_key;

  std::string Base() const { return absl::StrCat("/v1/devboxes/", net::UrlEncode(devbox_id)); }
  std::string ExecPath(std::string_view eid, std::string_view what) const {
    return absl::StrCat(Base(), "/executions/", net::UrlEncode(eid), what.empty() ? "" : "/", std::string(what));
  }
  net::Headers Headers(std::string_view content_type = "application/json") const {
    net::Headers h;
    h.emplace_back("Authorization", absl::StrCat("Bearer ", api_key));
    if (!content_type.empty()) h.emplace_back("Content-Type", std::string(content_type));
    h.emplace_back("Accept", "application/json");
    return h;
  }
  absl::Status Fail(const absl::Status& st) const { return runloop::Scrub(st, api_key); }

  // POST `target` with `body`, sent again after a transient failure when
  // `repeatable` says the call may be repeated: kAnyFailure (idempotent),
  // kNotStarted (only after 429/502/503/504). 408 is returned as is (a long
  // poll's "not yet").
  enum class Repeat { kNever, kNotStarted, kAnyFailure };
  asio::awaitable<absl::StatusOr<net::Response>> Post(std::string target, std::string body, Repeat repeat) {
    std::chrono::milliseconds backoff = kCallBackoff;
    for (int attempt = 1;; ++attempt) {
      net::Request r;
      r.method = "POST";
      r.target = target;
      r.headers = Headers();
      r.body = body;
      absl::StatusOr<net::Response> resp = co_await calls->Call(std::move(r));
      bool again = false;
      if (!resp.ok()) {
        again = repeat == Repeat::kAnyFailure && resp.status().code() == absl::StatusCode::kUnavailable;
        if (!again || attempt >= kCallAttempts) {
          co_return Fail(absl::Status(resp.status().code(), absl::StrCat("runloop: ", resp.status().message())));
        }
      } else {
        const int s = resp->status;
        again = (repeat != Repeat::kNever && runloop::RetryableHttpStatus(s)) ||
                (repeat == Repeat::kAnyFailure && s >= 500);
        if (!again || attempt >= kCallAttempts) co_return resp;
      }
      co_await Sleep(backoff);
      backoff = std::min(backoff * 2, kMaxBackoff);
    }
  }

  // A 2xx view, or the failure as a Status (`what` names the call).
  absl::StatusOr<runloop::ExecutionView> View(const absl::StatusOr<net::Response>& resp, std::string_view what) const {
    if (!resp.ok()) return resp.status();
    if (!net::IsSuccess(*resp)) return Fail(runloop::HttpFailure(*resp, what, devbox_id));
    absl::StatusOr<runloop::ExecutionView> v = runloop::ParseExecutionView(resp->body);
    if (!v.ok()) return Fail(v.status());
    return v;
  }

  // wait_for_status until completed (a 408 means "poll again").
  asio::awaitable<absl::StatusOr<runloop::ExecutionView>> WaitCompleted(std::string eid) {
    const std::string target = absl::StrCat(ExecPath(eid, "wait_for_status"), "?last_n=", kLastN);
    for (int round = 0; round < kMaxLongPolls; ++round) {
      absl::StatusOr<net::Response> resp = co_await Post(target, runloop::WaitCompletedJson(), Repeat::kAnyFailure);
      if (resp.ok() && resp->status == 408) continue;
      absl::StatusOr<runloop::ExecutionView> v = View(resp, "POST .../wait_for_status");
      if (!v.ok()) co_return v.status();
      if (v->completed()) co_return v;
    }
    co_return absl::DeadlineExceededError(absl::StrCat("runloop: execution ", eid, " did not complete"));
  }

  // One wait_for_status round: the completed view, or nullopt on a 408.
  asio::awaitable<absl::StatusOr<std::optional<runloop::ExecutionView>>> PollCompleted(std::string eid) {
    const std::string target = absl::StrCat(ExecPath(eid, "wait_for_status"), "?last_n=", kLastN);
    absl::StatusOr<net::Response> resp = co_await Post(target, runloop::WaitCompletedJson(), Repeat::kAnyFailure);
    if (resp.ok() && resp->status == 408) co_return std::nullopt;
    absl::StatusOr<runloop::ExecutionView> v = View(resp, "POST .../wait_for_status");
    if (!v.ok()) co_return v.status();
    if (!v->completed()) co_return std::nullopt;
    co_return std::optional<runloop::ExecutionView>(*std::move(v));
  }

  // execute (synchronous, idempotent by command_id) until completed.
  asio::awaitable<absl::StatusOr<runloop::ExecutionView>> RunOnce(std::string command) {
    const std::string id = runloop::NewCommandId();
    absl::StatusOr<std::string> body = runloop::ExecuteJson(command, id, runloop::kMaxOptimisticSeconds);
    if (!body.ok()) co_return body.status();
    absl::StatusOr<net::Response> resp =
        co_await Post(absl::StrCat(Base(), "/execute?last_n=", kLastN), *body, Repeat::kAnyFailure);
    absl::StatusOr<runloop::ExecutionView> v = View(resp, "POST .../execute");
    if (!v.ok()) co_return v.status();
    if (!v->completed()) v = co_await WaitCompleted(v->execution_id);
    if (!v.ok()) co_return v.status();
    if (v->stdout_truncated) {
      co_return absl::DataLossError("runloop: the service truncated a command's stdout (stdout_truncated)");
    }
    co_return v;
  }

  asio::any_io_executor executor;  // where detached calls (kill, EOF) run
};

// Fire-and-forget POSTs that hold the API alive.
asio::awaitable<void> PostDetached(std::shared_ptr<RunloopApi> api, std::string target, std::string body) {
  (void)co_await api->Post(std::move(target), std::move(body), RunloopApi::Repeat::kAnyFailure);
}

// What the transport learned about stdin (Prepare, or a channel that saw it).
struct StdinVerdict {
  enum State { kUnknown, kWorks, kKills } state = kUnknown;
};

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

// Reads a failed stream's body (bounded) to build its error.
asio::awaitable<net::Response> ErrorResponse(net::BodyStream& stream) {
  net::Response r = stream.head();
  std::array<char, 4096> tmp;
  while (r.body.size() < kMaxErrorBody) {
    absl::StatusOr<std::size_t> n = co_await stream.ReadSome(std::span<char>(tmp));
    if (!n.ok() || *n == 0) break;
    r.body.append(tmp.data(), *n);
  }
  co_return r;
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
    if (!opened.ok()) {
      why = opened.status();
    } else if ((*opened)->head().status != 200) {
      net::Response r = co_await ErrorResponse(**opened);
      why = runloop::HttpFailure(r, "GET .../stream_stdout_updates", api.devbox_id);
      if (why.code() != absl::StatusCode::kUnavailable) co_return co_await FailStream(s, why);
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
    co_await Sleep(backoff);
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

// One send_std_in with `body`; detects an execution that stdin killed.
asio::awaitable<absl::Status> PostStdin(std::shared_ptr<StreamState> s, std::string body) {
  absl::StatusOr<net::Response> resp = co_await s->api->Post(s->api->ExecPath(s->eid, "send_std_in"), std::move(body),
                                                             RunloopApi::Repeat::kAnyFailure);
  absl::Status st;
  if (!resp.ok()) {
    st = resp.status();
  } else if (!net::IsSuccess(*resp)) {
    st = runloop::HttpFailure(*resp, "POST .../send_std_in", s->api->devbox_id);
    // A 4xx other than auth and not-found: the execution is no longer running.
    if (st.code() == absl::StatusCode::kInvalidArgument || st.code() == absl::StatusCode::kFailedPrecondition) {
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
    absl::Status st = co_await PostStdin(s, std::move(body));
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

// The probe Prepare() runs: reads one line and prints it back.
constexpr std::string_view kStdinProbe = "IFS= read -r l; printf 'tether-stdin:%s\\n' \"$l\"";

class RunloopTransport final : public Transport {
 public:
  RunloopTransport(asio::any_io_executor ex, RunloopOptions o, std::shared_ptr<RunloopApi> api)
      : ex_(std::move(ex)), o_(std::move(o)), api_(std::move(api)), verdict_(std::make_shared<StdinVerdict>()) {}

  std::string_view name() const override { return "runloop"; }
  ChannelCapabilities capabilities() const override {
    ChannelCapabilities c;
    c.exact_bytes = false;  // JSON strings both ways, output decoded as UTF-8
    c.costly_bytes = true;
    if (OneShot()) {
      c.stdin_eof = false;
      c.streaming = false;
      c.cut_prone = false;
    } else {
      c.stdin_eof = true;   // send_std_in's EOF signal
      c.streaming = true;
      c.cut_prone = true;   // SSE streams end every few seconds
    }
    return c;
  }
  std::string sandbox_id() const override { return o_.devbox_id; }
  asio::any_io_executor executor() const override { return ex_; }

  asio::awaitable<absl::Status> Prepare() override {
    if (o_.mode != RunloopOptions::Mode::kAuto || verdict_->state != StdinVerdict::kUnknown) {
      co_return absl::OkStatus();
    }
    absl::StatusOr<std::string> body = runloop::ExecuteAsyncJson(kStdinProbe, true);
    if (!body.ok()) co_return body.status();
    absl::StatusOr<net::Response> resp =
        co_await api_->Post(absl::StrCat(api_->Base(), "/execute_async"), *body, RunloopApi::Repeat::kNotStarted);
    absl::StatusOr<runloop::ExecutionView> v = api_->View(resp, "POST .../execute_async");
    if (!v.ok()) co_return v.status();
    const std::string eid = v->execution_id;
    absl::StatusOr<std::string> line = runloop::SendStdinJson("ok\n");
    resp = co_await api_->Post(api_->ExecPath(eid, "send_std_in"), *line, RunloopApi::Repeat::kAnyFailure);
    absl::StatusOr<runloop::ExecutionView> after = api_->View(resp, "POST .../send_std_in");
    bool kills = false;
    if (!after.ok()) {
      // A 4xx here: the execution was gone by the time stdin arrived.
      if (after.status().code() != absl::StatusCode::kInvalidArgument) co_return after.status();
      kills = true;
    } else if (after->completed()) {
      kills = true;
    } else {
      absl::StatusOr<runloop::ExecutionView> done = co_await api_->WaitCompleted(eid);
      if (!done.ok()) co_return done.status();
      kills = done->exit_status != 0 || done->stdout_text != "tether-stdin:ok\n";
    }
    verdict_->state = kills ? StdinVerdict::kKills : StdinVerdict::kWorks;
    co_return absl::OkStatus();
  }

  asio::awaitable<absl::StatusOr<SandboxInfo>> Probe() override {
    if (info_) co_return *info_;
    absl::StatusOr<SandboxInfo> info =
        co_await ShellProbe(runner_, absl::StrCat("runloop devbox ", o_.devbox_id), "");
    if (!info.ok()) co_return info.status();
    info_ = *info;
    co_return *info;
  }

  asio::awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(std::vector<std::string> argv) override {
    absl::StatusOr<std::string> line = runloop::CommandLine(argv);
    if (!line.ok()) co_return line.status();
    if (OneShot()) {
      auto state = std::make_shared<OneShotState>(ex_);
      asio::co_spawn(ex_, RunOneShot(api_, state, *std::move(line)), asio::detached);
      co_return std::unique_ptr<Channel>(new OneShotChannel(std::move(state)));
    }
    absl::StatusOr<std::string> body = runloop::ExecuteAsyncJson(*line, true);
    if (!body.ok()) co_return body.status();
    absl::StatusOr<net::Response> resp =
        co_await api_->Post(absl::StrCat(api_->Base(), "/execute_async"), *body, RunloopApi::Repeat::kNotStarted);
    absl::StatusOr<runloop::ExecutionView> v = api_->View(resp, "POST .../execute_async");
    if (!v.ok()) co_return v.status();
    auto state = std::make_shared<StreamState>(ex_);
    state->api = api_;
    state->verdict = verdict_;
    state->eid = v->execution_id;
    asio::co_spawn(ex_, ReadLoop(state), asio::detached);
    co_return std::unique_ptr<Channel>(new StreamChannel(std::move(state)));
  }

  asio::awaitable<absl::Status> PutFile(std::string path, std::string_view bytes, int mode) override {
    co_return co_await Put(std::move(path), bytes, mode, false);
  }
  asio::awaitable<absl::Status> PutNewFile(std::string path, std::string_view bytes, int mode) override {
    co_return co_await Put(std::move(path), bytes, mode, true);
  }

 private:
  bool OneShot() const {
    return o_.mode == RunloopOptions::Mode::kExchange ||
           (o_.mode == RunloopOptions::Mode::kAuto && verdict_->state == StdinVerdict::kKills);
  }

  // upload_file into a temporary name beside `path`, then one command
  // checks its sha256, chmods and renames it: never a partial file at `path`.
  asio::awaitable<absl::Status> Put(std::string path, std::string_view bytes, int mode, bool known_missing) {
    if (bytes.size() > runloop::kMaxFileBytes) {
      co_return absl::ResourceExhaustedError(absl::StrCat("runloop: ", path, " has ", bytes.size(),
                                                          " bytes, above the upload limit of ",
                                                          runloop::kMaxFileBytes));
    }
    if (path.empty() || path[0] != '/' || !IsValidUtf8(path) || path.find('\0') != std::string::npos ||
        path.size() > kMaxSandboxPath) {
      co_return absl::InvalidArgumentError("runloop: an upload path must be absolute UTF-8 without NUL");
    }
    const std::string hash = protocol::Sha256Hex(bytes);
    const std::string key = absl::StrCat(path, "\n", hash);
    if (installed_.count(key)) co_return absl::OkStatus();
    if (!known_missing && bytes.size() > kCheckFirstBytes) {
      absl::StatusOr<bool> have = co_await ShellHasFile(runner_, "runloop: ", path, hash);
      if (!have.ok()) co_return have.status();
      if (*have) {
        installed_.insert(key);
        co_return absl::OkStatus();
      }
    }
    const std::string tmp =
        absl::StrCat(path, ".up.", hash.substr(0, 16), ".", absl::BytesToHexString(internal::RandomBytes(4)));
    if (o_.upload_progress) o_.upload_progress(0, bytes.size());
    if (absl::Status st = co_await Upload(tmp, bytes); !st.ok()) co_return st;
    if (o_.upload_progress) o_.upload_progress(bytes.size(), bytes.size());
    if (absl::Status st = co_await ShellPlaceFile(runner_, "runloop: ", tmp, path, hash, mode, bytes.size());
        !st.ok()) {
      co_return st;
    }
    installed_.insert(key);
    co_return absl::OkStatus();
  }

  // POST upload_file (multipart): safe to repeat (a temporary name).
  asio::awaitable<absl::Status> Upload(const std::string& path, std::string_view bytes) {
    std::string boundary;
    std::string body;
    do {
      boundary = absl::StrCat("tether-", absl::BytesToHexString(internal::RandomBytes(16)));
    } while (bytes.find(boundary) != std::string_view::npos);
    body = runloop::MultipartBody(boundary, path, bytes);
    std::chrono::milliseconds backoff = kCallBackoff;
    for (int attempt = 1;; ++attempt) {
      net::Request r;
      r.method = "POST";
      r.target = absl::StrCat(api_->Base(), "/upload_file");
      r.headers = api_->Headers(absl::StrCat("multipart/form-data; boundary=", boundary));
      r.body = body;
      absl::StatusOr<net::Response> resp = co_await api_->files->Call(std::move(r));
      absl::Status st;
      if (!resp.ok()) {
        st = absl::Status(resp.status().code(),
                          absl::StrCat("runloop: uploading ", path, ": ", resp.status().message()));
      } else if (net::IsSuccess(*resp)) {
        co_return absl::OkStatus();
      } else {
        st = runloop::HttpFailure(*resp, absl::StrCat("POST .../upload_file (", path, ")"), o_.devbox_id);
      }
      if (st.code() != absl::StatusCode::kUnavailable || attempt >= kCallAttempts) co_return api_->Fail(st);
      co_await Sleep(backoff);
      backoff = std::min(backoff * 2, kMaxBackoff);
    }
  }

  // The shell runner for Probe and PutFile: one synchronous execute per
  // script (no stdin; every setup script is idempotent).
  asio::awaitable<absl::StatusOr<ScriptResult>> RunScript(std::string script, std::string_view input) {
    if (!input.empty()) {
      co_return absl::FailedPreconditionError("runloop: setup scripts run without stdin here");
    }
    absl::StatusOr<std::string> line = runloop::CommandLine({"/bin/sh", "-c", script});
    if (!line.ok()) co_return line.status();
    absl::StatusOr<runloop::ExecutionView> v = co_await api_->RunOnce(*std::move(line));
    if (!v.ok()) co_return v.status();
    if (v->stdout_text.size() > kMaxScriptOutput) {
      co_return absl::DataLossError("the devbox answered a setup command with more output than expected");
    }
    ScriptResult out;
    out.out = std::move(v->stdout_text);
    out.diag = Tail(v->stderr_text);
    out.exit_code = v->exit_status.value_or(-1);
    co_return out;
  }

  asio::any_io_executor ex_;
  RunloopOptions o_;
  std::shared_ptr<RunloopApi> api_;
  std::shared_ptr<StdinVerdict> verdict_;
  std::optional<SandboxInfo> info_;
  std::set<std::string> installed_;  // path + sha256 verified in this devbox
  ShellRunner runner_ = [this](std::string script, std::string_view input) {
    return RunScript(std::move(script), input);
  };
};

}  // namespace

absl::StatusOr<std::shared_ptr<Transport>> MakeRunloopTransport(asio::any_io_executor ex, RunloopOptions o) {
  if (o.devbox_id.empty()) return absl::InvalidArgumentError("runloop: a devbox id is required (--devbox ID)");
  if (o.devbox_id.size() > 128) return absl::InvalidArgumentError("runloop: the devbox id is too long (128 at most)");
  for (char c : o.devbox_id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    if (!ok) return absl::InvalidArgumentError("runloop: a devbox id is letters, digits, '-' and '_'");
  }
  if (o.api_key.empty()) o.api_key = Env("RUNLOOP_API_KEY");
  if (o.api_key.empty()) return absl::UnauthenticatedError("runloop: set RUNLOOP_API_KEY to your API key");
  for (char c : o.api_key) {
    if (static_cast<unsigned char>(c) < 0x21 || c == 0x7f) {
      return absl::InvalidArgumentError("runloop: RUNLOOP_API_KEY contains a space or a control character");
    }
  }
  if (o.api_url.empty()) o.api_url = Env("RUNLOOP_BASE_URL");
  if (o.api_url.empty()) o.api_url = std::string(kDefaultBaseUrl);
  absl::StatusOr<net::Url> url = net::ParseUrl(o.api_url);
  if (!url.ok()) return absl::InvalidArgumentError(absl::StrCat("runloop: the API URL: ", url.status().message()));
  if (url->scheme != "https" && url->scheme != "http") {
    return absl::InvalidArgumentError(absl::StrCat(
        "runloop: the API URL must be https:// (or http:// to a loopback address), not ", url->scheme, "://"));
  }
  net::ClientOptions co;
  co.url = *url;
  co.tls.ca_file = o.ca_file;
  co.max_body = runloop::kMaxViewBytes;
  co.request_timeout = kCallTimeout;
  absl::StatusOr<std::shared_ptr<net::Client>> calls = net::Client::Make(ex, co);
  if (!calls.ok()) return calls.status();
  co.max_body = 1 << 20;  // upload_file answers: only read for errors
  co.request_timeout = kUploadTimeout;
  absl::StatusOr<std::shared_ptr<net::Client>> files = net::Client::Make(ex, co);
  if (!files.ok()) return files.status();
  auto api = std::make_shared<RunloopApi>();
  api->calls = *calls;
  api->files = *files;
  api->devbox_id = o.devbox_id;
  api->api_key = o.api_key;
  api->executor = ex;
  return std::shared_ptr<Transport>(new RunloopTransport(std::move(ex), std::move(o), std::move(api)));
}

}  // namespace tether
