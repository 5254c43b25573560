#include "host/native/grpc/grpc_client.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "host/net/http.h"

namespace tether::rpc {

namespace {

constexpr char kSystemRoots[] = "/etc/ssl/certs/ca-certificates.crt";

absl::string_view A(std::string_view s) { return {s.data(), s.size()}; }

}  // namespace

std::shared_ptr<grpc::Channel> MakeChannel(const GrpcTarget& t, const std::string& ca_pem, int max_message_bytes) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(max_message_bytes);
  args.SetMaxSendMessageSize(max_message_bytes);
  args.SetInt(GRPC_ARG_MAX_METADATA_SIZE, kMaxMetadataBytes);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (!t.tls) {
    creds = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions so;
    if (!ca_pem.empty()) {
      // gRPC's pem_root_certs replaces its roots: the system's go first.
      std::ifstream sys(kSystemRoots);
      std::stringstream ss;
      if (sys) ss << sys.rdbuf();
      so.pem_root_certs = ss.str() + "\n" + ca_pem;
    }
    creds = grpc::SslCredentials(so);
  }
  return grpc::CreateCustomChannel(t.target(), creds, args);
}

absl::StatusOr<std::string> ReadCaFile(std::string_view who, const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::string pem(kMaxCaFileBytes + 1, '\0');
  f.read(pem.data(), static_cast<std::streamsize>(pem.size()));  // (none from a file not opened)
  pem.resize(static_cast<std::size_t>(std::max<std::streamsize>(f.gcount(), 0)));
  if (pem.size() > kMaxCaFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(A(who), ": --ca-file ", path, " is larger than 1 MiB"));
  }
  if (pem.find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(A(who), ": --ca-file ", path, " is not a readable PEM file"));
  }
  return pem;
}

bool CertificateRefused(const grpc::Status& st) {
  // gRPC 1.51's words: "... Ssl handshake failed: ... certificate verify
  // failed" (OpenSSL's chain check: expired, an untrusted CA) and "Peer name
  // <name> is not in peer certificate" (its own name check).
  const std::string& m = st.error_message();
  return st.error_code() == grpc::StatusCode::UNAVAILABLE &&
         (absl::StrContains(m, "certificate verify failed") || absl::StrContains(m, "is not in peer certificate"));
}

absl::Status FromGrpc(const grpc::Status& st, std::string_view who, std::string_view what) {
  if (st.ok()) return absl::OkStatus();
  if (CertificateRefused(st)) {
    return net::UntrustedServerError(absl::StrCat(A(who), ": ", A(what), ": ", st.error_message()));
  }
  // gRPC's and absl's canonical codes are the same numbers.
  return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                      absl::StrCat(A(who), ": ", A(what), ": ", st.error_message()));
}

}  // namespace tether::rpc
