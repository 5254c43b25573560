// The limits and defaults both sides of the wire must agree on, defined
// once: the supervisor enforces them, the host checks a request against
// them before it sends it (so a bad argument fails with a clear error on
// the host, not as a refusal from the sandbox). The frame limits are in
// frame.h; the public API's own limits (include/tether/process_types.h)
// are checked against these where they must match (host/process/start.cc).
#pragma once

#include <cstddef>

namespace tether::protocol {

// Launch.lease_ms when 0: an attachment with no request for this long is
// lost (PROTOCOL.md 5.3); the host pings every third of it.
inline constexpr unsigned kDefaultLeaseMs = 30 * 1000;

// Launch.pty.cols and rows, and Resize: 1..kMaxPtyCells each.
inline constexpr unsigned kMaxPtyCells = 10000;

// Launch.ring_bytes (per output stream) when 0, and its bounds.
inline constexpr std::size_t kDefaultRingBytes = 1 << 20;
inline constexpr std::size_t kMinRingBytes = 4096;
inline constexpr std::size_t kMaxRingBytes = 64u << 20;

// The data of one Output frame at most: the host's chunk size, so that a
// frame becomes one chunk for the application without being split again.
inline constexpr std::size_t kMaxOutputChunkBytes = 16 * 1024;

// Hello.handle: what a host draws for each handle, and what the supervisor
// accepts at most (PROTOCOL.md 4.2, 5.4).
inline constexpr std::size_t kHandleIdBytes = 16;
inline constexpr std::size_t kMaxHandleIdBytes = 32;

}  // namespace tether::protocol
