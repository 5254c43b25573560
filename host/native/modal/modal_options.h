// The modal provider's options (what modal_transport.h's factory takes) and its
// entry in the provider registry: the flags that set them, with their help.
// Facts and assumptions about the service: modal_transport.h.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "tether/providers.h"

namespace tether {

struct ModalOptions {
  std::string sandbox_id;  // required: letters, digits, '-', '_' (at most 128)
  // The control plane; empty: $MODAL_SERVER_URL, the profile's server_url,
  // else https://api.modal.com:443.
  std::string server_url;
  std::string ca_file;  // a PEM CA trusted besides the system's (control plane and router)
  // Empty: $MODAL_TOKEN_ID / $MODAL_TOKEN_SECRET, else ~/.modal.toml.
  // Never from argv; never in a message.
  std::string token_id, token_secret;
  // Called as an upload proceeds (bytes sent, total).
  std::function<void(std::size_t, std::size_t)> upload_progress;
};

// The registry's entry for --provider modal (host/native/registry.cc).
ProviderInfo ModalProvider();

}  // namespace tether
