// The kubernetes provider's Channel (internal to host/native/kubernetes/):
// one pods/exec WebSocket (v5.channel.k8s.io or v4). stdout from channel 1,
// stderr (its tail) as Diagnostics(), the exit code from channel 3's
// Status; a close without a Status is EOF with no exit code, a cut is
// kUnavailable. stdin EOF is sent only on v5; on v4 the supervisor's
// in-band EOF is the only one. Facts: tether/providers/kubernetes.h.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <memory>
#include <string>

#include "host/net/http.h"
#include "tether/transport.h"

namespace tether::k8s {

class KubernetesChannel : public Channel {
 public:
  // Ended without a Status: cut, or closed by the server without one
  // (a setup script is then run again).
  virtual bool cut() const = 0;
};

// The channel over an exec WebSocket whose subprotocol was `v5` (else v4);
// `where` ("pod NS/POD") names it in messages.
std::unique_ptr<KubernetesChannel> MakeKubernetesChannel(boost::asio::any_io_executor ex,
                                                         std::unique_ptr<net::WebSocket> ws, bool v5,
                                                         std::string where);

}  // namespace tether::k8s
