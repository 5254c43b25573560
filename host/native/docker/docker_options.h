// The docker provider's entry in the provider registry: the flags that set
// DockerOptions (include/tether/providers/docker.h, with the factory and the
// facts and assumptions about the service), with their help.
#pragma once

#include "tether/provider_info.h"
#include "tether/providers/docker.h"

namespace tether {

// The registry's entry for --provider docker (host/registry/native_providers.cc).
ProviderInfo DockerProvider();

}  // namespace tether
