// Who gives way when the daemon's connections are all taken.
//
// The daemon holds at most kMaxConnections at once, and any process of our
// uid in the sandbox can open that many and say nothing. The owner must still
// get in: a new connection takes the place of an unauthenticated one,
// preferring those with nothing to read (no Hello on its way), oldest first.
// A connection with bytes waiting may be the owner's Hello that the loop has
// not read yet, so it goes last; an authenticated one never goes. A
// connection that is open while the daemon is under pressure gets
// kPressuredHelloMs rather than kHelloTimeoutMs (daemon.h) to authenticate.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <span>

namespace tether::supervisor {

inline constexpr std::size_t kMaxConnections = 8;  // open at once, authenticated or not
// From this many unauthenticated connections on, the daemon is under
// pressure. (An owner opens one at a time; its control attachments and the
// attachment that holds the output are authenticated.)
inline constexpr std::size_t kPressureConnections = kMaxConnections / 2;
// The time to authenticate under pressure: a bridge connects at once and its
// host's Hello follows within a round trip of the provider's channel.
inline constexpr std::chrono::milliseconds kPressuredHelloMs{2000};

// What the daemon knows of one open connection.
struct ConnectionView {
  bool authenticated = false;  // its Hello had the right secret
  bool bytes_waiting = false;  // unread bytes in its socket (FIONREAD)
  std::chrono::steady_clock::time_point accepted;
};

// The connection to close so that a new one fits: an unauthenticated one
// with nothing waiting, else one with bytes waiting, oldest first in each.
// nullopt when all are authenticated (then the new one is refused).
std::optional<std::size_t> PickEviction(std::span<const ConnectionView> open);

}  // namespace tether::supervisor
