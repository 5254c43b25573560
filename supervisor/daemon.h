// The supervisor daemon: owns one child and serves the protocol on the
// private socket until the exit record is acknowledged or lingers out.
//
// One thread, one Asio io_context, coroutines per pump:
//   output pump (per stream)  child pipe -> OutputRing, only into free space  (child_io.h)
//   stdin pump                stdin queue -> child pipe (non-blocking)        (child_io.h)
//   reaper                    SIGCHLD -> wait4 every child (subreaper)        (reaper.h)
//   accept loop               socket -> Attachment (SO_PEERCRED, admission.h) (daemon.cc)
//   attachment reader/writer  bytes <-> AttachmentCore, the protocol sans I/O (attachment.h)
// The state they share is plain data (supervised.h); what the protocol
// decides is pure (attachment_core.h, output_sender.h) and comes back to the
// daemon as actions. Nothing blocks: every fd is non-blocking and every
// buffer is bounded (the ring by its capacity, stdin by the window
// advertised in Welcome, control replies by the request rate of a single
// attachment).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

#include "supervisor/supervised.h"
#include "tether/protocol/tether.pb.h"

namespace tether::supervisor {

// (kStdinWindowBytes, kMaxOutputChunkBytes, kDefaultWindowBytes, kLeaseMs
// and kHelloTimeoutMs are the protocol core's: supervised.h, stdin_queue.h.)
inline constexpr unsigned kDefaultLingerMs = 10 * 60 * 1000;    // exit record kept this long
// After the child exits, output is read until EOF for at most this long: a
// background descendant holding the pipes must not hold back the exit.
inline constexpr unsigned kDefaultDrainMs = 2000;

struct DaemonConfig {
  wire::Launch launch;
  std::string state_dir;
  int listen_fd = -1;
  // The directory's lock (state_dir.h TryLockDir), inherited from the launch
  // call: held, never used, until the daemon exits.
  int lock_fd = -1;
  // The child's environment (child.h BuildEnvironment), built by the launch
  // call from its ambient environment before it erased that (proc_scrub.h);
  // or why the requested variables were refused.
  absl::StatusOr<std::vector<std::string>> child_env = std::vector<std::string>{};
  // The process that ran the launch call (on the local provider: the host
  // itself). While it is stopped (Ctrl-Z before it attached), an
  // end_with_host process is not abandoned.
  pid_t launcher_parent = 0;
  std::string supervisor_path;  // the running binary (for Welcome); may be empty
};

// Runs in the detached daemon process; returns its exit status. Removes the
// private directory before returning.
int RunDaemon(DaemonConfig config);

}  // namespace tether::supervisor
