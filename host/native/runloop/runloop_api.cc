#include "host/native/runloop/runloop_api.h"

#include <boost/json.hpp>
#include <chrono>
#include <cstdint>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tether/output_helpers.h"
#include "absl/strings/str_replace.h"
#include "host/support/random.h"
#include "tether/errors.h"
#include "tether/shell_setup.h"
#include "host/native/native_json.h"
#include "host/native/native_options.h"

namespace tether::runloop {

namespace json = boost::json;

namespace {

// (Debian's absl has a string_view of its own.)
absl::string_view A(std::string_view s) { return {s.data(), s.size()}; }
json::string_view J(std::string_view s) { return {s.data(), s.size()}; }

absl::Status Protocol(std::string_view what) {
  return MakeError(ErrorCode::kProtocol, absl::StrCat("runloop: ", std::string(what)));
}

// An integer 0..255 from a JSON number (1.0 is an encoder's way of writing 1).
std::optional<int> ByteInt(const json::value& v) {
  const std::optional<std::int64_t> n = native::JsonInteger(v);
  if (!n || *n < 0 || *n > 255) return std::nullopt;
  return static_cast<int>(*n);
}

}  // namespace

absl::StatusOr<std::string> CommandLine(const std::vector<std::string>& argv) {
  if (argv.empty()) return absl::InvalidArgumentError("runloop: exec with an empty argv");
  std::string line = "exec";
  for (const std::string& a : argv) {
    if (a.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(
          "runloop: an argument contains a NUL byte (a shell command line cannot carry it)");
    }
    if (!IsValidUtf8(a)) {
      return absl::InvalidArgumentError("runloop: an argument is not valid UTF-8 (Runloop's API takes JSON strings)");
    }
    absl::StrAppend(&line, " ", ShellQuote(a));
  }
  return line;
}

absl::StatusOr<std::string> ExecuteAsyncJson(std::string_view command, bool attach_stdin) {
  if (command.empty() || !IsValidUtf8(command) || command.find('\0') != std::string_view::npos) {
    return absl::InvalidArgumentError("runloop: a command must be non-empty valid UTF-8 without NUL");
  }
  json::object o;
  o["command"] = J(command);
  o["attach_stdin"] = attach_stdin;
  return json::serialize(o);
}

absl::StatusOr<std::string> ExecuteJson(std::string_view command, std::string_view command_id,
                                        int optimistic_timeout_seconds) {
  if (command.empty() || !IsValidUtf8(command) || command.find('\0') != std::string_view::npos) {
    return absl::InvalidArgumentError("runloop: a command must be non-empty valid UTF-8 without NUL");
  }
  if (optimistic_timeout_seconds < 0 || optimistic_timeout_seconds > kMaxOptimisticSeconds) {
    return absl::InvalidArgumentError(absl::StrCat("runloop: execute's optimistic timeout is 0..",
                                                   kMaxOptimisticSeconds, " s, not ", optimistic_timeout_seconds));
  }
  if (command_id.empty() || !IsValidUtf8(command_id)) {
    return absl::InvalidArgumentError("runloop: a command_id must be non-empty UTF-8");
  }
  json::object o;
  o["command"] = J(command);
  o["command_id"] = J(command_id);
  o["optimistic_timeout"] = optimistic_timeout_seconds;
  return json::serialize(o);
}

absl::StatusOr<std::string> SendStdinJson(std::string_view text) {
  if (text.size() > kMaxStdinTextBytes) {
    return absl::ResourceExhaustedError(absl::StrCat("runloop: ", text.size(), " bytes of stdin in one call, above ",
                                                     kMaxStdinTextBytes));
  }
  if (!IsValidUtf8(text)) {
    return absl::InvalidArgumentError("runloop: stdin text must be valid UTF-8 (send_std_in takes a JSON string)");
  }
  json::object o;
  o["text"] = J(text);
  return json::serialize(o);
}

std::string SendEofJson() { return R"({"text":null,"signal":"EOF"})"; }
std::string WaitCompletedJson() { return R"({"statuses":["completed"]})"; }
std::string KillJson() { return R"({"kill_process_group":true})"; }

std::string NewCommandId() {
  const auto ms = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  std::string b = internal::RandomBytes(16);
  for (int i = 0; i < 6; ++i) b[i] = static_cast<char>((ms >> (8 * (5 - i))) & 0xff);
  b[6] = static_cast<char>((b[6] & 0x0f) | 0x70);  // version 7
  b[8] = static_cast<char>((b[8] & 0x3f) | 0x80);  // RFC 4122 variant
  const std::string h = absl::BytesToHexString(A(b));
  return absl::StrCat(h.substr(0, 8), "-", h.substr(8, 4), "-", h.substr(12, 4), "-", h.substr(16, 4), "-",
                      h.substr(20));
}

absl::StatusOr<ExecutionView> ParseExecutionView(std::string_view body) {
  if (body.size() > kMaxViewBytes) {
    return absl::ResourceExhaustedError(absl::StrCat("runloop: an execution view of ", body.size(),
                                                     " bytes, above the limit of ", kMaxViewBytes));
  }
  boost::system::error_code ec;
  json::value v = json::parse(J(body), ec);
  if (ec) return Protocol(absl::StrCat("the execution view is not JSON (", ec.message(), ")"));
  if (!v.is_object()) return Protocol("the execution view is not a JSON object");
  const json::object& o = v.get_object();
  ExecutionView r;
  for (const auto& [key, out] : {std::pair<const char*, std::string*>{"execution_id", &r.execution_id},
                                 std::pair<const char*, std::string*>{"status", &r.status}}) {
    const json::value* f = o.if_contains(key);
    if (f == nullptr || !f->is_string() || f->get_string().empty()) {
      return Protocol(absl::StrCat("the execution view has no ", key, " string"));
    }
    out->assign(f->get_string().data(), f->get_string().size());
  }
  for (const auto& [key, out] : {std::pair<const char*, std::string*>{"stdout", &r.stdout_text},
                                 std::pair<const char*, std::string*>{"stderr", &r.stderr_text}}) {
    const json::value* f = o.if_contains(key);
    if (f == nullptr || f->is_null()) continue;
    if (!f->is_string()) return Protocol(absl::StrCat("the execution view's ", key, " is not a string"));
    out->assign(f->get_string().data(), f->get_string().size());
  }
  if (const json::value* t = o.if_contains("stdout_truncated"); t != nullptr && !t->is_null()) {
    if (!t->is_bool()) return Protocol("the execution view's stdout_truncated is not a boolean");
    r.stdout_truncated = t->get_bool();
  }
  const json::value* code = o.if_contains("exit_status");
  if (code != nullptr && !code->is_null()) {
    std::optional<int> n = ByteInt(*code);
    if (!n) return Protocol("the execution view's exit_status is not an integer in 0..255");
    r.exit_status = *n;
  }
  if (r.completed() && !r.exit_status) return Protocol("a completed execution view has no exit_status");
  return r;
}

absl::StatusOr<OutputChunk> ParseOutputChunk(std::string_view data) {
  boost::system::error_code ec;
  json::value v = json::parse(J(data), ec);
  if (ec) return Protocol(absl::StrCat("an output event is not JSON (", ec.message(), ")"));
  if (!v.is_object()) return Protocol("an output event is not a JSON object");
  const json::object& o = v.get_object();
  const json::value* out = o.if_contains("output");
  if (out == nullptr || !out->is_string()) return Protocol("an output event has no output string");
  OutputChunk c;
  c.output.assign(out->get_string().data(), out->get_string().size());
  if (const json::value* off = o.if_contains("offset"); off != nullptr && !off->is_null()) {
    if (off->is_int64() && off->get_int64() >= 0) {
      c.offset = static_cast<std::uint64_t>(off->get_int64());
    } else if (off->is_uint64()) {
      c.offset = off->get_uint64();
    } else {
      return Protocol("an output event's offset is not a non-negative integer");
    }
  }
  return c;
}

int ErrorEventCode(std::string_view data) {
  boost::system::error_code ec;
  json::value v = json::parse(J(data), ec);
  if (ec || !v.is_object()) return 0;
  const json::value* code = v.get_object().if_contains("code");
  if (code == nullptr) return 0;
  if (code->is_int64() && code->get_int64() > 0 && code->get_int64() < 1000) return static_cast<int>(code->get_int64());
  if (code->is_string()) {
    int n = 0;
    for (char ch : code->get_string()) {
      if (ch < '0' || ch > '9' || n > 100) return 0;
      n = n * 10 + (ch - '0');
    }
    return n;
  }
  return 0;
}

std::string MultipartBody(std::string_view boundary, std::string_view path, std::string_view bytes) {
  std::string b;
  b.reserve(bytes.size() + path.size() + 4 * boundary.size() + 256);
  absl::StrAppend(&b, "--", A(boundary), "\r\nContent-Disposition: form-data; name=\"path\"\r\n\r\n", A(path),
                  "\r\n--", A(boundary),
                  "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"file\"\r\n"
                  "Content-Type: application/octet-stream\r\n\r\n");
  b.append(bytes);
  absl::StrAppend(&b, "\r\n--", A(boundary), "--\r\n");
  return b;
}

absl::Status EffectHttpFailure(const net::Response& r, std::string_view what, std::string_view devbox_id) {
  if (r.status < 500 || r.status > 599) return HttpFailure(r, what, devbox_id);
  const absl::Status st = net::HttpError(r, what);
  return OutcomeUnknownError(absl::StrCat("runloop: ", std::string(st.message()),
                                          ": the call may have taken effect (the answer was lost on the way), and "
                                          "Runloop has no request id to ask about it: not sent again"));
}

std::string WithCallId(std::string_view command, std::string_view call_id) {
  return absl::StrCat("# tether-call ", A(call_id), "\n", A(command));
}

std::string NewCallId() { return absl::BytesToHexString(A(internal::RandomBytes(8))); }

absl::Status HttpFailure(const net::Response& r, std::string_view what, std::string_view devbox_id) {
  const absl::Status st = net::HttpError(r, what);
  const std::string id(devbox_id);
  if (r.status == 401 || r.status == 403) {
    return absl::Status(st.code(), absl::StrCat("runloop: the API key (RUNLOOP_API_KEY) was refused for devbox '",
                                                id, "' (", st.message(), ")"));
  }
  if (r.status == 404) {
    return absl::NotFoundError(
        absl::StrCat("runloop: devbox '", id, "' or its execution not found (", st.message(), ")"));
  }
  if (r.status == 408 || r.status == 429 || r.status >= 500) {
    return absl::UnavailableError(absl::StrCat("runloop: ", st.message()));
  }
  return absl::Status(st.code(), absl::StrCat("runloop: ", st.message()));
}

absl::Status Scrub(const absl::Status& st, std::string_view key) {
  return native::ScrubSecret(st, key, "<RUNLOOP_API_KEY>");
}

}  // namespace tether::runloop
