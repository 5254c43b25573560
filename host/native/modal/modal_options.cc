#include "host/native/modal/modal_options.h"

#include "host/support/typed_provider.h"
#include "tether/providers/modal.h"

namespace tether {

ProviderInfo ModalProvider() {
  using O = ModalOptions;
  return internal::MakeProviderInfo(internal::TypedProvider<O>{
      "modal",
      "a Modal sandbox through its task command router (gRPC; exact bytes:\n"
      "the binary tunnel); the token comes from MODAL_TOKEN_ID and\n"
      "MODAL_TOKEN_SECRET, else ~/.modal.toml (never a flag)",
      {{"--sandbox", "the sandbox id, required", internal::Into(&O::sandbox_id), "--sandbox ID"},
       {"--endpoint", "the control plane URL (default $MODAL_SERVER_URL, else https://api.modal.com:443)",
        internal::Into(&O::server_url)},
       {"--ca-file", "a PEM CA file trusted besides the system's (control plane and router)",
        internal::Into(&O::ca_file)}},
      MakeModalTransport});
}

}  // namespace tether
