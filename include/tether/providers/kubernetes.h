// The `kubernetes` provider: commands run in a pod through the API server's
// pods/exec over a WebSocket (v5.channel.k8s.io, else v4), no kubectl
// needed. Where the cluster is and who we are comes from the kubeconfig
// (kubeconfig.h); the probe and the supervisor upload run as shell scripts
// over exec (include/tether/shell_setup.h): there is no file API.
//
//   KubernetesOptions o;
//   o.pod = "web-0";                 // namespace: the context's, else "default"
//   absl::StatusOr<std::shared_ptr<Transport>> t = MakeKubernetesTransport(ex, o);
//   if (!t.ok()) return t.status();  // no kubeconfig, unsupported auth, bad endpoint
//   auto p = co_await Process::Start(**t, {"/bin/cat"}, {});
//
// Channels: stdout from channel 1, stderr (its tail) as Diagnostics(),
// the exit code from channel 3's Status; a close without a Status is EOF
// with no exit code, a cut is kUnavailable. stdin EOF is sent only on v5
// ([0xFF, 0x00]); on v4 the supervisor's in-band EOF is the only one. An
// upgrade refused with 5xx or a refused connection (the exec never
// started) is retried a few times; scripts cut before their Status are run
// again (probe and upload are idempotent).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tether/transport.h"

namespace tether {

struct KubernetesOptions {
  std::string pod;         // required
  std::string namespace_;  // empty: the context's namespace, else "default"
  std::string container;   // empty: the pod's only (or default) container
  std::string kubeconfig;  // empty: $KUBECONFIG's files, merged, else ~/.kube/config
  std::string context;     // empty: current-context
  std::string endpoint;    // overrides the cluster's server URL
  std::string ca_file;     // a CA trusted in addition to the kubeconfig's
  // Called as an upload proceeds (bytes sent, total).
  std::function<void(std::size_t, std::size_t)> upload_progress;
};

// Reads the kubeconfig now (its errors are this call's); connects lazily.
absl::StatusOr<std::shared_ptr<Transport>> MakeKubernetesTransport(boost::asio::any_io_executor ex,
                                                                   KubernetesOptions options);

}  // namespace tether
