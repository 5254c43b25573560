// `tether-supervisor launch`: the one exec call that starts a process.
//
// Reads a Launch frame from stdin (the secret travels only there), validates
// it, creates the private directory and socket, starts the daemon detached
// from this call (double fork, own session, child subreaper), then turns into
// the first bridge so the host's Hello can follow the Launch on the same
// channel. A launch id whose directory already exists starts nothing: the
// call just bridges to the daemon that owns it.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "protocol/command_line.h"
#include "tether/protocol/tether.pb.h"

namespace tether::supervisor {

inline constexpr unsigned kLaunchReadTimeoutMs = 30 * 1000;
// A copy of a launch (Hello.resend) that finds the launch's directory made
// but no daemon listening in it yet (the first copy between its mkdir and
// its listen, slow under load) waits this long for the socket before it
// reports NOT_FOUND.
inline constexpr unsigned kCopyWaitsForDaemonMs = 5 * 1000;
inline constexpr std::size_t kMaxArgs = 64 * 1024;
inline constexpr std::size_t kMaxLaunchIdBytes = 64;
inline constexpr std::size_t kMinSecretBytes = 16;
inline constexpr std::size_t kMaxSecretBytes = 64;

// The cancellation marker of a launch: "<state_dir>.cancel", beside the
// private directory in the same private state root. A host that abandons a
// setup writes it; a daemon whose launch was resent (Hello.resend) leaves
// one as a tombstone when its record goes. A launch that finds it starts no
// child and reports ERROR_CANCELLED instead, and leaves it in place: more
// than one copy of a launch may still be on its way. Markers are removed
// when an hour old (RemoveStaleCancelMarkers), by a later launch.
std::string CancelMarkerPath(const std::string& state_dir);
bool LaunchCancelled(const std::string& state_dir);
// Writes the marker (best effort: a marker that cannot be written leaves
// the late copy to find no directory, as before resends existed).
void LeaveCancelMarker(const std::string& state_dir);

// Checks a Launch before anything is created. kInvalidArgument with the reason.
absl::Status ValidateLaunch(const wire::Launch& launch);

// Entry point; returns the process exit status. `ambient_env` is the launch
// call's environment, copied before main() erased it (proc_scrub.h): the
// child's environment is built from it before the daemon starts, and the
// copy is erased then. Per `cmd.tunnel`:
//   kBinary, kText: the Launch (and the first attachment) on stdio, raw or
//     armored; then this call bridges to the daemon.
//   kDirect: nothing is bridged: once the daemon listens (or already did,
//     for a repeated launch id) it exits 0 with nothing written, and the
//     host connects to the socket itself. Errors are reported as for launch.
//   kExchange: the Launch frame (and the host's Hello after it) comes in the
//     host's private file `init_file` (read once and removed: never argv),
//     errors go out armored, and a relay (exchange.h) with `relay_id` takes
//     the place of the bridge, sending the Hello first.
int LaunchMain(const protocol::LaunchCommand& cmd, std::vector<std::string> ambient_env);

}  // namespace tether::supervisor
