// The bridge: relays bytes between its stdio (the provider's exec channel)
// and the daemon's socket. Holds no protocol state; frames pass untouched.
#pragma once

#include <string>

namespace tether::supervisor {

inline constexpr std::size_t kBridgeBufferBytes = 256 * 1024;  // per direction

// Relays until the daemon closes the socket (then stdout is flushed) or the
// host's side fails. `upstream` holds bytes already read from stdin that
// belong to the daemon. Returns the process exit status.
int RunBridge(int sock_fd, std::string upstream);

// `tether-supervisor bridge DIR`: connect to DIR's socket and relay.
int BridgeMain(const std::string& state_dir);

}  // namespace tether::supervisor
