#include "host/native/e2b/envd_events.h"

#include <array>
#include <boost/json.hpp>
#include <cstring>
#include <limits>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tether/errors.h"

namespace tether::e2b {

namespace json = boost::json;

namespace {

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

}  // namespace

bool RetryableStatus(int status) { return status == 429 || status == 502 || status == 503 || status == 504; }

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
  // envd runs inside the sandbox: its words are data, escaped and bounded.
  const std::string message = PrintableMessage(std::string(StringOf(o.if_contains("message"))), 512);
  const std::string code_name = PrintableMessage(std::string(code->get_string()), 64);
  return absl::Status(StatusCodeOfConnect(code_name),
                      absl::StrCat(A(what), ": ", message.empty() ? code_name : message, " (", code_name, ")"));
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

}  // namespace tether::e2b
