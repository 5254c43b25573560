#include "host/native/kubernetes/kubernetes_options.h"

#include "host/support/typed_provider.h"
#include "tether/providers/kubernetes.h"

namespace tether {

ProviderInfo KubernetesProvider() {
  using O = KubernetesOptions;
  return internal::MakeProviderInfo(internal::TypedProvider<O>{
      "kubernetes",
      "a pod, through the API server's exec (WebSocket, no kubectl);\n"
      "cluster and credentials from the kubeconfig (token, tokenFile or\n"
      "client certificate; exec plugins are not supported)",
      {{"--pod", "the pod, required", internal::Into(&O::pod), "--pod NAME"},
       {"--namespace", "its namespace (default: the context's, else default)", internal::Into(&O::namespace_)},
       {"--container", "the container (default: the pod's only one)", internal::Into(&O::container)},
       {"--kubeconfig", "the kubeconfig, read alone (default: the files of $KUBECONFIG, merged, else ~/.kube/config)",
        internal::Into(&O::kubeconfig)},
       {"--context", "the context (default: current-context)", internal::Into(&O::context)},
       {"--endpoint", "the API server URL, instead of the kubeconfig's", internal::Into(&O::endpoint)},
       {"--ca-file", "a PEM CA trusted for the API server, besides the kubeconfig's", internal::Into(&O::ca_file)}},
      MakeKubernetesTransport});
}

}  // namespace tether
