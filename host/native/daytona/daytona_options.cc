#include "host/native/daytona/daytona_options.h"

#include "host/support/typed_provider.h"
#include "tether/providers/daytona.h"

namespace tether {

ProviderInfo DaytonaProvider() {
  using O = DaytonaOptions;
  return internal::MakeProviderInfo(internal::TypedProvider<O>{
      "daytona",
      "a Daytona sandbox through its toolbox's process API v2 where the\n"
      "sandbox serves it, else its session processes (the text tunnel\n"
      "either way); the key comes from DAYTONA_API_KEY (or\n"
      "DAYTONA_JWT_TOKEN with DAYTONA_ORGANIZATION_ID), never a flag",
      {{"--sandbox", "the sandbox id or name, required", internal::Into(&O::sandbox_id), "--sandbox ID"},
       {"--endpoint", "the API URL (default $DAYTONA_API_URL, else https://app.daytona.io/api)",
        internal::Into(&O::api_url)},
       {"--ca-file", "a PEM CA file trusted besides the system's (API and toolbox)", internal::Into(&O::ca_file)},
       {"--process-api", "auto (default: v2 where the sandbox serves it), v1 or v2", internal::Into(&O::process_api)}},
      MakeDaytonaTransport});
}

}  // namespace tether
