// The boat provider's entry in the provider registry: the flags that set
// BoatOptions (include/tether/providers/boat.h, with the factory and the
// facts and assumptions about the service), with their help.
#pragma once

#include "tether/provider_info.h"
#include "tether/providers/boat.h"

namespace tether {

// The registry's entry for --provider boat (host/registry/native_providers.cc).
ProviderInfo BoatProvider();

}  // namespace tether
