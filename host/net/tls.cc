// TLS contexts and handshake settings (internal/tls.h).
#include "host/net/internal/tls.h"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <boost/asio/buffer.hpp>
#include <boost/asio/ip/address.hpp>

#include "absl/strings/str_cat.h"

namespace tether::net::internal {
namespace {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;

bool IsIpLiteral(std::string_view host) {
  boost::system::error_code ec;
  asio::ip::make_address(std::string(host), ec);
  return !ec;
}

absl::Status Bad(const std::string& what, const boost::system::error_code& ec) {
  return absl::InvalidArgumentError(absl::StrCat("tls: ", what, ": ", ec.message()));
}

}  // namespace

absl::StatusOr<std::shared_ptr<ssl::context>> MakeTlsContext(const TlsOptions& o) {
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_client);
  boost::system::error_code ec;
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                       ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1,
                   ec);
  if (ec) return Bad("options", ec);
  if (o.insecure_skip_verify) {
    ctx->set_verify_mode(ssl::verify_none, ec);
  } else {
    ctx->set_verify_mode(ssl::verify_peer, ec);
    if (!ec && o.system_store) ctx->set_default_verify_paths(ec);
    if (ec) return Bad("the system CA store", ec);
  }
  if (!o.ca_file.empty()) {
    ctx->load_verify_file(o.ca_file, ec);
    if (ec) return Bad(absl::StrCat("CA file ", o.ca_file), ec);
  }
  if (!o.ca_pem.empty()) {
    ctx->add_certificate_authority(asio::buffer(o.ca_pem), ec);
    if (ec) return Bad("CA certificate (PEM)", ec);
  }
  if (o.client_cert_pem.empty() != o.client_key_pem.empty()) {
    return absl::InvalidArgumentError("tls: a client certificate needs both the certificate and its key");
  }
  if (!o.client_cert_pem.empty()) {
    ctx->use_certificate_chain(asio::buffer(o.client_cert_pem), ec);
    if (ec) return Bad("client certificate (PEM)", ec);
    ctx->use_private_key(asio::buffer(o.client_key_pem), ssl::context::pem, ec);
    if (ec) return Bad("client key (PEM)", ec);
    if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
      ERR_clear_error();
      return absl::InvalidArgumentError("tls: the client key does not match the client certificate");
    }
  }
  return ctx;
}

absl::Status PrepareTls(TlsSocket& s, std::string_view host, const TlsOptions& o) {
  std::string name(o.server_name.empty() ? host : std::string_view(o.server_name));
  SSL* ssl = s.native_handle();
  bool ip = IsIpLiteral(name);
  if (!ip && SSL_set_tlsext_host_name(ssl, name.c_str()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat("tls: bad server name ", name));
  }
  if (o.insecure_skip_verify) return absl::OkStatus();
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
  X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  int ok = ip ? X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str())
              : X509_VERIFY_PARAM_set1_host(param, name.c_str(), name.size());
  if (ok != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat("tls: cannot check the certificate for ", name));
  }
  return absl::OkStatus();
}

absl::Status HandshakeError(TlsSocket& s, std::string_view host_view, const boost::system::error_code& ec) {
  std::string host(host_view);
  long verify = SSL_get_verify_result(s.native_handle());
  if (verify != X509_V_OK) {
    return UntrustedServerError(absl::StrCat("TLS handshake with ", host, ": certificate verify failed: ",
                                             X509_verify_cert_error_string(verify)));
  }
  return absl::UnavailableError(absl::StrCat("TLS handshake with ", host, ": ", ec.message()));
}

}  // namespace tether::net::internal

namespace tether::net {

void LeaveTlsStateToProcessExit() {
  // Only the first initialisation decides whether the exit handler is
  // installed: before it, nothing of OpenSSL has run (Asio's SSL headers
  // initialise nothing for OpenSSL 3).
  ::OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr);
}

}  // namespace tether::net
