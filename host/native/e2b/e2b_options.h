// The e2b provider's options (what e2b_transport.h's factory takes) and its
// entry in the provider registry: the flags that set them, with their help.
// Facts and assumptions about the service: e2b_transport.h.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "tether/providers.h"

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

// The registry's entry for --provider e2b (host/native/registry.cc).
ProviderInfo E2bProvider();

}  // namespace tether
