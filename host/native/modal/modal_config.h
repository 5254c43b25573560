// What the modal provider decodes without I/O (internal to it): the
// ~/.modal.toml profile the SDK reads, a JWT's `exp`, which API version a
// sandbox id selects (the gRPC target of a URL: host/native/grpc/). Tests
// and the fuzzer (fuzz/modal_config_fuzzer.cc) call these directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "host/native/grpc/grpc_target.h"

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

// The gRPC target of a URL, and the cleartext rule (host/native/grpc/).
using rpc::GrpcTarget;
using rpc::IsLoopbackHost;
using rpc::ParseGrpcUrl;
inline absl::Status CheckCleartext(const GrpcTarget& t, std::string_view what) {
  return rpc::CheckCleartext(t, "modal", what);
}

}  // namespace tether::modal
