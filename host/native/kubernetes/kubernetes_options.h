// The kubernetes provider's options (what kubernetes_transport.h's factory takes) and its
// entry in the provider registry: the flags that set them, with their help.
// Facts and assumptions about the service: kubernetes_transport.h.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "tether/providers.h"

namespace tether {

struct KubernetesOptions {
  std::string pod;         // required
  std::string namespace_;  // empty: the context's namespace, else "default"
  std::string container;   // empty: the pod's only (or default) container
  std::string kubeconfig;  // empty: first of $KUBECONFIG, else ~/.kube/config
  std::string context;     // empty: current-context
  std::string endpoint;    // overrides the cluster's server URL
  std::string ca_file;     // a CA trusted in addition to the kubeconfig's
  // Called as an upload proceeds (bytes sent, total).
  std::function<void(std::size_t, std::size_t)> upload_progress;
};

// The registry's entry for --provider kubernetes (host/native/registry.cc).
ProviderInfo KubernetesProvider();

}  // namespace tether
