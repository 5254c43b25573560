#include "host/native/daytona/daytona_transport.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <variant>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "host/internal/condition.h"
#include "host/internal/random.h"
#include "host/native/daytona/daytona_api.h"
#include "host/native/native_options.h"
#include "host/native/native_transport.h"
#include "host/net/http.h"
#include "host/net/retry_after.h"
#include "protocol/sha256.h"
#include "tether/errors.h"
#include "tether/shell_setup.h"

namespace tether {

namespace asio = boost::asio;

namespace {

constexpr std::string_view kDefaultApiUrl = "https://app.daytona.io/api";  // the SDK's default
constexpr int kCallAttempts = 5;                          // a call answered 429 (a safe one also 502/503/504)
constexpr std::chrono::milliseconds kCallBackoff{100};    // doubled per attempt (a 429 without Retry-After)
constexpr int kExecAttempts = 3;                          // session + exec whose call failed transiently
constexpr int kExecChecks = 3;                            // an exec lost, found not to have run, sent again
constexpr int kMaxReopens = 6;                            // log stream reconnects per channel
constexpr std::uint64_t kMaxReplayBytes = 8u << 20;       // reconnect only while the replay is this small
constexpr std::chrono::milliseconds kUploadTimeout{300000};  // one bulk upload
constexpr std::size_t kDiagnosticsBytes = 4096;           // the stderr tail kept for messages
constexpr std::size_t kMaxQueuedInput = 1u << 20;         // input queued behind the POST under way

bool Cancelled(const absl::Status& st) { return st.code() == absl::StatusCode::kCancelled; }

// The two origins and the credentials, shared by the transport and every
// channel (a channel's session is deleted after the channel is gone).
struct DaytonaApi {
  std::shared_ptr<net::Client> api;      // the control plane
  std::shared_ptr<net::Client> toolbox;  // set once the sandbox was looked up
  std::shared_ptr<net::Client> upload;   // the toolbox, with kUploadTimeout
  std::string sandbox_id, key, org_id, ca_file;

  net::Headers Headers(std::string_view content_type = "application/json") const {
    net::Headers h;
    h.emplace_back("Authorization", absl::StrCat("Bearer ", key));
    if (!org_id.empty()) h.emplace_back("X-Daytona-Organization-ID", org_id);
    h.emplace_back("X-Daytona-Source", "tether");
    if (!content_type.empty()) h.emplace_back("Content-Type", std::string(content_type));
    h.emplace_back("Accept", "application/json");
    return h;
  }

  absl::Status Clean(const absl::Status& st) const { return daytona::Scrub(st, key); }

  // One call that is safe to repeat, sent again on 429 (after its
  // Retry-After) and 502/503/504. A 2xx answer is returned; others are errors.
  asio::awaitable<absl::StatusOr<net::Response>> Call(std::shared_ptr<net::Client> client, std::string method,
                                                      std::string target, std::string body,
                                                      std::string content_type = "application/json") {
    co_return co_await Send(std::move(client), std::move(method), std::move(target), std::move(body),
                            std::move(content_type), /*safe=*/true);
  }

  // One call that is not safe to repeat (an exec, an input): sent again only
  // after a 429 (refused before it took effect); a 5xx is OUTCOME_UNKNOWN
  // (daytona::EffectHttpFailure), never sent again here.
  asio::awaitable<absl::StatusOr<net::Response>> CallOnce(std::shared_ptr<net::Client> client, std::string method,
                                                          std::string target, std::string body) {
    co_return co_await Send(std::move(client), std::move(method), std::move(target), std::move(body),
                            "application/json", /*safe=*/false);
  }

  asio::awaitable<absl::StatusOr<net::Response>> Send(std::shared_ptr<net::Client> client, std::string method,
                                                      std::string target, std::string body,
                                                      std::string content_type, bool safe) {
    const std::string what = absl::StrCat(method, " ", target.substr(0, target.find('?')));
    std::chrono::milliseconds backoff = kCallBackoff;
    for (int attempt = 1;; ++attempt) {
      net::Request r;
      r.method = method;
      r.target = target;
      r.headers = Headers(body.empty() ? "" : content_type);
      r.body = body;
      absl::StatusOr<net::Response> resp = co_await client->Call(std::move(r));
      if (!resp.ok()) {
        co_return Clean(absl::Status(resp.status().code(), absl::StrCat("daytona: ", resp.status().message())));
      }
      if (net::IsSuccess(*resp)) co_return resp;
      const bool again = safe ? daytona::RetryableHttpStatus(resp->status) : resp->status == 429;
      if (!again || attempt >= kCallAttempts) {
        co_return Clean(safe ? daytona::HttpFailure(*resp, what, sandbox_id)
                             : daytona::EffectHttpFailure(*resp, what, sandbox_id));
      }
      std::optional<std::chrono::milliseconds> delay = backoff;
      if (resp->status == 429) delay = net::RetryDelay(*resp, backoff);
      if (!delay) {
        co_return Clean(absl::UnavailableError(absl::StrCat("daytona: ", what, " answered 429 with Retry-After ",
                                                            std::string(resp->header("Retry-After")), ", above the ",
                                                            net::kMaxRetryAfter.count(), " s tether waits")));
      }
      asio::steady_timer t(co_await asio::this_coro::executor, *delay);
      co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
      backoff *= 2;
    }
  }

  std::string SessionPath(std::string_view sid) const {
    return absl::StrCat("/process/session/", net::UrlEncode(sid));
  }
  std::string CommandPath(std::string_view sid, std::string_view cid) const {
    return absl::StrCat(SessionPath(sid), "/command/", net::UrlEncode(cid));
  }
};

// Deletes a session (its processes die with it); nobody waits for it.
asio::awaitable<void> DeleteSession(std::shared_ptr<DaytonaApi> api, std::string sid) {
  absl::StatusOr<net::Response> r = co_await api->Call(api->toolbox, "DELETE", api->SessionPath(sid), "");
  (void)r;
}

// What a channel and its input sender share (the sender outlives neither
// the channel's Close nor its destruction: it holds this by shared_ptr).
struct ChannelState {
  ChannelState(asio::any_io_executor ex, std::shared_ptr<DaytonaApi> a, std::string s, std::string c)
      : changed(ex), closed_cond(ex), api(std::move(a)), sid(std::move(s)), cid(std::move(c)) {}

  internal::Condition changed;      // input sent, a sender done
  internal::Condition closed_cond;  // notified once, by Close
  std::shared_ptr<DaytonaApi> api;
  std::string sid, cid;
  bool closed = false;
  // Input: complete lines go, a partial one waits for its newline.
  std::string pending;
  bool sending = false;
  absl::Status write_error;
  // Set when the channel is given up while open (an input that may have
  // been applied): reads and writes fail with it from then on.
  absl::Status broken;
  std::uint64_t input_posts = 0;

  // Runs `op` until it completes, the channel is closed or it breaks.
  template <typename T>
  asio::awaitable<absl::StatusOr<T>> Guard(asio::awaitable<absl::StatusOr<T>> op) {
    using namespace asio::experimental::awaitable_operators;
    if (closed) co_return absl::CancelledError("daytona: the channel was closed");
    if (!broken.ok()) co_return broken;
    std::variant<absl::StatusOr<T>, bool> r = co_await (std::move(op) || closed_cond.Wait());
    if (r.index() == 0 && !closed && broken.ok()) co_return std::get<0>(std::move(r));
    if (!closed && !broken.ok()) co_return broken;
    co_return absl::CancelledError("daytona: the channel was closed");
  }

  // Gives the channel up: `why` for every read and write from now on.
  void Break(absl::Status why) {
    broken = why;
    write_error = why;
    closed_cond.NotifyAll();  // (wakes a read under way; closed stays false)
    changed.NotifyAll();
  }
};

// Posts the queued complete lines, as many as one request may carry, until
// none are left: writes that come while a POST is under way go together.
asio::awaitable<void> SendInput(std::shared_ptr<ChannelState> s) {
  while (!s->closed && s->write_error.ok()) {
    std::size_t end = s->pending.rfind('\n');
    if (end == std::string::npos) break;
    ++end;
    if (end > daytona::kMaxInputBytes) {
      end = s->pending.rfind('\n', daytona::kMaxInputBytes - 1);
      if (end == std::string::npos) {
        s->write_error = absl::ResourceExhaustedError("daytona: an input line is longer than one request may carry");
        break;
      }
      ++end;
    }
    absl::StatusOr<std::string> body = daytona::InputRequestJson(std::string_view(s->pending).substr(0, end));
    if (!body.ok()) {
      s->write_error = body.status();
      break;
    }
    s->pending.erase(0, end);
    ++s->input_posts;
    absl::StatusOr<net::Response> r = co_await s->Guard(
        s->api->CallOnce(s->api->toolbox, "POST", absl::StrCat(s->api->CommandPath(s->sid, s->cid), "/input"), *body));
    if (!r.ok()) {
      const ErrorCode code = ErrorCodeOf(r.status());
      if (code == ErrorCode::kOutcomeUnknown || (code == ErrorCode::kUnavailable && !s->closed)) {
        // The input may have reached the command (a lost answer, a
        // connection that failed after the request went), or the toolbox
        // keeps refusing it: sent again it could be applied twice, and the
        // toolbox has no input offset to ask about. A channel whose input
        // is stuck is no use either: it is given up (UNAVAILABLE: a
        // reattach through a new bridge sends again, by the tunnel's own
        // offsets, what the supervisor did not get).
        s->Break(absl::UnavailableError(absl::StrCat(
            r.status().message(), "; the input is not sent again on this command: the channel is given up")));
        break;
      }
      if (r.status().code() == absl::StatusCode::kInvalidArgument ||
          r.status().code() == absl::StatusCode::kFailedPrecondition) {
        s->write_error = absl::UnavailableError(
            absl::StrCat("daytona: the command no longer takes input (", r.status().message(), ")"));
      } else {
        s->write_error = r.status();
      }
      break;
    }
    s->changed.NotifyAll();
  }
  s->sending = false;
  s->changed.NotifyAll();
}

// What ReadSome keeps between calls; in the shared state too, since a
// channel may be destroyed while a read it closed is still unwinding.
struct ReadState {
  std::unique_ptr<net::WebSocket> ws;
  daytona::LogDemuxer demux;
  std::uint64_t skip = 0;  // bytes of a replay already read before
  std::string out;         // stdout not yet read: at most one message (max_message)
  std::size_t out_head = 0;
  std::string err;         // the stderr tail
  bool eof = false;
  std::optional<int> exit_code;
  int reopens = 0, reopens_in_a_row = 0;
  absl::Status last_cut;
};

struct SharedChannel {
  bool reading = false;  // a ReadLog is under way
  std::shared_ptr<ChannelState> s;
  ReadState r;
};

asio::awaitable<absl::StatusOr<bool>> WaitTimer(asio::steady_timer& t) {
  auto [ec] = co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
  if (ec) co_return absl::CancelledError("daytona: cancelled");
  co_return true;
}

asio::awaitable<absl::StatusOr<std::optional<int>>> CommandExit(std::shared_ptr<ChannelState> s) {
  absl::StatusOr<net::Response> r =
      co_await s->Guard(s->api->Call(s->api->toolbox, "GET", s->api->CommandPath(s->sid, s->cid), ""));
  if (!r.ok()) co_return r.status();
  absl::StatusOr<std::optional<int>> code = daytona::ParseCommandAnswer(r->body);
  if (!code.ok()) co_return s->api->Clean(code.status());
  co_return code;
}

// Opens the log stream again; it replays from byte 0, so what was read is
// skipped. Gives up (the tunnel then reattaches through a new bridge) when
// the replay would be large or the stream keeps failing.
asio::awaitable<absl::Status> Reopen(std::shared_ptr<SharedChannel> c) {
  ChannelState& s = *c->s;
  ReadState& r = c->r;
  if (r.demux.consumed() > kMaxReplayBytes || r.reopens_in_a_row >= kMaxReopens) {
    co_return absl::UnavailableError(absl::StrCat(
        "daytona: the command's log stream ended early after ", r.demux.consumed(), " bytes (", r.last_cut.message(),
        "); not reopened: ",
        r.demux.consumed() > kMaxReplayBytes ? "its replay from byte 0 would be too long" : "it keeps failing"));
  }
  if (r.reopens_in_a_row > 0) {
    asio::steady_timer t(co_await asio::this_coro::executor, kCallBackoff * (1 << std::min(r.reopens_in_a_row, 4)));
    absl::StatusOr<bool> waited = co_await s.Guard(WaitTimer(t));
    if (!waited.ok()) co_return waited.status();
  }
  ++r.reopens;
  ++r.reopens_in_a_row;
  absl::StatusOr<std::unique_ptr<net::WebSocket>> ws = co_await s.Guard(s.api->toolbox->OpenWebSocket(
      absl::StrCat(s.api->CommandPath(s.sid, s.cid), "/logs?follow=true"), s.api->Headers(""), {}));
  if (!ws.ok()) {
    const absl::StatusCode code = ws.status().code();
    if (code == absl::StatusCode::kCancelled || code == absl::StatusCode::kNotFound ||
        code == absl::StatusCode::kUnauthenticated || code == absl::StatusCode::kPermissionDenied) {
      co_return s.api->Clean(
          absl::Status(code, absl::StrCat("daytona: reopening the log stream: ", ws.status().message())));
    }
    r.last_cut = ws.status();
    co_return absl::OkStatus();  // the next read tries again (or gives up)
  }
  r.ws = *std::move(ws);
  r.skip = r.demux.consumed();
  co_return absl::OkStatus();
}

asio::awaitable<absl::StatusOr<std::size_t>> ReadLog(std::shared_ptr<SharedChannel> c, std::span<char> buf) {
  ChannelState& s = *c->s;
  ReadState& r = c->r;
  for (;;) {
    if (s.closed) co_return absl::UnavailableError("daytona: the channel was closed");
    if (!s.broken.ok()) co_return s.broken;
    if (r.out_head < r.out.size()) {
      const std::size_t n = std::min(buf.size(), r.out.size() - r.out_head);
      std::memcpy(buf.data(), r.out.data() + r.out_head, n);
      r.out_head += n;
      if (r.out_head == r.out.size()) {
        r.out.clear();
        r.out_head = 0;
      }
      co_return n;
    }
    if (r.eof) co_return 0;
    if (!r.ws) {
      absl::Status st = co_await Reopen(c);
      if (!st.ok()) co_return st;
      continue;
    }
    absl::StatusOr<net::WebSocketMessage> m = co_await s.Guard(r.ws->Read());
    if (s.closed) co_return absl::UnavailableError("daytona: the channel was closed");
    if (!s.broken.ok()) co_return s.broken;
    if (!m.ok()) {
      if (Cancelled(m.status())) co_return m.status();  // nothing consumed
      // The stream ended: closed normally once the command is over, else cut.
      const bool normal = r.ws->close_code() == 1000;
      r.ws.reset();
      r.last_cut = m.status();
      if (normal) {
        absl::StatusOr<std::optional<int>> code = co_await CommandExit(c->s);
        if (!code.ok()) co_return code.status();
        if (code->has_value()) {
          r.exit_code = **code;
          r.eof = true;
        }
      }
      continue;
    }
    std::string_view data = m->data;
    const std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(r.skip, data.size()));
    data.remove_prefix(k);
    r.skip -= k;
    const std::size_t before = r.out.size();
    r.demux.Feed(data, &r.out, &r.err);
    if (r.out.size() > before) r.reopens_in_a_row = 0;
    if (r.err.size() > 2 * kDiagnosticsBytes) r.err.erase(0, r.err.size() - kDiagnosticsBytes);
  }
}

// A session command as a Channel (its stdin, stdout and exit).
class DaytonaChannel final : public Channel {
 public:
  DaytonaChannel(std::shared_ptr<ChannelState> s, std::unique_ptr<net::WebSocket> ws, asio::any_io_executor ex)
      : c_(std::make_shared<SharedChannel>()), ex_(std::move(ex)) {
    c_->s = std::move(s);
    c_->r.ws = std::move(ws);
  }
  ~DaytonaChannel() override { Close(); }

  asio::awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf) override {
    if (buf.empty()) co_return absl::InvalidArgumentError("daytona: ReadSome with an empty buffer");
    std::shared_ptr<SharedChannel> c = c_;
    // One read at a time, even when a caller starts one while a read it
    // abandoned still unwinds (Session::Drain after a cancelled Receive):
    // the WebSocket takes one Read at a time and must not lose a message.
    while (c->reading) {
      const bool woken = co_await c->s->changed.Wait();
      if (!woken) co_return absl::CancelledError("daytona: reading the log: cancelled");
    }
    c->reading = true;
    absl::StatusOr<std::size_t> n = co_await ReadLog(c, buf);
    c->reading = false;
    c->s->changed.NotifyAll();
    co_return n;
  }

  asio::awaitable<absl::Status> Write(std::string_view bytes) override {
    std::shared_ptr<ChannelState> s = c_->s;
    if (s->closed) co_return absl::UnavailableError("daytona: the channel was closed");
    if (!s->write_error.ok()) co_return s->write_error;
    s->pending.append(bytes);
    if (!s->sending && s->pending.find('\n') != std::string::npos) {
      s->sending = true;
      asio::co_spawn(ex_, SendInput(s), asio::detached);
    }
    // Backpressure: at most kMaxQueuedInput waits behind the POST under way.
    while (s->pending.size() > kMaxQueuedInput && s->sending && s->write_error.ok() && !s->closed) {
      const bool woken = co_await s->changed.Wait();
      if (!woken) co_return absl::CancelledError("daytona: writing input: cancelled");
    }
    if (s->closed) co_return absl::UnavailableError("daytona: the channel was closed");
    co_return s->write_error;
  }

  void CloseWrite() override {}  // an async command never sees EOF (capabilities: stdin_eof false)

  void Close() override {
    ChannelState& s = *c_->s;
    if (s.closed) return;
    s.closed = true;
    s.closed_cond.NotifyAll();
    s.changed.NotifyAll();
    if (c_->r.ws) c_->r.ws->Close();
    asio::co_spawn(ex_, DeleteSession(s.api, s.sid), asio::detached);
  }

  std::optional<int> exit_code() const override { return c_->r.exit_code; }

  std::string Diagnostics() const override {
    const std::string& e = c_->r.err;
    std::string d = e.size() > kDiagnosticsBytes ? e.substr(e.size() - kDiagnosticsBytes) : e;
    if (c_->r.reopens > 0) absl::StrAppend(&d, " [daytona: the log stream was reopened ", c_->r.reopens, " times]");
    return d;
  }

 private:
  std::shared_ptr<SharedChannel> c_;
  asio::any_io_executor ex_;
};

class DaytonaTransport final : public native::NativeTransport {
 public:
  DaytonaTransport(asio::any_io_executor ex, DaytonaOptions o, std::shared_ptr<DaytonaApi> api)
      : NativeTransport(ex, {"daytona", o.sandbox_id, absl::StrCat("daytona sandbox ", o.sandbox_id)},
                        o.upload_progress),
        ex_(std::move(ex)),
        o_(std::move(o)),
        api_(std::move(api)) {}

  ChannelCapabilities capabilities() const override {
    ChannelCapabilities c;
    c.exact_bytes = false;  // input is a JSON string; the log drops NUL, adds newlines, demuxes on marker bytes
    c.stdin_eof = false;    // an async session command never sees EOF
    c.streaming = true;     // the log streams while the command runs
    c.costly_bytes = true;
    c.cut_prone = true;     // a WebSocket through proxies
    return c;
  }
  asio::awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(std::vector<std::string> argv) override {
    absl::StatusOr<std::string> line = daytona::CommandLine(argv);
    if (!line.ok()) co_return line.status();
    absl::StatusOr<std::string> exec_body = daytona::ExecRequestJson(*line);
    if (!exec_body.ok()) co_return exec_body.status();
    if (absl::Status st = co_await EnsureToolbox(); !st.ok()) co_return st;
    absl::Status last;
    for (int attempt = 1; attempt <= kExecAttempts; ++attempt) {
      const std::string sid = absl::StrCat("tether-", absl::BytesToHexString(internal::RandomBytes(8)));
      absl::Status made = co_await MakeSession(sid);
      if (!made.ok()) {
        last = made;
        if (ErrorCodeOf(made) == ErrorCode::kOutcomeUnknown) {
          asio::co_spawn(ex_, DeleteSession(api_, sid), asio::detached);  // (nothing ran in it)
          continue;
        }
        if (last.code() == absl::StatusCode::kUnavailable) continue;
        co_return last;
      }
      absl::StatusOr<std::string> cid = co_await StartCommand(sid, *exec_body);
      if (!cid.ok()) {
        asio::co_spawn(ex_, DeleteSession(api_, sid), asio::detached);
        last = api_->Clean(cid.status());
        // (OUTCOME_UNKNOWN: the command may have started: deleting the
        // session kills it, and it is not started again.)
        if (last.code() == absl::StatusCode::kUnavailable && ErrorCodeOf(last) == ErrorCode::kUnavailable) continue;
        co_return last;
      }
      absl::StatusOr<std::unique_ptr<net::WebSocket>> ws = co_await api_->toolbox->OpenWebSocket(
          absl::StrCat(api_->CommandPath(sid, *cid), "/logs?follow=true"), api_->Headers(""), {});
      if (!ws.ok() && ws.status().code() != absl::StatusCode::kUnavailable) {
        asio::co_spawn(ex_, DeleteSession(api_, sid), asio::detached);
        co_return api_->Clean(absl::Status(ws.status().code(),
                                           absl::StrCat("daytona: the command's log stream: ", ws.status().message())));
      }
      auto state = std::make_shared<ChannelState>(ex_, api_, sid, *cid);
      // A stream that failed transiently is opened again by the first read.
      co_return std::unique_ptr<Channel>(new DaytonaChannel(
          std::move(state), ws.ok() ? *std::move(ws) : std::unique_ptr<net::WebSocket>(), ex_));
    }
    co_return last;
  }

 protected:
  // The bulk upload into a temporary name beside `path`, then one command
  // checks its sha256, chmods it and renames it into place.
  asio::awaitable<absl::Status> Put(std::string path, std::string_view bytes, int mode, bool known_missing) override {
    // (Named: g++ 12 destroys a temporary made inside a co_await twice.)
    const Uploader upload = [this, path](std::string tmp, std::string_view b) {
      return Upload(path, std::move(tmp), b);
    };
    co_return co_await PutByUpload(path, bytes, mode, known_missing, daytona::kMaxFileBytes, upload);
  }

 private:
  // POST /process/session with our own random id. Its answer lost (5xx), it
  // is sent again: the id is ours, so a 409 (the id exists) then means the
  // lost attempt made it. OUTCOME_UNKNOWN when every answer was lost.
  asio::awaitable<absl::Status> MakeSession(const std::string& sid) {
    bool maybe_made = false;
    for (int attempt = 1;; ++attempt) {
      absl::StatusOr<net::Response> made =
          co_await api_->CallOnce(api_->toolbox, "POST", "/process/session", daytona::SessionRequestJson(sid));
      if (made.ok()) co_return absl::OkStatus();
      if (maybe_made && absl::StrContains(made.status().message(), "HTTP 409")) co_return absl::OkStatus();
      if (ErrorCodeOf(made.status()) != ErrorCode::kOutcomeUnknown || attempt >= kCallAttempts) {
        co_return made.status();
      }
      maybe_made = true;
      asio::steady_timer t(co_await asio::this_coro::executor, kCallBackoff * (1 << (attempt - 1)));
      co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
    }
  }

  // POST .../exec into our fresh session; the command's id. Its answer lost
  // (5xx), the session's command list (the SDK's getSession) tells whether
  // it started: one command is ours, none means it did not start (sent
  // again, at most kExecChecks times). OUTCOME_UNKNOWN when the list cannot
  // be read (the caller deletes the session, which ends what may run).
  asio::awaitable<absl::StatusOr<std::string>> StartCommand(const std::string& sid, const std::string& exec_body) {
    for (int check = 1;; ++check) {
      absl::StatusOr<net::Response> ex =
          co_await api_->CallOnce(api_->toolbox, "POST", absl::StrCat(api_->SessionPath(sid), "/exec"), exec_body);
      if (ex.ok()) co_return daytona::ParseExecAnswer(ex->body);
      if (ErrorCodeOf(ex.status()) != ErrorCode::kOutcomeUnknown) co_return ex.status();
      absl::StatusOr<net::Response> listed = co_await api_->Call(api_->toolbox, "GET", api_->SessionPath(sid), "");
      absl::StatusOr<std::vector<std::string>> ids =
          listed.ok() ? daytona::ParseSessionCommands(listed->body) : listed.status();
      if (!ids.ok()) {
        co_return OutcomeUnknownError(absl::StrCat(ex.status().message(), "; whether it started cannot be told (",
                                                   ids.status().message(), "): it is not started again"));
      }
      if (ids->size() == 1) co_return ids->front();
      if (!ids->empty()) {
        co_return OutcomeUnknownError(absl::StrCat(ex.status().message(), "; its session holds ", ids->size(),
                                                   " commands, not one: it is not started again"));
      }
      if (check >= kExecChecks) co_return ex.status();
    }
  }

  // Finds the toolbox as the SDK does: the sandbox's toolboxProxyUrl, else
  // the API's /toolbox-proxy-url answer.
  asio::awaitable<absl::Status> EnsureToolbox() {
    if (api_->toolbox) co_return absl::OkStatus();
    const std::string id = net::UrlEncode(o_.sandbox_id);
    absl::StatusOr<net::Response> r = co_await api_->Call(api_->api, "GET", absl::StrCat("/sandbox/", id), "");
    if (!r.ok()) co_return NotFoundSays(r.status());
    absl::StatusOr<daytona::SandboxView> view = daytona::ParseSandbox(r->body);
    if (!view.ok()) co_return api_->Clean(view.status());
    if (!view->state.empty() && view->state != "started") {
      co_return absl::FailedPreconditionError(absl::StrCat("daytona: sandbox '", o_.sandbox_id, "' is ",
                                                           view->state, ", not started: start it first"));
    }
    std::string proxy = view->toolbox_proxy_url;
    if (proxy.empty()) {
      absl::StatusOr<net::Response> p =
          co_await api_->Call(api_->api, "GET", absl::StrCat("/sandbox/", id, "/toolbox-proxy-url"), "");
      if (!p.ok()) co_return NotFoundSays(p.status());
      absl::StatusOr<std::string> url = daytona::ParseProxyUrl(p->body);
      if (!url.ok()) co_return api_->Clean(url.status());
      proxy = *url;
    }
    if (api_->toolbox) co_return absl::OkStatus();  // another call got there first
    absl::StatusOr<net::Url> url = net::ParseUrl(daytona::ToolboxBase(proxy, o_.sandbox_id));
    if (!url.ok() || (url->scheme != "https" && url->scheme != "http")) {
      co_return absl::UnavailableError(absl::StrCat(
          "daytona: the toolbox URL the API gave is not usable: ",
          url.ok() ? absl::StrCat("scheme ", url->scheme) : std::string(url.status().message())));
    }
    net::ClientOptions co;
    co.url = *url;
    co.tls.ca_file = o_.ca_file;
    co.max_body = daytona::kMaxAnswerBytes;
    co.max_message = 16u << 20;
    absl::StatusOr<std::shared_ptr<net::Client>> toolbox = net::Client::Make(ex_, co);
    if (!toolbox.ok()) co_return toolbox.status();
    co.request_timeout = kUploadTimeout;
    absl::StatusOr<std::shared_ptr<net::Client>> upload = net::Client::Make(ex_, co);
    if (!upload.ok()) co_return upload.status();
    api_->toolbox = *toolbox;
    api_->upload = *upload;
    co_return absl::OkStatus();
  }

  absl::Status NotFoundSays(const absl::Status& st) const {
    if (st.code() != absl::StatusCode::kNotFound) return st;
    return absl::NotFoundError(absl::StrCat("daytona: sandbox '", o_.sandbox_id, "' not found (", st.message(), ")"));
  }

  // POST /files/bulk-upload of `bytes` at `tmp` (`path` names it in messages).
  asio::awaitable<absl::Status> Upload(std::string path, std::string tmp, std::string_view bytes) {
    if (absl::Status st = co_await EnsureToolbox(); !st.ok()) co_return st;
    std::string boundary;
    do {
      boundary = absl::StrCat("tether-", absl::BytesToHexString(internal::RandomBytes(16)));
    } while (bytes.find(boundary) != std::string_view::npos);
    absl::StatusOr<net::Response> r =
        co_await api_->Call(api_->upload, "POST", "/files/bulk-upload", daytona::BulkUploadBody(tmp, bytes, boundary),
                            absl::StrCat("multipart/form-data; boundary=", boundary));
    if (!r.ok()) {
      co_return absl::Status(r.status().code(), absl::StrCat("uploading ", path, ": ", r.status().message()));
    }
    co_return absl::OkStatus();
  }

  asio::any_io_executor ex_;
  DaytonaOptions o_;
  std::shared_ptr<DaytonaApi> api_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<Transport>> MakeDaytonaTransport(asio::any_io_executor ex, DaytonaOptions o) {
  if (o.sandbox_id.empty()) return absl::InvalidArgumentError("daytona: a sandbox id is required (--sandbox ID)");
  if (!native::PlainId(o.sandbox_id, ".")) {
    return absl::InvalidArgumentError("daytona: a sandbox id is 1-128 letters, digits, '.', '-' and '_'");
  }
  bool jwt = false;
  if (o.api_key.empty()) o.api_key = native::Env("DAYTONA_API_KEY");
  if (o.api_key.empty()) {
    o.api_key = native::Env("DAYTONA_JWT_TOKEN");
    jwt = !o.api_key.empty();
  }
  if (o.api_key.empty()) {
    return absl::UnauthenticatedError(
        "daytona: set DAYTONA_API_KEY (or DAYTONA_JWT_TOKEN with DAYTONA_ORGANIZATION_ID)");
  }
  if (!native::HeaderSafe(o.api_key)) {
    return absl::InvalidArgumentError("daytona: the API key contains a space or a control character");
  }
  if (o.organization_id.empty() && jwt) o.organization_id = native::Env("DAYTONA_ORGANIZATION_ID");
  if (jwt && o.organization_id.empty()) {
    return absl::UnauthenticatedError("daytona: DAYTONA_ORGANIZATION_ID is required with DAYTONA_JWT_TOKEN");
  }
  if (!native::HeaderSafe(o.organization_id)) {
    return absl::InvalidArgumentError("daytona: the organization id contains a space or a control character");
  }
  if (o.api_url.empty()) o.api_url = native::Env("DAYTONA_API_URL");
  if (o.api_url.empty()) o.api_url = native::Env("DAYTONA_SERVER_URL");
  if (o.api_url.empty()) o.api_url = std::string(kDefaultApiUrl);
  absl::StatusOr<net::Url> url = native::ParseApiUrl("daytona", o.api_url);
  if (!url.ok()) return url.status();
  net::ClientOptions co;
  co.url = *url;
  co.tls.ca_file = o.ca_file;
  co.max_body = daytona::kMaxAnswerBytes;
  absl::StatusOr<std::shared_ptr<net::Client>> api_client = net::Client::Make(ex, co);
  if (!api_client.ok()) return api_client.status();
  auto api = std::make_shared<DaytonaApi>();
  api->api = *api_client;
  api->sandbox_id = o.sandbox_id;
  api->key = o.api_key;
  api->org_id = jwt ? o.organization_id : std::string();
  api->ca_file = o.ca_file;
  return std::shared_ptr<Transport>(new DaytonaTransport(std::move(ex), std::move(o), std::move(api)));
}

}  // namespace tether
