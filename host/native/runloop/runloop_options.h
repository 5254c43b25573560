// The runloop provider's options (what runloop_transport.h's factory takes) and its
// entry in the provider registry: the flags that set them, with their help.
// Facts and assumptions about the service: runloop_transport.h.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "tether/providers.h"

namespace tether {

struct RunloopOptions {
  // How Execs run.
  enum class Mode {
    kAuto,      // streaming text; one-shot when Prepare() finds that stdin kills an execution
    kStream,    // always execute_async with stdin (the text tunnel)
    kExchange,  // always execute (the exchange tunnel)
  };
  std::string devbox_id;  // required: letters, digits, '-', '_' (at most 128)
  std::string api_url;    // empty: $RUNLOOP_BASE_URL, else https://api.runloop.ai
  std::string ca_file;    // a PEM CA trusted besides the system's
  // Empty: $RUNLOOP_API_KEY. Never from argv; never in a message.
  std::string api_key;
  Mode mode = Mode::kAuto;
  // Called as an upload proceeds (bytes sent, total).
  std::function<void(std::size_t, std::size_t)> upload_progress;
};

// The registry's entry for --provider runloop (host/native/registry.cc).
ProviderInfo RunloopProvider();

}  // namespace tether
