#include "host/native/boxd/boxd_options.h"

#include "host/support/typed_provider.h"
#include "tether/providers/boxd.h"

namespace tether {

ProviderInfo BoxdProvider() {
  using O = BoxdOptions;
  return internal::MakeProviderInfo(internal::TypedProvider<O>{
      "boxd",
      "a boxd VM through its gRPC Exec stream (exact bytes: the binary\n"
      "tunnel); the key comes from BOXD_API_KEY (exchanged for a JWT), or a\n"
      "JWT from BOXD_TOKEN (never a flag)",
      {{"--vm", "the VM's id, required", internal::Into(&O::vm_id), "--vm ID"},
       {"--endpoint", "the gRPC endpoint (default $BOXD_ENDPOINT, else https://boxd.sh:9443)",
        internal::Into(&O::endpoint)},
       {"--auth-endpoint",
        "where the key is exchanged for a JWT (default $BOXD_AUTH_URL, else\n"
        "https://app.boxd.sh/api/v1/auth/token)",
        internal::Into(&O::auth_url)},
       {"--ca-file", "a PEM CA file trusted besides the system's (both endpoints)", internal::Into(&O::ca_file)}},
      MakeBoxdTransport});
}

}  // namespace tether
