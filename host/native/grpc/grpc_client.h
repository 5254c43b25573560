// What the gRPC providers (modal, boxd) share about a channel to a server:
// how it is made (TLS with the system's roots plus a CA of the user's, or
// h2c to a loopback host; bounded messages and metadata; keepalives), and
// how a gRPC status becomes tether's (a refused certificate is never
// retried).
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "host/native/grpc/grpc_target.h"

namespace tether::rpc {

// The most header and trailer metadata one answer may carry
// (GRPC_ARG_MAX_METADATA_SIZE; the HTTP/2 header list as gRPC counts it,
// 32 bytes per entry besides its name and value). gRPC 1.51's own default
// is 8 KiB; set here so that the bound is ours and stated: twice that,
// room for a google.rpc.Status detail in grpc-status-details-bin, and far
// below what an endpoint could make the host hold. A larger answer fails
// its call with RESOURCE_EXHAUSTED before its metadata is kept.
inline constexpr int kMaxMetadataBytes = 16 << 10;

// A channel to `t` (TLS when t.tls, with `ca_pem` trusted besides the
// system's roots; else plaintext h2c), messages at most `max_message_bytes`
// each way. The caller has checked CheckCleartext.
std::shared_ptr<grpc::Channel> MakeChannel(const GrpcTarget& t, const std::string& ca_pem, int max_message_bytes);

// The most a --ca-file may hold.
inline constexpr std::size_t kMaxCaFileBytes = 1 << 20;

// The PEM text of `path` (a --ca-file), read no further than
// kMaxCaFileBytes + 1; InvalidArgument "<who>: --ca-file PATH is larger
// than 1 MiB" or "... is not a readable PEM file" (no certificate in it).
absl::StatusOr<std::string> ReadCaFile(std::string_view who, const std::string& path);

// Whether `st` is gRPC's "the server's certificate failed verification"
// (expired, another name, an untrusted CA): gRPC says UNAVAILABLE for it,
// and only its message tells.
bool CertificateRefused(const grpc::Status& st);

// A gRPC status as a Status, "<who>: <what>: <gRPC's message>"; a refused
// certificate is net::UntrustedServerError (never retried).
absl::Status FromGrpc(const grpc::Status& st, std::string_view who, std::string_view what);

}  // namespace tether::rpc
