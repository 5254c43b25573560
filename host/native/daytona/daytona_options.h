// The daytona provider's options (what daytona_transport.h's factory takes) and its
// entry in the provider registry: the flags that set them, with their help.
// Facts and assumptions about the service: daytona_transport.h.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "tether/providers.h"

namespace tether {

struct DaytonaOptions {
  std::string sandbox_id;  // required: the sandbox id or name ([A-Za-z0-9._-], at most 128)
  std::string api_url;     // empty: $DAYTONA_API_URL, else $DAYTONA_SERVER_URL, else the public API
  std::string ca_file;     // a PEM CA trusted besides the system's (API and toolbox)
  // Empty: $DAYTONA_API_KEY, else $DAYTONA_JWT_TOKEN. Never from argv; never in a message.
  std::string api_key;
  // Sent as X-Daytona-Organization-ID with a JWT; empty: $DAYTONA_ORGANIZATION_ID.
  std::string organization_id;
  // Called as an upload proceeds (bytes sent, total).
  std::function<void(std::size_t, std::size_t)> upload_progress;
};

// The registry's entry for --provider daytona (host/native/registry.cc).
ProviderInfo DaytonaProvider();

}  // namespace tether
