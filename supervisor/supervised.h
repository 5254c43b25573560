// The supervised process as plain data: what the daemon's I/O knows of it
// and what every attachment's protocol core (attachment_core.h) reads and
// decides on.
//
// Owns the launch request, the two output rings and their EOFs, the stdin
// queue, the phase and exit record, the generation counter and whether an
// output attachment holds the process. Never owns a descriptor or a timer
// and makes no system call: the daemon's pumps fill the rings and drain
// stdin, the reaper records the exit, the cores release acknowledged output,
// accept stdin and hand out generations.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "protocol/limits.h"
#include "supervisor/output_ring.h"
#include "supervisor/stdin_queue.h"
#include "supervisor/tickets.h"
#include "tether/protocol/tether.pb.h"

namespace tether::supervisor {

inline constexpr int kNumStreams = 2;  // stdout (or the terminal's output), stderr
// Per Output frame: the host's chunk size, so that a frame's data becomes
// one chunk for the application without being split or copied again.
using protocol::kMaxOutputChunkBytes;
inline constexpr std::size_t kDefaultWindowBytes = 1 << 20;  // output credit if Hello has none
inline constexpr unsigned kLeaseMs = protocol::kDefaultLeaseMs;  // attachment lost after this idle
inline constexpr unsigned kHelloTimeoutMs = 10 * 1000;       // to authenticate after connect
// A resent launch's Hello (Hello.resend) needs no ticket this long after the
// launch: every ticket issued by then is valid far longer (kTicketLifetimeSeconds).
inline constexpr std::int64_t kResendWindowSeconds = 120;

// Stream 0 is stdout, or the combined terminal output with a pty; 1 is stderr.
wire::Stream StreamOf(int i, bool pty);

struct Supervised {
  // `ticket_key`: kTicketKeyBytes random bytes (the daemon draws them).
  Supervised(wire::Launch launch_request, std::string ticket_key);

  bool pty() const { return launch.has_pty(); }
  bool stdin_enabled() const { return pty() || launch.stdin_mode() == wire::STDIN_PIPE; }
  unsigned lease_ms() const { return launch.lease_ms() ? launch.lease_ms() : kLeaseMs; }
  // What Welcome and Status report.
  wire::ProcessState State() const;

  const wire::Launch launch;
  std::array<OutputRing, kNumStreams> rings;
  std::array<bool, kNumStreams> eof{};  // nothing more will come into the ring
  StdinQueue stdin_queue;  // (not `stdin`: a macro in musl)
  wire::ProcessState::Phase phase = wire::ProcessState::PHASE_STARTING;
  pid_t pid = -1;
  pid_t pgid = -1;
  std::optional<wire::Exit> exit;  // set once both streams ended after the child did
  std::uint64_t generation = 0;    // of the newest output attachment; 0 before the first
  bool held = false;               // an output attachment holds the process (busy for others)
  std::string holder_handle;       // the Hello.handle of the attachment that holds it (may be empty)
  const TicketAuthority tickets;
  std::string supervisor_path;  // this binary, for Welcome
  // When the daemon started (seconds since the epoch; 0: unknown, so no
  // Hello counts as a resend), and whether a resent launch's Hello was
  // accepted (Hello.resend): its record then leaves a tombstone.
  std::int64_t launched_at_s = 0;
  bool resent = false;
};

}  // namespace tether::supervisor
