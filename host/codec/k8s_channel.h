// The Kubernetes exec stream's framing (pods/exec over WebSocket, the
// channel.k8s.io subprotocols v4 and v5): every binary message starts with
// one channel byte. Client to server: 0 stdin, 4 resize (never sent: tether
// resizes in-band through the supervisor and runs execs without a tty),
// and, v5 only, 255 + a channel to close it ([0xFF, 0x00] is stdin EOF).
// Server to client: 1 stdout, 2 stderr, 3 the exec's Status (JSON, read by
// host/native/kubernetes/exec_status.h). Sans-I/O: bytes in, bytes out.
//
//   std::string m = codec::EncodeK8sStdin("hello");     // "\x00hello"
//   absl::StatusOr<codec::K8sMessage> in = codec::DecodeK8sMessage(bytes);
//   if (in.ok() && in->channel == codec::K8sChannel::kStdout) Consume(in->payload);
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tether::codec {

enum class K8sChannel : std::uint8_t {
  kStdin = 0,
  kStdout = 1,
  kStderr = 2,
  kStatus = 3,  // the exec's result (the protocol calls it the error channel)
  kResize = 4,
  kClose = 255,  // v5: closes the channel named by the next byte
};

// The subprotocols, newest first (v5 adds the close message).
inline constexpr std::string_view kK8sProtocolV5 = "v5.channel.k8s.io";
inline constexpr std::string_view kK8sProtocolV4 = "v4.channel.k8s.io";

// A status message larger than this is refused (a real one is < 1 KiB).
inline constexpr std::size_t kMaxK8sStatusBytes = 64 * 1024;

// One message from the server: its channel and the bytes after the channel
// byte (a view into the message passed to DecodeK8sMessage).
struct K8sMessage {
  K8sChannel channel;
  std::string_view payload;
};

// 0x00 + bytes.
std::string EncodeK8sStdin(std::string_view bytes);

// [0xFF, 0x00]: stdin EOF (v5 only; a v4 server would read it as garbage).
std::string EncodeK8sCloseStdin();

// A server message: kInvalidArgument for an empty message (no channel byte)
// or a channel the protocol does not define (5..254); a status message
// above kMaxK8sStatusBytes is kResourceExhausted. Client-only channels (0,
// 4, 255) decode too: the caller decides what a server may send.
absl::StatusOr<K8sMessage> DecodeK8sMessage(std::string_view message);

}  // namespace tether::codec
