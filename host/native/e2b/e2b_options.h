// The e2b provider's entry in the provider registry: the flags that set
// E2bOptions (include/tether/providers/e2b.h, with the factory and the
// facts and assumptions about the service), with their help.
#pragma once

#include "tether/provider_info.h"
#include "tether/providers/e2b.h"

namespace tether {

// The registry's entry for --provider e2b (host/registry/native_providers.cc).
ProviderInfo E2bProvider();

}  // namespace tether
