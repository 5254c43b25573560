#include "host/process/reference.h"

#include <boost/json.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace tether {

namespace json = boost::json;

namespace {

constexpr int kReferenceVersion = 1;

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("process reference: ", what));
}

absl::StatusOr<std::string> GetString(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || !v->is_string()) return Bad(absl::StrCat("'", key, "' must be a string"));
  return std::string(v->as_string());
}

absl::StatusOr<std::int64_t> GetInt(const json::object& o, const char* key, std::int64_t lo,
                                    std::int64_t hi) {
  const json::value* v = o.if_contains(key);
  std::int64_t n = 0;
  if (v != nullptr && v->is_int64()) {
    n = v->as_int64();
  } else if (v != nullptr && v->is_uint64() && v->as_uint64() <= static_cast<std::uint64_t>(hi)) {
    n = static_cast<std::int64_t>(v->as_uint64());
  } else {
    return Bad(absl::StrCat("'", key, "' must be an integer"));
  }
  if (n < lo || n > hi) return Bad(absl::StrCat("'", key, "' is out of range"));
  return n;
}

}  // namespace

std::string EncodeReference(const ProcessReference& r) {
  json::object o;
  o["tether_process"] = kReferenceVersion;
  o["provider"] = r.provider;
  o["sandbox"] = r.sandbox;
  o["supervisor"] = r.supervisor;
  o["state_dir"] = r.state_dir;
  o["secret"] = absl::BytesToHexString(r.secret);
  o["pid"] = r.pid;
  o["stdin_pipe"] = r.stdin_pipe;
  o["pty"] = r.pty;
  o["text"] = r.text;
  o["backpressure"] = r.backpressure;
  o["window_bytes"] = r.window_bytes;
  o["output_left"] = r.output_left;
  o["stdout_offset"] = r.stdout_offset;
  o["stderr_offset"] = r.stderr_offset;
  o["expires_at"] = r.expires_at;
  o["ticket"] = absl::BytesToHexString(r.ticket_mac);
  return json::serialize(o);
}

absl::StatusOr<ProcessReference> ParseReference(std::string_view text, std::int64_t now) {
  if (text.size() > kMaxReferenceBytes) {
    return Bad(absl::StrCat("longer than ", kMaxReferenceBytes, " bytes"));
  }
  boost::system::error_code ec;
  json::value v = json::parse(json::string_view(text.data(), text.size()), ec);
  if (ec || !v.is_object()) return Bad("not a JSON object");
  const json::object& o = v.as_object();
  absl::StatusOr<std::int64_t> version = GetInt(o, "tether_process", 0, 1000);
  if (!version.ok()) return version.status();
  if (*version != kReferenceVersion) return Bad(absl::StrCat("unsupported version ", *version));
  ProcessReference r;
  std::string secret_hex, ticket_hex;
  for (auto [key, field] : {std::pair<const char*, std::string*>{"provider", &r.provider},
                            {"sandbox", &r.sandbox},
                            {"supervisor", &r.supervisor},
                            {"state_dir", &r.state_dir},
                            {"secret", &secret_hex},
                            {"ticket", &ticket_hex}}) {
    absl::StatusOr<std::string> s = GetString(o, key);
    if (!s.ok()) return s.status();
    *field = *std::move(s);
  }
  if (secret_hex.size() < 32 || secret_hex.size() > 128 ||
      secret_hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return Bad("'secret' must be 16..64 bytes of lowercase hex");
  }
  r.secret = absl::HexStringToBytes(secret_hex);
  if (ticket_hex.size() != 64 || ticket_hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return Bad("'ticket' must be 32 bytes of lowercase hex");
  }
  r.ticket_mac = absl::HexStringToBytes(ticket_hex);
  if (r.state_dir.empty() || r.state_dir[0] != '/' || r.supervisor.empty() || r.supervisor[0] != '/') {
    return Bad("'state_dir' and 'supervisor' must be absolute paths");
  }
  for (const std::string* path : {&r.state_dir, &r.supervisor}) {
    if (path->find('\0') != std::string::npos || path->find("/../") != std::string::npos ||
        path->find("/./") != std::string::npos || path->size() > 4096) {
      return Bad("'state_dir' and 'supervisor' must be plain absolute paths (no NUL, '.' or '..')");
    }
  }
  if (r.provider.empty() || r.provider.find('\0') != std::string::npos || r.sandbox.find('\0') != std::string::npos) {
    return Bad("'provider' and 'sandbox' must be non-empty text without NUL");
  }
  const json::value* pipe = o.if_contains("stdin_pipe");
  if (pipe == nullptr || !pipe->is_bool()) return Bad("'stdin_pipe' must be a boolean");
  r.stdin_pipe = pipe->as_bool();
  const json::value* pty = o.if_contains("pty");
  if (pty == nullptr || !pty->is_bool()) return Bad("'pty' must be a boolean");
  r.pty = pty->as_bool();
  for (auto [key, field] : {std::pair<const char*, bool*>{"text", &r.text}, {"backpressure", &r.backpressure}}) {
    const json::value* b = o.if_contains(key);
    if (b == nullptr || !b->is_bool()) return Bad(absl::StrCat("'", key, "' must be a boolean"));
    *field = b->as_bool();
  }
  absl::StatusOr<std::int64_t> window = GetInt(o, "window_bytes", 0, std::int64_t{64} << 20);
  if (!window.ok()) return window.status();
  r.window_bytes = static_cast<std::uint64_t>(*window);
  // As strict as StartOptions: 0 (the default) or 16 KiB..64 MiB.
  if (r.window_bytes != 0 && r.window_bytes < 16 * 1024) return Bad("'window_bytes' must be 0 or 16384..67108864");
  absl::StatusOr<std::int64_t> left = GetInt(o, "output_left", -1, std::int64_t{1} << 20);
  if (!left.ok()) return left.status();
  r.output_left = *left;
  constexpr std::int64_t kMaxOffset = std::int64_t{1} << 62;
  absl::StatusOr<std::int64_t> pid = GetInt(o, "pid", -1, 1 << 30);
  absl::StatusOr<std::int64_t> out = GetInt(o, "stdout_offset", 0, kMaxOffset);
  absl::StatusOr<std::int64_t> err = GetInt(o, "stderr_offset", 0, kMaxOffset);
  absl::StatusOr<std::int64_t> exp = GetInt(o, "expires_at", 0, kMaxOffset);
  for (const auto* st : {&pid, &out, &err, &exp}) {
    if (!st->ok()) return st->status();
  }
  r.pid = static_cast<std::int32_t>(*pid);
  if (r.pid == 0 || r.pid == 1) return Bad("'pid' must be a child's pid (or -1)");
  // A terminal always takes input; finite output counts down from its cap.
  if (r.pty && !r.stdin_pipe) return Bad("'pty' without 'stdin_pipe' is not a process tether starts");
  r.stdout_offset = static_cast<std::uint64_t>(*out);
  r.stderr_offset = static_cast<std::uint64_t>(*err);
  r.expires_at = *exp;
  if (r.expires_at <= now) {
    return absl::DeadlineExceededError("process reference expired (EXPIRED); references last at most 24 h");
  }
  // The sandbox's clock set it and its supervisor enforces it (a changed
  // value fails the ticket); here only what no clock skew explains.
  if (r.expires_at > now + 2 * kReferenceLifetimeSeconds) {
    return Bad("'expires_at' is further away than a reference can live");
  }
  return r;
}

}  // namespace tether
