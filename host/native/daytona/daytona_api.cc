#include "host/native/daytona/daytona_api.h"

#include <boost/json.hpp>
#include <algorithm>
#include <cstdint>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tether/output_helpers.h"
#include "absl/strings/str_replace.h"
#include "tether/errors.h"
#include "tether/shell_setup.h"
#include "host/native/daytona/daytona_json.h"
#include "host/native/native_json.h"
#include "host/native/native_options.h"

namespace tether::daytona {

namespace json = boost::json;

namespace {

using internal::Protocol;
using internal::StringField;

// (Debian's absl has a string_view of its own.)
absl::string_view A(std::string_view s) { return {s.data(), s.size()}; }

// Parses `body` as a JSON object (what names the answer in errors).
absl::StatusOr<json::object> Object(std::string_view body, std::string_view what) {
  if (body.size() > kMaxAnswerBytes) {
    return absl::ResourceExhaustedError(absl::StrCat("daytona: ", std::string(what), " has ", body.size(),
                                                     " bytes, above the limit of ", kMaxAnswerBytes));
  }
  boost::system::error_code ec;
  json::value v = json::parse(json::string_view(body.data(), body.size()), ec);
  if (ec) return Protocol(what, absl::StrCat("is not JSON (", ec.message(), ")"));
  if (!v.is_object()) return Protocol(what, "is not a JSON object");
  return std::move(v.get_object());
}


}  // namespace

absl::StatusOr<SandboxView> ParseSandbox(std::string_view body) {
  constexpr std::string_view kWhat = "the sandbox (GET /sandbox/{id})";
  absl::StatusOr<json::object> o = Object(body, kWhat);
  if (!o.ok()) return o.status();
  SandboxView v;
  for (const auto& [key, out] : {std::pair<const char*, std::string*>{"id", &v.id},
                                 std::pair<const char*, std::string*>{"state", &v.state},
                                 std::pair<const char*, std::string*>{"toolboxProxyUrl", &v.toolbox_proxy_url}}) {
    absl::StatusOr<std::string> s = StringField(*o, key, kWhat);
    if (!s.ok()) return s.status();
    *out = *std::move(s);
  }
  return v;
}

absl::StatusOr<std::string> ParseProxyUrl(std::string_view body) {
  constexpr std::string_view kWhat = "the toolbox proxy URL answer";
  absl::StatusOr<json::object> o = Object(body, kWhat);
  if (!o.ok()) return o.status();
  absl::StatusOr<std::string> url = StringField(*o, "url", kWhat);
  if (!url.ok()) return url.status();
  if (url->empty()) return Protocol(kWhat, "has no url");
  return url;
}

absl::StatusOr<std::string> ParseExecAnswer(std::string_view body) {
  constexpr std::string_view kWhat = "the exec answer";
  absl::StatusOr<json::object> o = Object(body, kWhat);
  if (!o.ok()) return o.status();
  absl::StatusOr<std::string> id = StringField(*o, "cmdId", kWhat);
  if (!id.ok()) return id.status();
  if (id->empty()) return Protocol(kWhat, "has no cmdId");
  if (!internal::SafeId(*id)) {
    return Protocol(kWhat, "has a cmdId that is not 1-256 characters of [A-Za-z0-9._-] (and not dots only)");
  }
  return id;
}

absl::StatusOr<std::optional<int>> ParseCommandAnswer(std::string_view body) {
  constexpr std::string_view kWhat = "the command answer";
  absl::StatusOr<json::object> o = Object(body, kWhat);
  if (!o.ok()) return o.status();
  const json::value* code = o->if_contains("exitCode");
  if (code == nullptr || code->is_null()) return std::optional<int>();
  const std::optional<std::int64_t> integer = native::JsonInteger(*code);
  if (!integer) return Protocol(kWhat, "has an exitCode that is not an integer");
  const std::int64_t n = *integer;
  if (n < 0 || n > 255) return Protocol(kWhat, absl::StrCat("has an exitCode out of 0..255 (", n, ")"));
  return std::optional<int>(static_cast<int>(n));
}

absl::StatusOr<std::vector<std::string>> ParseSessionCommands(std::string_view body) {
  constexpr std::string_view kWhat = "the session answer";
  absl::StatusOr<json::object> o = Object(body, kWhat);
  if (!o.ok()) return o.status();
  std::vector<std::string> ids;
  const json::value* list = o->if_contains("commands");
  if (list == nullptr || list->is_null()) return ids;
  if (!list->is_array()) return Protocol(kWhat, "has commands that are not an array");
  for (const json::value& c : list->get_array()) {
    if (!c.is_object()) return Protocol(kWhat, "has a command that is not an object");
    const json::value* id = c.get_object().if_contains("id");
    if (id == nullptr || !id->is_string()) return Protocol(kWhat, "has a command without a string id");
    const std::string cid(id->get_string().data(), id->get_string().size());
    if (!internal::SafeId(cid)) {
      return Protocol(kWhat, "has a command id that is not 1-256 characters of [A-Za-z0-9._-] (and not dots only)");
    }
    ids.push_back(cid);
  }
  return ids;
}

std::string ToolboxBase(std::string_view proxy_url, std::string_view sandbox_id) {
  std::string base(proxy_url);
  while (!base.empty() && base.back() == '/') base.pop_back();
  return absl::StrCat(base, "/", std::string(sandbox_id));
}

absl::StatusOr<std::string> CommandLine(const std::vector<std::string>& argv) {
  if (argv.empty()) return absl::InvalidArgumentError("daytona: exec with an empty argv");
  std::string line;
  for (const std::string& a : argv) {
    if (a.find('\0') != std::string::npos || !IsValidUtf8(a)) {
      return absl::InvalidArgumentError(
          "daytona: an argument has a NUL byte or invalid UTF-8 (the toolbox takes the command as a JSON string)");
    }
    if (!line.empty()) line.push_back(' ');
    line += ShellQuote(a);
  }
  return line;
}

std::string SessionRequestJson(std::string_view session_id) {
  json::object o;
  o["sessionId"] = json::string_view(session_id.data(), session_id.size());
  return json::serialize(o);
}

absl::StatusOr<std::string> ExecRequestJson(std::string_view command) {
  if (!IsValidUtf8(command) || command.find('\0') != std::string_view::npos) {
    return absl::InvalidArgumentError("daytona: the command line is not valid UTF-8 without NUL");
  }
  json::object o;
  o["command"] = json::string_view(command.data(), command.size());
  o["runAsync"] = true;
  o["suppressInputEcho"] = true;
  return json::serialize(o);
}

absl::StatusOr<std::string> InputRequestJson(std::string_view text) {
  if (text.size() > kMaxInputBytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("daytona: input of ", text.size(), " bytes is above the limit of ", kMaxInputBytes));
  }
  if (!IsValidUtf8(text) || text.find('\0') != std::string_view::npos) {
    return absl::InvalidArgumentError(
        "daytona: input must be text (valid UTF-8 without NUL): the toolbox takes it as a JSON string");
  }
  json::object o;
  o["data"] = json::string_view(text.data(), text.size());
  return json::serialize(o);
}

std::string BulkUploadBody(std::string_view path, std::string_view bytes, std::string_view boundary) {
  std::string b;
  b.reserve(bytes.size() + path.size() + 4 * boundary.size() + 256);
  absl::StrAppend(&b, "--", A(boundary), "\r\nContent-Disposition: form-data; name=\"files[0].path\"\r\n\r\n",
                  A(path), "\r\n");
  std::string_view base = path.substr(path.rfind('/') == std::string_view::npos ? 0 : path.rfind('/') + 1);
  absl::StrAppend(&b, "--", A(boundary), "\r\nContent-Disposition: form-data; name=\"files[0].file\"; filename=\"",
                  A(base), "\"\r\nContent-Type: application/octet-stream\r\n\r\n");
  b.append(bytes);
  absl::StrAppend(&b, "\r\n--", A(boundary), "--\r\n");
  return b;
}

void LogDemuxer::Emit(char c, std::string* out, std::string* err) {
  if (cur_ == Stream::kOut) out->push_back(c);
  if (cur_ == Stream::kErr) err->push_back(c);
}

void LogDemuxer::Feed(std::string_view chunk, std::string* out, std::string* err) {
  consumed_ += chunk.size();
  for (char c : chunk) {
    if (c != '\x01' && c != '\x02') {
      for (char h : held_) Emit(h, out, err);
      held_.clear();
      Emit(c, out, err);
      continue;
    }
    if (!held_.empty() && held_[0] != c) {
      for (char h : held_) Emit(h, out, err);
      held_.clear();
    }
    held_.push_back(c);
    if (held_.size() == 3) {
      cur_ = c == '\x01' ? Stream::kOut : Stream::kErr;
      held_.clear();
    }
  }
}

bool RetryableHttpStatus(int status) { return status == 429 || status == 502 || status == 503 || status == 504; }

absl::Status HttpFailure(const net::Response& r, std::string_view what, std::string_view sandbox_id) {
  const absl::Status st = net::HttpError(r, what);
  const std::string id(sandbox_id);
  if (r.status == 401 || r.status == 403) {
    return absl::Status(st.code(), absl::StrCat("daytona: the API key (DAYTONA_API_KEY) was refused for sandbox '",
                                                id, "' (", st.message(), ")"));
  }
  if (r.status == 404) return absl::NotFoundError(absl::StrCat("daytona: ", st.message()));
  if (r.status == 408 || r.status == 429 || r.status >= 500) {
    return absl::UnavailableError(absl::StrCat("daytona: ", st.message()));
  }
  return absl::Status(st.code(), absl::StrCat("daytona: ", st.message()));
}

absl::Status EffectHttpFailure(const net::Response& r, std::string_view what, std::string_view sandbox_id) {
  if (r.status < 500 || r.status > 599) return HttpFailure(r, what, sandbox_id);
  const absl::Status st = net::HttpError(r, what);
  return OutcomeUnknownError(absl::StrCat("daytona: ", std::string(st.message()),
                                          ": the call may have taken effect (the answer was lost on the way)"));
}

absl::Status Scrub(const absl::Status& st, std::string_view key) {
  return native::ScrubSecret(st, key, "<DAYTONA_API_KEY>");
}

}  // namespace tether::daytona
