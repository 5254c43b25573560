// The boxd provider's entry in the provider registry: the flags that set
// BoxdOptions (include/tether/providers/boxd.h, with the factory and the
// facts and assumptions about the service), with their help.
#pragma once

#include "tether/provider_info.h"
#include "tether/providers/boxd.h"

namespace tether {

// The registry's entry for --provider boxd (host/registry/native_providers.cc).
ProviderInfo BoxdProvider();

}  // namespace tether
