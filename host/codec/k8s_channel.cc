#include "host/codec/k8s_channel.h"

#include "absl/strings/str_cat.h"

namespace tether::codec {

std::string EncodeK8sStdin(std::string_view bytes) {
  std::string m;
  m.reserve(bytes.size() + 1);
  m.push_back(static_cast<char>(K8sChannel::kStdin));
  m.append(bytes);
  return m;
}

std::string EncodeK8sCloseStdin() {
  std::string m;
  m.push_back(static_cast<char>(K8sChannel::kClose));
  m.push_back(static_cast<char>(K8sChannel::kStdin));
  return m;
}

absl::StatusOr<K8sMessage> DecodeK8sMessage(std::string_view message) {
  if (message.empty()) {
    return absl::InvalidArgumentError("kubernetes exec: an empty message (no channel byte)");
  }
  const auto byte = static_cast<std::uint8_t>(message[0]);
  if (byte > static_cast<std::uint8_t>(K8sChannel::kResize) && byte != static_cast<std::uint8_t>(K8sChannel::kClose)) {
    return absl::InvalidArgumentError(absl::StrCat("kubernetes exec: a message on unknown channel ", byte));
  }
  const K8sMessage m{static_cast<K8sChannel>(byte), message.substr(1)};
  if (m.channel == K8sChannel::kStatus && m.payload.size() > kMaxK8sStatusBytes) {
    return absl::ResourceExhaustedError(absl::StrCat("kubernetes exec: a status message of ", m.payload.size(),
                                                     " bytes (at most ", kMaxK8sStatusBytes, ")"));
  }
  return m;
}

}  // namespace tether::codec
