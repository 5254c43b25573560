// The daytona provider's entry in the provider registry: the flags that set
// DaytonaOptions (include/tether/providers/daytona.h, with the factory and the
// facts and assumptions about the service), with their help.
#pragma once

#include "tether/provider_info.h"
#include "tether/providers/daytona.h"

namespace tether {

// The registry's entry for --provider daytona (host/registry/native_providers.cc).
ProviderInfo DaytonaProvider();

}  // namespace tether
