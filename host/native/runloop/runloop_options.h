// The runloop provider's entry in the provider registry: the flags that set
// RunloopOptions (include/tether/providers/runloop.h, with the factory and the
// facts and assumptions about the service), with their help.
#pragma once

#include "tether/provider_info.h"
#include "tether/providers/runloop.h"

namespace tether {

// The registry's entry for --provider runloop (host/registry/native_providers.cc).
ProviderInfo RunloopProvider();

}  // namespace tether
