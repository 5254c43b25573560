#include "host/native/e2b/e2b_channel.h"

#include <algorithm>
#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <boost/system/system_error.hpp>
#include <chrono>
#include <cstring>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "host/codec/connect_envelope.h"
#include "tether/errors.h"

namespace tether::e2b {

namespace asio = boost::asio;
namespace json = boost::json;

namespace {

constexpr std::size_t kReadBuffer = 64 * 1024;       // bytes per stream read
constexpr std::size_t kMaxQueuedInput = 1 << 20;      // stdin bytes accepted ahead of envd
constexpr int kStartAttempts = 5;                     // Start answered 429/502/503/504
constexpr std::chrono::milliseconds kStartBackoff{100};  // doubled per attempt
constexpr char kKeepaliveSeconds[] = "50";            // envd's keepalive events on a silent stream
constexpr int kUnaryAttempts = 5;                     // a unary call answered 429/502/503/504
constexpr std::chrono::milliseconds kUnaryBackoff{50};  // doubled per attempt

absl::Status Protocol(std::string_view what) { return MakeError(ErrorCode::kProtocol, what); }

// (Debian's absl has a string_view of its own.)
absl::string_view A(std::string_view s) { return {s.data(), s.size()}; }

// The body of one unary envd call, made outside any coroutine (g++ 12 and
// braced lists).
std::string PidBody(std::uint32_t pid) {
  json::object o;
  o["process"] = json::object{{"pid", pid}};
  return json::serialize(o);
}
std::string SendInputBody(std::uint32_t pid, std::string_view bytes) {
  json::object o;
  o["process"] = json::object{{"pid", pid}};
  o["input"] = json::object{{"stdin", absl::Base64Escape(A(bytes))}};
  return json::serialize(o);
}
std::string SignalBody(std::uint32_t pid, std::string_view signal) {
  json::object o;
  o["process"] = json::object{{"pid", pid}};
  o["signal"] = signal;
  return json::serialize(o);
}
std::string StartBody(const std::vector<std::string>& argv) {
  json::array args;
  for (std::size_t i = 1; i < argv.size(); ++i) args.emplace_back(argv[i]);
  json::object process;
  process["cmd"] = argv[0];
  process["args"] = std::move(args);
  json::object o;
  o["process"] = std::move(process);
  o["stdin"] = true;  // without it envd gives the child /dev/null
  return json::serialize(o);
}

// One unary envd call; answers 429/502/503/504 (the server, or E2B's proxy,
// says it did nothing) are sent again a few times.
asio::awaitable<absl::Status> Unary(std::shared_ptr<const EnvdSession> s, std::string method, std::string body) {
  net::Request r;
  r.method = "POST";
  r.target = absl::StrCat("/process.Process/", method);
  r.headers = s->HeadersFor("application/json");
  r.body = std::move(body);
  const std::string what = absl::StrCat("envd ", method);
  std::chrono::milliseconds backoff = kUnaryBackoff;
  for (int attempt = 1;; ++attempt) {
    absl::StatusOr<net::Response> resp = co_await s->client->Call(r);
    // No answer: whether it took effect is unknown, so it is not repeated
    // (the tunnel resends what the supervisor did not acknowledge).
    if (!resp.ok()) co_return absl::Status(resp.status().code(), absl::StrCat(what, ": ", resp.status().message()));
    if (net::IsSuccess(*resp)) co_return absl::OkStatus();
    if (!RetryableStatus(resp->status) || attempt >= kUnaryAttempts) co_return EnvdHttpError(*resp, what);
    asio::steady_timer t(co_await asio::this_coro::executor, backoff);
    co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
    backoff *= 2;
  }
}

class EnvdChannel;

// Stdin on its way: Write queues bytes here and returns; one pump sends
// them in order, in as few SendInput calls as it can (what piled up while a
// call was out goes in the next, up to kInputPiece), then CloseStdin when
// asked. Shared with the pump, which may outlive the channel.
struct StdinQueue {
  explicit StdinQueue(const asio::any_io_executor& ex) : wake(ex, std::chrono::steady_clock::time_point::max()) {}
  std::string pending;            // accepted, not yet sent (about kMaxQueuedInput at most)
  bool pumping = false;
  bool close_stdin = false;       // CloseStdin once `pending` is sent
  bool stopped = false;           // the channel was closed
  absl::Status failure;           // sticky
  asio::steady_timer wake;        // cancelled when space frees up or the queue fails
  EnvdChannel* owner = nullptr;   // told of a failure; null once the channel is closed
};

class EnvdChannel final : public Channel {
 public:
  EnvdChannel(asio::any_io_executor ex, std::shared_ptr<const EnvdSession> s, std::unique_ptr<net::BodyStream> stream)
      : ex_(std::move(ex)), s_(std::move(s)), stream_(std::move(stream)), raw_(kReadBuffer, '\0'),
        q_(std::make_shared<StdinQueue>(ex_)) {
    q_->owner = this;
  }
  ~EnvdChannel() override { Close(); }

  // Reads until the start event (the first one envd must send).
  asio::awaitable<absl::Status> AwaitStart() {
    while (!started_) {
      if (!failure_.ok()) co_return failure_;
      if (absl::Status st = co_await Step(); !st.ok()) co_return st;
    }
    co_return absl::OkStatus();
  }

  asio::awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf) override {
    while (out_pos_ == out_.size()) {
      if (closed_) co_return Closed();
      if (!failure_.ok()) co_return failure_;
      if (finished_) co_return std::size_t{0};
      if (absl::Status st = co_await Step(); !st.ok()) co_return st;
    }
    if (closed_) co_return Closed();
    const std::size_t n = std::min(buf.size(), out_.size() - out_pos_);
    std::memcpy(buf.data(), out_.data() + out_pos_, n);
    out_pos_ += n;
    if (out_pos_ == out_.size()) {
      out_.clear();
      out_pos_ = 0;
    }
    co_return n;
  }

  asio::awaitable<absl::Status> Write(std::string_view bytes) override {
    for (std::size_t off = 0; off < bytes.size(); off += kInputPiece) {
      while (true) {
        if (closed_) co_return Closed();
        if (!q_->failure.ok()) co_return q_->failure;
        if (stdin_closed_) co_return absl::FailedPreconditionError("envd: stdin was already closed");
        if (q_->pending.size() < kMaxQueuedInput) break;
        try {
          co_await q_->wake.async_wait(asio::as_tuple(asio::use_awaitable));
        } catch (const boost::system::system_error&) {
          co_return absl::CancelledError("envd: the write was cancelled");
        }
        asio::cancellation_state cs = co_await asio::this_coro::cancellation_state;
        if (cs.cancelled() != asio::cancellation_type::none) {
          co_return absl::CancelledError("envd: the write was cancelled");
        }
      }
      const std::string_view piece = bytes.substr(off, kInputPiece);
      q_->pending.append(piece.data(), piece.size());
      Pump();
    }
    co_return absl::OkStatus();
  }

  void CloseWrite() override {
    if (closed_ || stdin_closed_) return;
    stdin_closed_ = true;
    // Older envd has no CloseStdin; the supervisor ends input in-band.
    if (!s_->version.AtLeast(0, 5, 2)) return;
    q_->close_stdin = true;
    Pump();
  }

  void Close() override {
    if (closed_) return;
    closed_ = true;
    q_->stopped = true;
    q_->owner = nullptr;
    q_->wake.cancel();
    if (stream_ && finished_ && failure_.ok()) {
      // Its end-of-stream message came: only the HTTP body's end follows,
      // and the connection then goes back to the pool for the next call
      // (a later start's input skips TCP and TLS).
      net::DrainInBackground(ex_, std::move(stream_));
    } else if (stream_) {
      stream_->Close();
    }
    // Dropping envd's stream does not end the process: a bridge whose
    // channel is gone would linger. Best effort, in the background.
    if (started_ && !ended_) {
      asio::co_spawn(ex_, Unary(s_, "SendSignal", SignalBody(pid_, "SIGNAL_SIGKILL")),
                     [](std::exception_ptr, absl::Status) {});
    }
  }

  // The pump's failure: the channel as a whole has failed (a reader must
  // not wait for an answer to input that never arrived). Unless the
  // process is gone or going (it ended, envd no longer knows its pid, or
  // its stdin is already closed: FailedPrecondition, as for a start script
  // that answered one line and exited): then its stream ends by itself,
  // and what is still in it is read first.
  void FailFromStdin(const absl::Status& st) {
    if (ended_ || finished_ || st.code() == absl::StatusCode::kNotFound ||
        st.code() == absl::StatusCode::kFailedPrecondition) {
      return;
    }
    if (failure_.ok()) failure_ = st;
    if (stream_) stream_->Close();
  }

  std::optional<int> exit_code() const override { return exit_; }
  std::string Diagnostics() const override { return err_tail_; }

 private:
  static absl::Status Closed() { return absl::UnavailableError("the envd channel was closed"); }

  // Handles the next whole envelope, or reads more of the stream.
  asio::awaitable<absl::Status> Step() {
    absl::StatusOr<std::optional<codec::ConnectEnvelope>> e = dec_.Decode(&pending_);
    if (!e.ok()) {
      failure_ = Protocol(absl::StrCat("envd: ", e.status().message()));
      co_return failure_;
    }
    if (e->has_value()) co_return Handle(**e);
    absl::StatusOr<std::size_t> n = co_await stream_->ReadSome({raw_.data(), raw_.size()});
    if (closed_) co_return Closed();
    if (!failure_.ok()) co_return failure_;  // (stdin failed meanwhile)
    if (!n.ok()) {
      co_return absl::Status(n.status().code(), absl::StrCat("envd stream: ", n.status().message()));
    }
    if (*n == 0) {
      failure_ = absl::UnavailableError("envd stream cut: it ended without its end-of-stream message");
      co_return failure_;
    }
    pending_ = std::string_view(raw_.data(), *n);
    co_return absl::OkStatus();
  }

  absl::Status Handle(const codec::ConnectEnvelope& e) {
    if (e.end_stream) {
      absl::Status st = ParseEndStream(e.message, "envd");
      if (st.ok() && !started_) st = Protocol("envd: the process stream ended before its start event");
      if (!st.ok()) {
        failure_ = st;
        return st;
      }
      finished_ = true;
      return absl::OkStatus();
    }
    if (finished_) {
      failure_ = Protocol("envd: a message after the end of the stream");
      return failure_;
    }
    absl::StatusOr<ProcessEvent> ev = ParseProcessEvent(e.message);
    if (!ev.ok()) {
      failure_ = ev.status();
      return failure_;
    }
    if (!started_) {
      if (ev->kind != ProcessEvent::Kind::kStart) {
        failure_ = Protocol("envd: expected the start event first");
        return failure_;
      }
      started_ = true;
      pid_ = ev->pid;
      return absl::OkStatus();
    }
    switch (ev->kind) {
      case ProcessEvent::Kind::kData:
        if (out_.empty()) {
          out_ = std::move(ev->out);
          out_pos_ = 0;
        } else {
          out_.append(ev->out);
        }
        if (!ev->err.empty()) {
          err_tail_.append(ev->err);
          if (err_tail_.size() > kDiagnosticsBytes) err_tail_.erase(0, err_tail_.size() - kDiagnosticsBytes);
        }
        break;
      case ProcessEvent::Kind::kEnd:
        ended_ = true;
        exit_ = ev->exit;
        break;
      case ProcessEvent::Kind::kStart:
        failure_ = Protocol("envd: a second start event");
        return failure_;
      default:
        break;  // keepalive, and events a newer envd may add
    }
    return absl::OkStatus();
  }

  void Pump() {
    if (q_->pumping) return;
    q_->pumping = true;
    asio::co_spawn(ex_, RunPump(s_, q_, pid_), asio::detached);
  }

  static asio::awaitable<void> RunPump(std::shared_ptr<const EnvdSession> s, std::shared_ptr<StdinQueue> q,
                                       std::uint32_t pid) {
    while (!q->stopped && q->failure.ok()) {
      absl::Status st;
      if (!q->pending.empty()) {
        const std::size_t n = std::min(q->pending.size(), kInputPiece);
        std::string body = SendInputBody(pid, std::string_view(q->pending).substr(0, n));
        q->pending.erase(0, n);
        q->wake.cancel();  // room for a waiting Write
        st = co_await Unary(s, "SendInput", std::move(body));
      } else if (q->close_stdin) {
        q->close_stdin = false;
        (void)co_await Unary(s, "CloseStdin", PidBody(pid));  // fire and forget, but after the input
        continue;
      } else {
        break;
      }
      if (!st.ok() && !q->stopped) {
        q->failure = st;
        q->wake.cancel();
        if (q->owner != nullptr) q->owner->FailFromStdin(st);
      }
    }
    q->pumping = false;
  }

  asio::any_io_executor ex_;
  std::shared_ptr<const EnvdSession> s_;
  std::unique_ptr<net::BodyStream> stream_;
  codec::ConnectEnvelopeDecoder dec_;
  std::string raw_;            // the stream read buffer
  std::string_view pending_;   // its bytes not yet decoded
  std::string out_;            // stdout decoded, not yet returned
  std::size_t out_pos_ = 0;
  std::string err_tail_;
  std::uint32_t pid_ = 0;
  bool started_ = false, ended_ = false, finished_ = false, closed_ = false, stdin_closed_ = false;
  std::optional<int> exit_;
  absl::Status failure_;        // the stream's, sticky
  std::shared_ptr<StdinQueue> q_;
};

}  // namespace

net::Headers EnvdSession::HeadersFor(std::string_view content_type) const {
  net::Headers h;
  h.emplace_back("Content-Type", std::string(content_type));
  h.emplace_back("Connect-Protocol-Version", "1");
  h.emplace_back("E2b-Sandbox-Id", sandbox_id);
  h.emplace_back("E2b-Sandbox-Port", kEnvdPort);
  if (!access_token.empty()) h.emplace_back("X-Access-Token", access_token);
  return h;
}

asio::awaitable<absl::StatusOr<std::unique_ptr<Channel>>> OpenEnvdChannel(std::shared_ptr<const EnvdSession> session,
                                                                          std::unique_ptr<net::BodyStream> stream) {
  asio::any_io_executor ex = co_await asio::this_coro::executor;
  auto ch = std::make_unique<EnvdChannel>(ex, std::move(session), std::move(stream));
  if (absl::Status st = co_await ch->AwaitStart(); !st.ok()) co_return st;
  co_return std::unique_ptr<Channel>(std::move(ch));
}

asio::awaitable<absl::StatusOr<std::unique_ptr<Channel>>> StartProcess(std::shared_ptr<const EnvdSession> s,
                                                                       std::vector<std::string> argv) {
  if (argv.empty()) co_return absl::InvalidArgumentError("exec: empty argv");
  const std::string what = absl::StrCat("envd: starting ", argv[0]);
  const std::string body = codec::EncodeConnectEnvelope(StartBody(argv));
  std::chrono::milliseconds backoff = kStartBackoff;
  for (int attempt = 1;; ++attempt) {
    net::Request r;
    r.method = "POST";
    r.target = "/process.Process/Start";
    r.headers = s->HeadersFor("application/connect+json");
    // No Connect-Timeout-Ms: envd makes it the process's lifetime.
    r.headers.emplace_back("Keepalive-Ping-Interval", kKeepaliveSeconds);
    r.body = body;
    absl::StatusOr<std::unique_ptr<net::BodyStream>> stream = co_await s->client->Open(std::move(r));
    if (!stream.ok()) {
      co_return absl::Status(stream.status().code(), absl::StrCat(A(what), ": ", stream.status().message()));
    }
    if ((*stream)->head().status == 200) co_return co_await OpenEnvdChannel(s, std::move(*stream));
    net::Response head = co_await net::ReadErrorResponse(**stream);
    (*stream)->Close();
    absl::Status err = EnvdHttpError(head, what);
    if (!RetryableStatus(head.status) || attempt >= kStartAttempts) co_return err;
    asio::steady_timer t(co_await asio::this_coro::executor, backoff);
    co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
    backoff *= 2;
  }
}

}  // namespace tether::e2b
