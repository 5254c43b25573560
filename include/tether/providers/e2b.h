// The `e2b` provider: E2B sandboxes through envd's process API
// (process.Process over the Connect protocol, JSON codec) and its file API.
// The sandbox is resolved once per transport (POST /v2/sandboxes/{id}/connect
// with the API key from E2B_API_KEY), giving envd's version, its access
// token and the sandbox domain; then every Exec is a Start stream, every
// stdin write a SendInput, and PutFile a POST /files plus a checked rename.
//
//   E2bOptions o;
//   o.sandbox_id = "i1a2b3c4";              // api_key comes from E2B_API_KEY
//   absl::StatusOr<std::shared_ptr<Transport>> t = MakeE2bTransport(ex, o);
//   if (!t.ok()) return t.status();
//   auto p = co_await Process::Start(*t, {.argv = {"/bin/cat"}});
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tether/transport.h"

namespace tether {

struct E2bOptions {
  std::string sandbox_id;  // required
  // The control plane; empty: $E2B_API_URL, else https://api.<$E2B_DOMAIN or e2b.app>.
  std::string api_url;
  // envd; empty: $E2B_SANDBOX_URL, else https://49983-<id>.<domain>, the domain
  // from the connect response (else $E2B_DOMAIN, else e2b.app).
  std::string sandbox_url;
  std::string ca_file;  // a PEM CA trusted besides the system's (both URLs)
  // Empty: $E2B_API_KEY. Never from argv; never in a message.
  std::string api_key;
  // Called as an upload proceeds (bytes sent, total).
  std::function<void(std::size_t, std::size_t)> upload_progress;
};

// Checks the options (a sandbox id, URLs that parse, an API key) and makes
// the transport; nothing is contacted until its first call.
absl::StatusOr<std::shared_ptr<Transport>> MakeE2bTransport(boost::asio::any_io_executor ex, E2bOptions options);

}  // namespace tether
