// Process references: the private JSON a host saves to reopen a process
// later (`tether start` prints one, `tether attach REF` takes it).
//
// It holds the per-launch secret, so it is as private as a credential: keep
// it out of logs. It expires at most kReferenceLifetime after it was made.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tether {

inline constexpr std::int64_t kReferenceLifetimeSeconds = 24 * 3600;
inline constexpr std::size_t kMaxReferenceBytes = 16 * 1024;

struct ProcessReference {
  std::string provider;    // Transport::name()
  std::string sandbox;     // Transport::sandbox_id()
  std::string supervisor;  // the supervisor binary inside the sandbox
  std::string state_dir;   // the daemon's private directory
  std::string secret;      // raw bytes
  std::int32_t pid = -1;
  bool stdin_pipe = false;
  bool pty = false;
  // The output settings the process was started with.
  bool text = false;
  bool backpressure = true;
  std::uint64_t window_bytes = 0;     // 0: the default
  std::int64_t output_left = -1;      // finite mode: bytes left under the cap; -1: stream
  std::uint64_t stdout_offset = 0;  // output the holder already consumed
  std::uint64_t stderr_offset = 0;
  std::int64_t expires_at = 0;      // unix seconds (the sandbox's clock)
  // The supervisor's MAC over the launch and expires_at (wire::Ticket): the
  // supervisor refuses a reference whose expiry was changed.
  std::string ticket_mac;  // raw bytes
};

std::string EncodeReference(const ProcessReference& ref);

// Parses and checks a reference: every field present and well-formed, not
// expired at `now` (unix seconds). Expiry is enforced by the supervisor
// (the ticket), so a reference cannot be made to live longer by editing it.
// kInvalidArgument for a malformed one, kDeadlineExceeded (EXPIRED) for an
// old one.
absl::StatusOr<ProcessReference> ParseReference(std::string_view json, std::int64_t now);

}  // namespace tether
