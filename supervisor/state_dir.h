// The supervisor's private state: a directory (0700, checked with lstat after
// creation) holding the Unix socket (0600). Paths longer than sun_path work
// because the socket is bound and connected relative to the directory.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace tether::supervisor {

inline constexpr char kSocketName[] = "sock";

// Creates `path` (absolute) as a fresh private directory. Its parent is
// created too if missing and must then be a private directory of ours (not a
// symlink, owned by us, no group/other access). Refuses an existing `path`
// (kAlreadyExists) and anything that is not what we created.
absl::Status CreatePrivateDir(const std::string& path);

// Checks that `path` is a directory owned by us with mode 0700, not a symlink.
absl::Status CheckPrivateDir(const std::string& path);

// Creates, binds (mode 0600) and listens on `dir`/sock. Returns the fd.
absl::StatusOr<int> ListenInDir(const std::string& dir);

// Connects to `dir`/sock. Returns the fd (blocking, close-on-exec).
absl::StatusOr<int> ConnectInDir(const std::string& dir);

// Removes the socket, the daemon's mark and the directory (best effort,
// after exit).
void RemovePrivateDir(const std::string& dir);

// Who may still start a launch's daemon holds its directory's lock (flock,
// exclusive): the copy of the launch that made the directory, from its
// mkdir, then the daemon it forks (which inherits it), for the daemon's
// whole life. A lock nobody holds means nobody alive ever will start that
// daemon: the copy that made the directory was killed before its daemon
// ran, or the daemon has died.
// Locks `dir` without waiting: the descriptor (O_CLOEXEC; closing it
// releases the lock), kUnavailable while someone else holds it.
absl::StatusOr<int> TryLockDir(const std::string& dir);

// The daemon's mark: "<dir>/daemon", written by the daemon before it starts
// anything. A directory with a free lock and no mark never had a child, and
// never will: a later copy of its launch may start it. With the mark, a
// free lock means the daemon died after it may have started its child
// (kill -9): nothing may start it again.
inline constexpr char kDaemonMarkName[] = "daemon";
absl::Status LeaveDaemonMark(const std::string& dir);
bool HasDaemonMark(const std::string& dir);

// Private directories under the state root `root` whose daemon is provably
// gone: a bound socket nobody listens on (ECONNREFUSED: killed with -9).
// Removes them, looking at most at 4 * `max_probes` directories (from a
// varying start) and probing at most `max_probes` sockets; returns how many. A
// directory of a live daemon, or without a socket yet, is never touched.
// Sockets bound less than kMinDeadSocketAgeSeconds ago are never probed.
inline constexpr std::int64_t kMinDeadSocketAgeSeconds = 60;
int RemoveDeadStateDirs(const std::string& root, int max_probes);

// Cancellation markers ("<launch id>.cancel") older than `max_age_seconds`
// in the private state root `root`: a host writes one when it abandons a
// setup, and the launch it was meant for never came (or came and went).
// Removes them (our regular files only); returns how many.
inline constexpr std::int64_t kStaleMarkerSeconds = 3600;
int RemoveStaleCancelMarkers(const std::string& root, std::int64_t max_age_seconds);

}  // namespace tether::supervisor
