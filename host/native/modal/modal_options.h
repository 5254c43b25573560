// The modal provider's entry in the provider registry: the flags that set
// ModalOptions (include/tether/providers/modal.h, with the factory and the
// facts and assumptions about the service), with their help.
#pragma once

#include "tether/provider_info.h"
#include "tether/providers/modal.h"

namespace tether {

// The registry's entry for --provider modal (host/registry/native_providers.cc).
ProviderInfo ModalProvider();

}  // namespace tether
