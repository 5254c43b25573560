// Fuzz target: one Kubernetes exec message from the server (host/codec/
// k8s_channel.h), and, on channel 3, the Status JSON it carries
// (host/native/kubernetes/exec_status.h, built from source here).
//
// Input: the message itself. It must never crash; a decoded message has the
// first byte as its channel and the rest as its payload (a view into the
// input), an error has a message; a Status is an exit code 0..255 or an
// error with a message. Encoding the payload as stdin decodes back to it.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "host/codec/k8s_channel.h"
#include "host/native/kubernetes/exec_status.h"

using tether::fuzz::Fail;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<tether::codec::K8sMessage> m = tether::codec::DecodeK8sMessage(in);
  if (!m.ok()) {
    if (m.status().message().empty()) Fail("k8s_channel", "an error without a message");
    if (size > 0 && data[0] <= 4) {
      if (data[0] != 3) Fail("k8s_channel", "refused a message on a known channel");
      if (size - 1 <= tether::codec::kMaxK8sStatusBytes) Fail("k8s_channel", "refused a status within the limit");
    }
    return 0;
  }
  if (size == 0) Fail("k8s_channel", "decoded an empty message");
  if (static_cast<std::uint8_t>(m->channel) != data[0]) Fail("k8s_channel", "the channel is not the first byte");
  if (m->payload.data() != in.data() + 1 || m->payload.size() != size - 1) {
    Fail("k8s_channel", "the payload is not the rest of the message");
  }
  const std::string again = tether::codec::EncodeK8sStdin(m->payload);
  absl::StatusOr<tether::codec::K8sMessage> back = tether::codec::DecodeK8sMessage(again);
  if (!back.ok() || back->channel != tether::codec::K8sChannel::kStdin || back->payload != m->payload) {
    Fail("k8s_channel", "a stdin message does not decode back");
  }
  if (m->channel == tether::codec::K8sChannel::kStatus) {
    absl::StatusOr<int> code = tether::k8s::ParseExecStatus(m->payload);
    if (code.ok() && (*code < 0 || *code > 255)) Fail("k8s_channel", "an exit code out of 0..255");
    if (!code.ok() && code.status().message().empty()) Fail("k8s_channel", "a status error without a message");
  }
  return 0;
}
