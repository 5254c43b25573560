#include "host/native/boat/boat_api.h"

#include <boost/json.hpp>
#include <algorithm>
#include <cstdint>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tether/output_helpers.h"
#include "absl/strings/str_replace.h"
#include "tether/errors.h"
#include "tether/shell_setup.h"
#include "host/native/native_json.h"
#include "host/native/native_options.h"

namespace tether::boat {

namespace json = boost::json;

namespace {

// (Debian's absl has a string_view of its own.)
absl::string_view A(std::string_view s) { return {s.data(), s.size()}; }

absl::Status Protocol(std::string_view what) {
  return MakeError(ErrorCode::kProtocol, absl::StrCat("boat: the command's answer ", std::string(what)));
}

}  // namespace

absl::StatusOr<std::string> CommandLine(const std::vector<std::string>& argv) {
  if (argv.empty()) return absl::InvalidArgumentError("boat: exec with an empty argv");
  std::string line = "exec";
  for (const std::string& a : argv) {
    if (a.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError("boat: an argument contains a NUL byte (a shell command line cannot carry it)");
    }
    absl::StrAppend(&line, " ", ShellQuote(a));
  }
  return line;
}

absl::StatusOr<std::string> CommandRequestJson(std::string_view command, int timeout_seconds) {
  if (timeout_seconds < 1 || timeout_seconds > kMaxTimeoutSeconds) {
    return absl::InvalidArgumentError(absl::StrCat("boat: a command timeout is 1..", kMaxTimeoutSeconds,
                                                   " seconds (Boat's cap), not ", timeout_seconds));
  }
  if (!IsValidUtf8(command)) {
    return absl::InvalidArgumentError("boat: the command line is not valid UTF-8 (Boat's API takes JSON strings)");
  }
  json::object o;
  o["command"] = json::string_view(command.data(), command.size());
  o["timeoutSeconds"] = timeout_seconds;
  return json::serialize(o);
}

absl::StatusOr<std::string> FileRequestJson(std::string_view path, std::string_view bytes) {
  if (path.empty() || path[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat("boat: a file path must be absolute, not '",
                                                   absl::CHexEscape(A(path.substr(0, 256))), "'"));
  }
  if (path.size() > kMaxSandboxPath || path.find('\0') != std::string_view::npos || !IsValidUtf8(path)) {
    return absl::InvalidArgumentError("boat: a file path must be valid UTF-8 without NUL, at most 4096 bytes");
  }
  if (bytes.size() > kMaxFileBytes) {
    return absl::ResourceExhaustedError(absl::StrCat("boat: a file of ", bytes.size(), " bytes is above the limit of ",
                                                     kMaxFileBytes, " bytes for one upload"));
  }
  json::object o;
  o["path"] = json::string_view(path.data(), path.size());
  o["content"] = absl::Base64Escape(A(bytes));
  return json::serialize(o);
}

absl::StatusOr<CommandResult> ParseCommandResponse(std::string_view body) {
  if (body.size() > kMaxResponseBytes) {
    return absl::ResourceExhaustedError(absl::StrCat("boat: the command's answer has ", body.size(),
                                                     " bytes, above the limit of ", kMaxResponseBytes));
  }
  boost::system::error_code ec;
  json::value v = json::parse(json::string_view(body.data(), body.size()), ec);
  if (ec) return Protocol(absl::StrCat("is not JSON (", ec.message(), ")"));
  if (!v.is_object()) return Protocol("is not a JSON object");
  const json::object& o = v.get_object();
  CommandResult r;
  if (const json::value* t = o.if_contains("timedOut"); t != nullptr && !t->is_null()) {
    if (!t->is_bool()) return Protocol("has a timedOut that is not a boolean");
    r.timed_out = t->get_bool();
  }
  for (const auto& [key, out] : {std::pair<const char*, std::string*>{"stdout", &r.stdout_text},
                                 std::pair<const char*, std::string*>{"stderr", &r.stderr_text}}) {
    const json::value* f = o.if_contains(key);
    if (f == nullptr || f->is_null()) continue;
    if (!f->is_string()) return Protocol(absl::StrCat("has a ", key, " that is not a string"));
    out->assign(f->get_string().data(), f->get_string().size());
  }
  const json::value* code = o.if_contains("exitCode");
  if (code == nullptr || code->is_null()) {
    if (!r.timed_out) return Protocol("has no exitCode");
    r.exit_code = -1;
    return r;
  }
  const std::optional<std::int64_t> integer = native::JsonInteger(*code);
  if (!integer) return Protocol("has an exitCode that is not an integer");
  std::int64_t n = *integer;
  if (n < 0 || n > 255) {
    if (!r.timed_out) return Protocol(absl::StrCat("has an exitCode out of 0..255 (", n, ")"));
    n = -1;
  }
  r.exit_code = static_cast<int>(n);
  return r;
}

std::string WithCallId(std::string_view command, std::string_view call_id) {
  return absl::StrCat("# tether-call ", A(call_id), "\n", A(command));
}

bool RetryableHttpStatus(int status) { return status == 429 || status == 502 || status == 503 || status == 504; }

absl::Status CommandHttpFailure(const net::Response& r, std::string_view what, std::string_view sandbox_id) {
  if (r.status < 500 || r.status > 599) return HttpFailure(r, what, sandbox_id);
  const absl::Status st = net::HttpError(r, what);
  return OutcomeUnknownError(absl::StrCat("boat: ", st.message(),
                                          ": the command may have run (the answer was lost on the way) and Boat "
                                          "has no request id to ask about it: not sent again"));
}

absl::Status HttpFailure(const net::Response& r, std::string_view what, std::string_view sandbox_id) {
  const absl::Status st = net::HttpError(r, what);
  const std::string id(sandbox_id);
  if (r.status == 401 || r.status == 403) {
    return absl::Status(st.code(), absl::StrCat("boat: the API key (BOAT_API_KEY) was refused for sandbox '", id,
                                                "' (", st.message(), ")"));
  }
  if (r.status == 404) {
    return absl::NotFoundError(absl::StrCat("boat: sandbox '", id, "' not found (", st.message(), ")"));
  }
  if (r.status == 408 || r.status == 429 || r.status >= 500) {
    return absl::UnavailableError(absl::StrCat("boat: ", st.message()));
  }
  return absl::Status(st.code(), absl::StrCat("boat: ", st.message()));
}

absl::Status Scrub(const absl::Status& st, std::string_view key) {
  return native::ScrubSecret(st, key, "<BOAT_API_KEY>");
}

}  // namespace tether::boat
