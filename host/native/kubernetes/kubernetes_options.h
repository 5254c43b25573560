// The kubernetes provider's entry in the provider registry: the flags that set
// KubernetesOptions (include/tether/providers/kubernetes.h, with the factory and the
// facts and assumptions about the service), with their help.
#pragma once

#include "tether/provider_info.h"
#include "tether/providers/kubernetes.h"

namespace tether {

// The registry's entry for --provider kubernetes (host/registry/native_providers.cc).
ProviderInfo KubernetesProvider();

}  // namespace tether
