// What the modal provider decodes without I/O (internal to it): the
// ~/.modal.toml profile the SDK reads, a JWT's `exp`, which API version a
// sandbox id selects, and the gRPC target of a server or router URL. Tests
// and the fuzzer (fuzz/modal_config_fuzzer.cc) call these directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tether::modal {

inline constexpr std::size_t kMaxTomlBytes = 1 << 20;  // a ~/.modal.toml larger than this is refused
inline constexpr std::size_t kMaxJwtBytes = 16 << 10;   // a token larger than this is refused

// One profile of ~/.modal.toml; empty fields were absent.
struct ModalProfile {
  std::string token_id, token_secret, server_url;
};

// The profile named `profile` ($MODAL_PROFILE), or else the first one with
// `active = true`, else an empty one, from the TOML text of ~/.modal.toml
// (sections of `key = "string"` / `key = true` lines; `#` comments).
// kInvalidArgument for text that is not such TOML, or larger than
// kMaxTomlBytes; a named profile that is missing is kNotFound.
absl::StatusOr<ModalProfile> ParseModalToml(std::string_view text, std::string_view profile);

// The `exp` claim (seconds since the epoch) of a JWT "h.p.s": nullopt when
// the token is not a JWT or has no numeric exp (the SDK then assumes a
// lifetime); never an error, the token still works.
std::optional<std::int64_t> JwtExpiry(std::string_view jwt);

// "sb-" followed by exactly 22 base62 characters: the V1 calls
// (SandboxGetTaskId, TaskGetCommandRouterAccess); any other id: the V2 ones.
bool IsV1SandboxId(std::string_view id);

// A server or router URL as gRPC wants it.
struct GrpcTarget {
  bool tls = true;       // https (else http: plaintext h2c)
  std::string host;      // without brackets
  std::uint16_t port = 443;
  bool loopback = false;  // 127.0.0.0/8, ::1 or localhost
  std::string target() const;  // "host:port" ("[::1]:port")
};
// "http(s)://host[:port][/]" (no path, query or credentials); the default
// port is 443 for https and 80 for http. kInvalidArgument otherwise.
absl::StatusOr<GrpcTarget> ParseGrpcUrl(std::string_view url);

// "localhost", or an IPv4 address in 127.0.0.0/8, or ::1 (also as
// ::ffff:127.x.y.z): the rule host/net keeps for plain http://.
bool IsLoopbackHost(std::string_view host);

// A token may travel in cleartext only to a loopback host: OK for https://
// or a loopback target, else kInvalidArgument naming `what` (e.g. "the
// server URL") and how to reach the server instead. There is no opt-in.
absl::Status CheckCleartext(const GrpcTarget& t, std::string_view what);

}  // namespace tether::modal
