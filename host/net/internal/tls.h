// TLS for tether::net: the client context a Client's connections share
// (trust, client certificate) and the per-connection settings (SNI, the
// name or IP the certificate must carry), and handshake errors a person
// can act on.
#pragma once

#include <boost/asio/ssl/context.hpp>
#include <boost/system/error_code.hpp>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "host/net/http.h"
#include "host/net/internal/stream.h"

namespace tether::net::internal {

// The context for `options` (kInvalidArgument naming the bad CA file or PEM,
// never its contents).
absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> MakeTlsContext(const TlsOptions& options);

// SNI (for names, not IP literals) and the host check for `host`.
absl::Status PrepareTls(TlsSocket& s, std::string_view host, const TlsOptions& options);

// "TLS handshake with <host>: certificate verify failed: <reason>" (an
// UntrustedServerError, never retried) or the TLS error, kUnavailable.
absl::Status HandshakeError(TlsSocket& s, std::string_view host, const boost::system::error_code& ec);

}  // namespace tether::net::internal
