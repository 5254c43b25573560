// The boat provider's options (what boat_transport.h's factory takes) and its
// entry in the provider registry: the flags that set them, with their help.
// Facts and assumptions about the service: boat_transport.h.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "tether/providers.h"

namespace tether {

struct BoatOptions {
  std::string sandbox_id;  // required: letters, digits, '-', '_' (at most 128)
  std::string api_url;     // empty: $BOAT_API_URL (one of them is required)
  std::string ca_file;     // a PEM CA trusted besides the system's
  // Empty: $BOAT_API_KEY. Never from argv; never in a message.
  std::string api_key;
  // timeoutSeconds of every command tether runs (1..600): polls and setup
  // scripts take milliseconds; a hung one is given up after this.
  int command_timeout_seconds = 120;
  // Called as an upload proceeds (bytes sent, total).
  std::function<void(std::size_t, std::size_t)> upload_progress;
};

// The registry's entry for --provider boat (host/native/registry.cc).
ProviderInfo BoatProvider();

}  // namespace tether
