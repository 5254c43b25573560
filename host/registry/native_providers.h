// The native providers' registry entries (host/registry/native_providers.cc).
#pragma once

#include <vector>

#include "tether/providers.h"

namespace tether {

// Appends every native provider (docker, e2b, kubernetes, boat, runloop,
// daytona, modal, boxd) to `registry`, in that order.
void AppendNativeProviders(std::vector<ProviderInfo>& registry);

// LeaveProviderLibrariesToExit for the native providers (OpenSSL's state:
// net::LeaveTlsStateToProcessExit).
void LeaveNativeLibrariesToExit();

}  // namespace tether
