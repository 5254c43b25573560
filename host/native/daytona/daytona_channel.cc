#include "host/native/daytona/daytona_channel.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <algorithm>
#include <cstring>
#include <optional>
#include <variant>

#include "host/support/condition.h"
#include "host/net/retry_after.h"
#include "tether/errors.h"

namespace tether::daytona {

namespace asio = boost::asio;

asio::awaitable<absl::StatusOr<net::Response>> DaytonaApi::Send(std::shared_ptr<net::Client> client, std::string method,
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
    const bool again = safe ? RetryableHttpStatus(resp->status) : resp->status == 429;
    if (!again || attempt >= kCallAttempts) {
      co_return Clean(safe ? HttpFailure(*resp, what, sandbox_id)
                           : EffectHttpFailure(*resp, what, sandbox_id));
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

// Deletes a session (its processes die with it); nobody waits for it.
asio::awaitable<void> DeleteSession(std::shared_ptr<DaytonaApi> api, std::string sid) {
  absl::StatusOr<net::Response> r = co_await api->Call(api->toolbox, "DELETE", api->SessionPath(sid), "");
  (void)r;
}

namespace {

constexpr int kMaxReopens = 6;                       // log stream reconnects per channel
constexpr std::uint64_t kMaxReplayBytes = 8u << 20;  // reconnect only while the replay is this small
constexpr std::size_t kDiagnosticsBytes = 4096;      // the stderr tail kept for messages
constexpr std::size_t kMaxQueuedInput = 1u << 20;    // input queued behind the POST under way

bool Cancelled(const absl::Status& st) { return st.code() == absl::StatusCode::kCancelled; }

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
    if (end > kMaxInputBytes) {
      end = s->pending.rfind('\n', kMaxInputBytes - 1);
      if (end == std::string::npos) {
        s->write_error = absl::ResourceExhaustedError("daytona: an input line is longer than one request may carry");
        break;
      }
      ++end;
    }
    absl::StatusOr<std::string> body = InputRequestJson(std::string_view(s->pending).substr(0, end));
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
  LogDemuxer demux;
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
  absl::StatusOr<std::optional<int>> code = ParseCommandAnswer(r->body);
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

}  // namespace

std::unique_ptr<Channel> MakeDaytonaChannel(asio::any_io_executor ex, std::shared_ptr<DaytonaApi> api, std::string sid,
                                            std::string cid, std::unique_ptr<net::WebSocket> ws) {
  auto state = std::make_shared<ChannelState>(ex, std::move(api), std::move(sid), std::move(cid));
  return std::unique_ptr<Channel>(new DaytonaChannel(std::move(state), std::move(ws), std::move(ex)));
}

}  // namespace tether::daytona
