// Where a gRPC provider's server is (sans-I/O, absl only; tests and the
// fuzzers call these directly): a URL as gRPC's target, and the rule that
// a token never travels in cleartext except to a loopback host.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tether::rpc {

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
// or a loopback target, else kInvalidArgument naming `who` ("modal") and
// `what` (e.g. "the server URL") and how to reach the server instead.
// There is no opt-in.
absl::Status CheckCleartext(const GrpcTarget& t, std::string_view who, std::string_view what);

}  // namespace tether::rpc
