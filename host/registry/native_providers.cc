// The native providers' entries in the registry (tether/providers.h): each
// is its folder's <p>_options.cc (flags, help, factory). Built only with
// TETHER_NATIVE_PROVIDERS (the default; a tree without it has the local and
// command providers alone, and needs no OpenSSL).
#include "host/registry/native_providers.h"

#include "host/native/boat/boat_options.h"
#include "host/native/boxd/boxd_options.h"
#include "host/native/daytona/daytona_options.h"
#include "host/native/docker/docker_options.h"
#include "host/native/e2b/e2b_options.h"
#include "host/native/kubernetes/kubernetes_options.h"
#include "host/native/modal/modal_options.h"
#include "host/native/runloop/runloop_options.h"
#include "host/net/http.h"

namespace tether {

void AppendNativeProviders(std::vector<ProviderInfo>& r) {
  r.push_back(DockerProvider());
  r.push_back(E2bProvider());
  r.push_back(KubernetesProvider());
  r.push_back(BoatProvider());
  r.push_back(RunloopProvider());
  r.push_back(DaytonaProvider());
  r.push_back(ModalProvider());
  r.push_back(BoxdProvider());
}

void LeaveNativeLibrariesToExit() { net::LeaveTlsStateToProcessExit(); }

}  // namespace tether
