#include "host/native/daytona/daytona_v2.h"

#include <boost/json.hpp>
#include <algorithm>
#include <csignal>
#include <cstdint>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "host/native/daytona/daytona_json.h"
#include "host/native/native_json.h"
#include "host/net/http.h"
#include "tether/errors.h"
#include "tether/output_helpers.h"

namespace tether::daytona::v2 {

namespace json = boost::json;

namespace {

absl::string_view A(std::string_view s) { return {s.data(), s.size()}; }

using internal::Protocol;
using internal::StringField;

absl::StatusOr<json::value> Parse(std::string_view body, std::size_t limit, std::string_view what) {
  if (body.size() > limit) {
    return absl::ResourceExhaustedError(absl::StrCat("daytona: ", std::string(what), " has ", body.size(),
                                                     " bytes, above the limit of ", limit));
  }
  boost::system::error_code ec;
  json::value v = json::parse(json::string_view(body.data(), body.size()), ec);
  if (ec) return Protocol(what, absl::StrCat("is not JSON (", ec.message(), ")"));
  return v;
}

absl::StatusOr<ProcessView> ProcessOf(const json::value& v, std::string_view what) {
  if (!v.is_object()) return Protocol(what, "is not a JSON object");
  const json::object& o = v.get_object();
  ProcessView p;
  absl::StatusOr<std::string> id = StringField(o, "id", what);
  absl::StatusOr<std::string> name = StringField(o, "name", what);
  absl::StatusOr<std::string> state = StringField(o, "state", what);
  absl::StatusOr<std::string> signal = StringField(o, "signal", what);
  for (const absl::StatusOr<std::string>* s : {&id, &name, &state, &signal}) {
    if (!s->ok()) return s->status();
  }
  if (!internal::SafeId(*id)) {
    return Protocol(what, "has an id that is not 1-256 characters of [A-Za-z0-9._-] (and not dots only)");
  }
  p.id = *id;
  p.name = *name;
  p.terminal = *state == "terminal";
  if (signal->size() > 32) return Protocol(what, "has a signal name longer than 32 bytes");
  p.signal = *signal;
  const json::value* code = o.if_contains("exitCode");
  if (code != nullptr && !code->is_null()) {
    const std::optional<std::int64_t> n = native::JsonInteger(*code);
    if (!n || *n < 0 || *n > 255) return Protocol(what, "has an exitCode that is not an integer in 0..255");
    p.exit_code = static_cast<int>(*n);
  }
  return p;
}

}  // namespace

absl::StatusOr<std::string> CreateProcessJson(const std::vector<std::string>& argv, std::string_view name) {
  if (argv.empty()) return absl::InvalidArgumentError("daytona: an empty argv");
  json::array a;
  for (const std::string& arg : argv) {
    if (arg.find('\0') != std::string::npos || !IsValidUtf8(arg)) {
      return absl::InvalidArgumentError(
          "daytona: an argument holds a NUL byte or is not valid UTF-8 (the process API takes JSON strings)");
    }
    a.emplace_back(json::string(arg.data(), arg.size()));
  }
  json::object o;
  o["argv"] = std::move(a);
  o["stdin"] = "pipe";
  o["kind"] = "exec";
  o["name"] = json::string(name.data(), name.size());
  o["keepLogs"] = "until_cleanup";
  return json::serialize(o);
}

absl::StatusOr<ProcessView> ParseProcess(std::string_view body) {
  constexpr std::string_view kWhat = "the process record";
  absl::StatusOr<json::value> v = Parse(body, kMaxRecordBytes, kWhat);
  if (!v.ok()) return v.status();
  return ProcessOf(*v, kWhat);
}

absl::StatusOr<std::vector<ProcessView>> ParseProcessList(std::string_view body) {
  constexpr std::string_view kWhat = "the process list";
  absl::StatusOr<json::value> v = Parse(body, kMaxRecordBytes, kWhat);
  if (!v.ok()) return v.status();
  if (!v->is_array()) return Protocol(kWhat, "is not a JSON array");
  std::vector<ProcessView> out;
  for (const json::value& e : v->get_array()) {
    absl::StatusOr<ProcessView> p = ProcessOf(e, kWhat);
    if (!p.ok()) return p.status();
    out.push_back(*std::move(p));
  }
  return out;
}

std::optional<int> ExitStatusOf(const ProcessView& p) {
  if (p.exit_code) return p.exit_code;
  std::string_view name = p.signal;
  if (name.substr(0, 3) == "SIG") name.remove_prefix(3);
  // (The names a process can die of that matter here; Linux numbers.)
  static constexpr std::pair<std::string_view, int> kSignals[] = {
      {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"ILL", SIGILL},   {"ABRT", SIGABRT},
      {"BUS", SIGBUS},   {"FPE", SIGFPE},   {"KILL", SIGKILL}, {"USR1", SIGUSR1}, {"SEGV", SIGSEGV},
      {"USR2", SIGUSR2}, {"PIPE", SIGPIPE}, {"ALRM", SIGALRM}, {"TERM", SIGTERM}, {"XCPU", SIGXCPU},
      {"XFSZ", SIGXFSZ}, {"SYS", SIGSYS},   {"TRAP", SIGTRAP}};
  for (const auto& [n, number] : kSignals) {
    if (n == name) return 128 + number;
  }
  return std::nullopt;
}

absl::StatusOr<LogFrame> ParseLogFrame(std::string_view data) {
  constexpr std::string_view kWhat = "a log event";
  absl::StatusOr<json::value> v = Parse(data, kMaxLogEventBytes, kWhat);
  if (!v.ok()) return v.status();
  if (!v->is_object()) return Protocol(kWhat, "is not a JSON object");
  const json::object& o = v->get_object();
  absl::StatusOr<std::string> channel = StringField(o, "channel", kWhat);
  absl::StatusOr<std::string> cursor = StringField(o, "cursor", kWhat);
  absl::StatusOr<std::string> payload = StringField(o, "data", kWhat);
  absl::StatusOr<std::string> encoding = StringField(o, "encoding", kWhat);
  for (const absl::StatusOr<std::string>* s : {&channel, &cursor, &payload, &encoding}) {
    if (!s->ok()) return s->status();
  }
  if (cursor->empty() || cursor->size() > 256 ||
      !std::all_of(cursor->begin(), cursor->end(), [](char c) { return c > 0x20 && c < 0x7f; })) {
    return Protocol(kWhat, "has a cursor that is not 1-256 printable ASCII characters");
  }
  if (*encoding != "base64") {
    return Protocol(kWhat, absl::StrCat("is encoded '", encoding->substr(0, 32), "', not base64 (asked for)"));
  }
  LogFrame f;
  f.cursor = *cursor;
  f.stream = *channel == "stdout" ? 1 : *channel == "stderr" ? 2 : 0;
  if (!absl::Base64Unescape(A(*payload), &f.bytes)) return Protocol(kWhat, "has data that is not base64");
  return f;
}

absl::StatusOr<std::string> ParseEofCursor(std::string_view data) {
  constexpr std::string_view kWhat = "the eof event";
  if (data.empty()) return std::string();
  absl::StatusOr<json::value> v = Parse(data, kMaxRecordBytes, kWhat);
  if (!v.ok()) return v.status();
  if (!v->is_object()) return Protocol(kWhat, "is not a JSON object");
  return StringField(v->get_object(), "cursor", kWhat);
}

std::string ErrorCodeOf(std::string_view body) {
  if (body.size() > kMaxRecordBytes) return {};
  boost::system::error_code ec;
  json::value v = json::parse(json::string_view(body.data(), body.size()), ec);
  if (ec || !v.is_object()) return {};
  const json::value* c = v.get_object().if_contains("code");
  if (c == nullptr || !c->is_string() || c->get_string().size() > 64) return {};
  return std::string(c->get_string().data(), c->get_string().size());
}

absl::StatusOr<std::string> StdinJson(std::string_view text, bool eof) {
  if (text.size() > kMaxStdinBytes) {
    return absl::InvalidArgumentError(absl::StrCat("daytona: one stdin request holds at most ", kMaxStdinBytes,
                                                   " bytes, not ", text.size()));
  }
  if (!IsValidUtf8(text)) return absl::InvalidArgumentError("daytona: stdin text must be valid UTF-8 (a JSON string)");
  json::object o;
  if (!text.empty()) o["data"] = json::string(text.data(), text.size());
  if (eof) o["eof"] = true;
  return json::serialize(o);
}

std::string SignalJson(std::string_view name) {
  json::object o;
  o["signal"] = json::string(name.data(), name.size());
  return json::serialize(o);
}

std::string CursorQuery(std::string_view cursor) { return net::UrlEncode(cursor); }

}  // namespace tether::daytona::v2
