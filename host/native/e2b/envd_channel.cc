#include "host/native/e2b/envd_channel.h"

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
constexpr std::size_t kMaxErrorBody = 64 * 1024;      // a failed head's body, read for its message
constexpr int kStartAttempts = 5;                     // Start answered 429/502/503/504
constexpr std::chrono::milliseconds kStartBackoff{100};  // doubled per attempt
constexpr char kKeepaliveSeconds[] = "50";            // envd's keepalive events on a silent stream
constexpr int kUnaryAttempts = 5;                     // a unary call answered 429/502/503/504
constexpr std::chrono::milliseconds kUnaryBackoff{50};  // doubled per attempt

bool RetryableStatus(int status) { return status == 429 || status == 502 || status == 503 || status == 504; }

absl::Status Protocol(std::string_view what) { return MakeError(ErrorCode::kProtocol, what); }

// (Debian's absl has a string_view of its own.)
absl::string_view A(std::string_view s) { return {s.data(), s.size()}; }

const json::value* Field(const json::object& o, std::string_view camel, std::string_view snake = {}) {
  if (const json::value* v = o.if_contains(camel)) return v;
  if (!snake.empty()) return o.if_contains(snake);
  return nullptr;
}

std::optional<std::int64_t> IntOf(const json::value* v) {
  if (v == nullptr) return std::nullopt;
  if (v->is_int64()) return v->get_int64();
  if (v->is_uint64()) {
    if (v->get_uint64() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return std::nullopt;
    return static_cast<std::int64_t>(v->get_uint64());
  }
  if (v->is_double()) {
    const double d = v->get_double();
    if (d != static_cast<double>(static_cast<std::int64_t>(d)) || d > 9e15 || d < -9e15) return std::nullopt;
    return static_cast<std::int64_t>(d);
  }
  if (v->is_string()) {  // proto3 JSON allows numbers as strings
    std::int64_t n = 0;
    if (absl::SimpleAtoi(A(v->get_string()), &n)) return n;
  }
  return std::nullopt;
}

std::string_view StringOf(const json::value* v) {
  if (v == nullptr || !v->is_string()) return {};
  return v->get_string();
}

// Proto3 JSON bytes: standard base64 (padding optional); URL-safe accepted.
absl::Status DecodeBytes(const json::value* v, std::string_view field, std::string* out) {
  if (v == nullptr || v->is_null()) return absl::OkStatus();
  if (!v->is_string()) return Protocol(absl::StrCat("envd: ", A(field), " is not a base64 string"));
  const std::string_view b64 = v->get_string();
  if (absl::Base64Unescape(A(b64), out) || absl::WebSafeBase64Unescape(A(b64), out)) return absl::OkStatus();
  return Protocol(absl::StrCat("envd: ", A(field), " is not valid base64"));
}

// Go's names of the Linux signals (syscall.Signal.String()), as envd's
// status says them: "signal: killed".
constexpr std::array<std::string_view, 32> kGoSignalNames = {
    "",
    "hangup",
    "interrupt",
    "quit",
    "illegal instruction",
    "trace/breakpoint trap",
    "aborted",
    "bus error",
    "floating point exception",
    "killed",
    "user defined signal 1",
    "segmentation fault",
    "user defined signal 2",
    "broken pipe",
    "alarm clock",
    "terminated",
    "stack fault",
    "child exited",
    "continued",
    "stopped (signal)",
    "stopped",
    "stopped (tty input)",
    "stopped (tty output)",
    "urgent I/O condition",
    "CPU time limit exceeded",
    "file size limit exceeded",
    "virtual timer expired",
    "profiling timer expired",
    "window changed",
    "I/O possible",
    "power failure",
    "bad system call",
};
constexpr std::array<std::string_view, 32> kSignalAbbrevs = {
    "",     "HUP",  "INT",  "QUIT", "ILL",    "TRAP", "ABRT", "BUS",  "FPE",   "KILL", "USR1",
    "SEGV", "USR2", "PIPE", "ALRM", "TERM",   "STKFLT", "CHLD", "CONT", "STOP", "TSTP", "TTIN",
    "TTOU", "URG",  "XCPU", "XFSZ", "VTALRM", "PROF", "WINCH", "IO",   "PWR",   "SYS"};

// "killed", "SIGKILL", "KILL", "9" (with an optional " (core dumped)").
std::optional<int> SignalNumber(std::string_view name) {
  if (absl::EndsWith(A(name), " (core dumped)")) name.remove_suffix(std::strlen(" (core dumped)"));
  {
    const absl::string_view t = absl::StripAsciiWhitespace(A(name));
    name = std::string_view(t.data(), t.size());
  }
  int n = 0;
  if (absl::SimpleAtoi(A(name), &n)) return n > 0 && n < 128 ? std::optional<int>(n) : std::nullopt;
  for (std::size_t i = 1; i < kGoSignalNames.size(); ++i) {
    if (name == kGoSignalNames[i]) return static_cast<int>(i);
  }
  std::string_view abbrev = name;
  if (absl::StartsWith(A(abbrev), "SIG")) abbrev.remove_prefix(3);
  for (std::size_t i = 1; i < kSignalAbbrevs.size(); ++i) {
    if (abbrev == kSignalAbbrevs[i]) return static_cast<int>(i);
  }
  return std::nullopt;
}

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
    if (stream_) stream_->Close();
    // Dropping envd's stream does not end the process: a bridge whose
    // channel is gone would linger. Best effort, in the background.
    if (started_ && !ended_) {
      asio::co_spawn(ex_, Unary(s_, "SendSignal", SignalBody(pid_, "SIGNAL_SIGKILL")),
                     [](std::exception_ptr, absl::Status) {});
    }
  }

  // The pump's failure: the channel as a whole has failed (a reader must
  // not wait for an answer to input that never arrived). Unless the
  // process is gone (it ended, or envd no longer knows its pid): then its
  // stream ends by itself, and what is still in it is read first.
  void FailFromStdin(const absl::Status& st) {
    if (ended_ || finished_ || st.code() == absl::StatusCode::kNotFound) return;
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

absl::StatusOr<EnvdVersion> ParseEnvdVersion(std::string_view text) {
  const absl::string_view stripped = absl::StripAsciiWhitespace(A(text));
  std::string_view t(stripped.data(), stripped.size());
  if (absl::StartsWith(A(t), "v")) t.remove_prefix(1);
  t = t.substr(0, t.find_first_of("-+"));
  const std::vector<absl::string_view> parts = absl::StrSplit(A(t), '.');
  EnvdVersion v;
  int* fields[3] = {&v.major, &v.minor, &v.patch};
  if (parts.size() != 3) return absl::InvalidArgumentError(absl::StrCat("not an envd version: '", A(text.substr(0, 64)), "'"));
  for (int i = 0; i < 3; ++i) {
    if (!absl::SimpleAtoi(parts[i], fields[i]) || *fields[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("not an envd version: '", A(text.substr(0, 64)), "'"));
    }
  }
  return v;
}

net::Headers EnvdSession::HeadersFor(std::string_view content_type) const {
  net::Headers h;
  h.emplace_back("Content-Type", std::string(content_type));
  h.emplace_back("Connect-Protocol-Version", "1");
  h.emplace_back("E2b-Sandbox-Id", sandbox_id);
  h.emplace_back("E2b-Sandbox-Port", kEnvdPort);
  if (!access_token.empty()) h.emplace_back("X-Access-Token", access_token);
  return h;
}

std::optional<int> ExitFromEnd(std::optional<std::int64_t> exit_code, std::string_view status) {
  {
    const absl::string_view t = absl::StripAsciiWhitespace(A(status));
    status = std::string_view(t.data(), t.size());
  }
  if (absl::StartsWith(A(status), "signal")) {
    std::string_view name = status.substr(std::strlen("signal"));
    if (absl::StartsWith(A(name), ":")) name.remove_prefix(1);
    std::optional<int> sig = SignalNumber(name);
    if (!sig) return std::nullopt;
    return 128 + *sig;
  }
  if (absl::StartsWith(A(status), "exit status ")) {
    int code = 0;
    if (absl::SimpleAtoi(A(status.substr(std::strlen("exit status "))), &code) && code >= 0 && code <= 255) return code;
  }
  if (exit_code && *exit_code >= 0 && *exit_code <= 255) return static_cast<int>(*exit_code);
  return std::nullopt;
}

absl::StatusOr<ProcessEvent> ParseProcessEvent(std::string_view message) {
  boost::system::error_code ec;
  json::value v = json::parse(message, ec);
  if (ec || !v.is_object()) return Protocol("envd: a process event that is not a JSON object");
  ProcessEvent ev;
  const json::value* event = v.get_object().if_contains("event");
  if (event == nullptr || !event->is_object()) return ev;  // (no event: nothing to do)
  const json::object& e = event->get_object();
  if (const json::value* start = e.if_contains("start")) {
    if (!start->is_object()) return Protocol("envd: a start event that is not an object");
    std::optional<std::int64_t> pid = IntOf(start->get_object().if_contains("pid"));
    if (!pid || *pid <= 0 || *pid > std::numeric_limits<std::uint32_t>::max()) {
      return Protocol("envd: a start event without a valid pid");
    }
    ev.kind = ProcessEvent::Kind::kStart;
    ev.pid = static_cast<std::uint32_t>(*pid);
  } else if (const json::value* data = e.if_contains("data")) {
    if (!data->is_object()) return Protocol("envd: a data event that is not an object");
    ev.kind = ProcessEvent::Kind::kData;
    const json::object& d = data->get_object();
    if (absl::Status st = DecodeBytes(d.if_contains("stdout"), "stdout", &ev.out); !st.ok()) return st;
    if (absl::Status st = DecodeBytes(d.if_contains("stderr"), "stderr", &ev.err); !st.ok()) return st;
  } else if (const json::value* end = e.if_contains("end")) {
    if (!end->is_object()) return Protocol("envd: an end event that is not an object");
    const json::object& o = end->get_object();
    ev.kind = ProcessEvent::Kind::kEnd;
    ev.status = std::string(StringOf(Field(o, "status")));
    ev.error = std::string(StringOf(Field(o, "error")));
    std::optional<std::int64_t> code = IntOf(Field(o, "exitCode", "exit_code"));
    const json::value* exited = Field(o, "exited");
    // proto3 JSON leaves out zero values: an exited process without an
    // exitCode field exited 0.
    if (!code && exited != nullptr && exited->is_bool() && exited->get_bool()) code = 0;
    ev.exit = ExitFromEnd(code, ev.status);
  } else if (e.if_contains("keepalive") != nullptr) {
    ev.kind = ProcessEvent::Kind::kKeepalive;
  }
  return ev;
}

absl::StatusCode StatusCodeOfConnect(std::string_view code) {
  using C = absl::StatusCode;
  static constexpr std::pair<std::string_view, C> kCodes[] = {
      {"canceled", C::kUnavailable},
      {"unknown", C::kUnknown},
      {"invalid_argument", C::kInvalidArgument},
      {"deadline_exceeded", C::kUnavailable},
      {"not_found", C::kNotFound},
      {"already_exists", C::kAlreadyExists},
      {"permission_denied", C::kPermissionDenied},
      {"resource_exhausted", C::kResourceExhausted},
      {"failed_precondition", C::kFailedPrecondition},
      {"aborted", C::kAborted},
      {"out_of_range", C::kOutOfRange},
      {"unimplemented", C::kUnimplemented},
      {"internal", C::kInternal},
      {"unavailable", C::kUnavailable},
      {"data_loss", C::kDataLoss},
      {"unauthenticated", C::kUnauthenticated},
  };
  for (const auto& [name, c] : kCodes) {
    if (code == name) return c;
  }
  return C::kUnknown;
}

namespace {
// {"code":"...","message":"..."} as a Status; nullopt when it is not one.
std::optional<absl::Status> ConnectErrorOf(const json::value& v, std::string_view what) {
  if (!v.is_object()) return std::nullopt;
  const json::object& o = v.get_object();
  const json::value* code = o.if_contains("code");
  if (code == nullptr || !code->is_string()) return std::nullopt;
  std::string message(StringOf(o.if_contains("message")));
  if (message.size() > 512) message.resize(512);
  const std::string code_name(code->get_string());
  return absl::Status(StatusCodeOfConnect(code_name),
                      absl::StrCat(A(what), ": ", message.empty() ? code_name : message, " (", code_name.substr(0, 64), ")"));
}
}  // namespace

absl::Status ParseEndStream(std::string_view message, std::string_view what) {
  boost::system::error_code ec;
  json::value v = json::parse(message, ec);
  if (ec || !v.is_object()) return Protocol(absl::StrCat(A(what), ": an end-of-stream message that is not a JSON object"));
  const json::value* error = v.get_object().if_contains("error");
  if (error == nullptr || error->is_null()) return absl::OkStatus();
  std::optional<absl::Status> st = ConnectErrorOf(*error, what);
  if (!st) return Protocol(absl::StrCat(A(what), ": an end-of-stream error without a code"));
  return *st;
}

absl::Status EnvdHttpError(const net::Response& r, std::string_view what) {
  boost::system::error_code ec;
  json::value v = json::parse(r.body, ec);
  if (!ec) {
    if (std::optional<absl::Status> st = ConnectErrorOf(v, what)) {
      // A proxy's 5xx in Connect's words is still worth a retry.
      if (RetryableStatus(r.status)) {
        return absl::UnavailableError(st->message());
      }
      return *st;
    }
  }
  return net::HttpError(r, what);
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
    net::Response head = (*stream)->head();
    char buf[4096];
    while (head.body.size() < kMaxErrorBody) {
      absl::StatusOr<std::size_t> n = co_await (*stream)->ReadSome({buf, sizeof buf});
      if (!n.ok() || *n == 0) break;
      head.body.append(buf, *n);
    }
    (*stream)->Close();
    absl::Status err = EnvdHttpError(head, what);
    if (!RetryableStatus(head.status) || attempt >= kStartAttempts) co_return err;
    asio::steady_timer t(co_await asio::this_coro::executor, backoff);
    co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
    backoff *= 2;
  }
}

}  // namespace tether::e2b
