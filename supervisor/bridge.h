// The bridge: relays bytes between its stdio (the provider's exec channel)
// and the daemon's socket. Holds no protocol state; frames pass untouched.
#pragma once

#include <string>
#include <string_view>

#include "protocol/command_line.h"

namespace tether::supervisor {

inline constexpr std::size_t kBridgeBufferBytes = 256 * 1024;  // per direction

// Relays until the daemon closes the socket (then stdout is flushed) or the
// host's side fails. `upstream` holds bytes already read from stdin that
// belong to the daemon. Returns the process exit status.
//
// With `text` the host side of the channel carries armored lines (see
// protocol/armor.h) instead of raw frames: lines from the host are decoded
// (noise, echoes and damaged lines skipped), frames from the daemon are
// armored one per line. `upstream` is what was already read from stdin.
int RunBridge(int sock_fd, std::string upstream, bool text);

// Writes one frame to stdout, armored when `text`.
void WriteFrameToHost(std::string_view frame, bool text);

// `tether-supervisor bridge [--text] DIR`: connect to DIR's socket and relay.
int BridgeMain(const protocol::BridgeCommand& cmd);

}  // namespace tether::supervisor
