#include "host/native/e2b/e2b_options.h"

#include "host/support/typed_provider.h"
#include "tether/providers/e2b.h"

namespace tether {

ProviderInfo E2bProvider() {
  using O = E2bOptions;
  return internal::MakeProviderInfo(internal::TypedProvider<O>{
      "e2b",
      "an E2B sandbox through envd's process API; the API key comes\n"
      "from E2B_API_KEY (never a flag)",
      {{"--sandbox", "the sandbox id, required", internal::Into(&O::sandbox_id), "--sandbox ID"},
       {"--endpoint", "the API URL (default $E2B_API_URL, else https://api.$E2B_DOMAIN)", internal::Into(&O::api_url)},
       {"--sandbox-url", "envd's URL (default $E2B_SANDBOX_URL, else from the API's answer)",
        internal::Into(&O::sandbox_url)},
       {"--ca-file", "a PEM CA file trusted besides the system's", internal::Into(&O::ca_file)}},
      MakeE2bTransport});
}

}  // namespace tether
