// Fuzz target: the modal provider's decoders (host/native/modal/modal_config.h):
// ~/.modal.toml (a file anyone may have edited), the JWTs and the router URL
// the control plane answers (hostile strings from the network).
//
// Input: one selector byte, then the text. 0: ParseModalToml with the
// profile named on the first line; 1: JwtExpiry; 2: ParseGrpcUrl. None may
// crash or allocate without bound; errors are kInvalidArgument (or
// kNotFound for a missing named profile); an accepted URL has a host and a
// port and its target parses back to the same host and port.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "host/native/modal/modal_config.h"

namespace {

using tether::fuzz::Fail;
constexpr char kName[] = "modal_config";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0: {
      const std::size_t nl = text.find('\n');
      const std::string_view profile = nl == std::string_view::npos ? std::string_view() : text.substr(0, nl);
      const std::string_view body = nl == std::string_view::npos ? text : text.substr(nl + 1);
      absl::StatusOr<tether::modal::ModalProfile> p = tether::modal::ParseModalToml(body, profile);
      if (!p.ok() && p.status().code() != absl::StatusCode::kInvalidArgument &&
          p.status().code() != absl::StatusCode::kNotFound) {
        Fail(kName, "toml: an unexpected error code");
      }
      if (!p.ok() && p.status().message().empty()) Fail(kName, "toml: an error without a message");
      if (p.ok() && p->token_id.size() + p->token_secret.size() + p->server_url.size() > body.size()) {
        Fail(kName, "toml: values longer than the file");
      }
      break;
    }
    case 1: {
      std::optional<std::int64_t> exp = tether::modal::JwtExpiry(text);
      if (exp && *exp < 0) Fail(kName, "jwt: a negative exp");
      break;
    }
    default: {
      absl::StatusOr<tether::modal::GrpcTarget> t = tether::modal::ParseGrpcUrl(text);
      if (!t.ok()) {
        if (t.status().code() != absl::StatusCode::kInvalidArgument) Fail(kName, "url: an unexpected error code");
        break;
      }
      if (t->host.empty() || t->port == 0) Fail(kName, "url: no host or port");
      absl::StatusOr<tether::modal::GrpcTarget> back =
          tether::modal::ParseGrpcUrl(std::string(t->tls ? "https://" : "http://") + t->target());
      if (!back.ok() || back->host != t->host || back->port != t->port || back->tls != t->tls) {
        Fail(kName, "url: its target does not parse back");
      }
      break;
    }
  }
  return 0;
}
