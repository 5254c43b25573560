#include "host/native/boat/boat_options.h"

#include "host/support/typed_provider.h"
#include "tether/providers/boat.h"

namespace tether {

ProviderInfo BoatProvider() {
  using O = BoatOptions;
  return internal::MakeProviderInfo(internal::TypedProvider<O>{
      "boat",
      "a Boat sandbox through its REST API (one-shot commands: the\n"
      "exchange tunnel); the API key comes from BOAT_API_KEY (never a flag)",
      {{"--sandbox", "the sandbox id, required", internal::Into(&O::sandbox_id), "--sandbox ID"},
       {"--endpoint", "the API URL (default $BOAT_API_URL; one is required)", internal::Into(&O::api_url)},
       {"--ca-file", "a PEM CA file trusted besides the system's", internal::Into(&O::ca_file)}},
      MakeBoatTransport});
}

}  // namespace tether
