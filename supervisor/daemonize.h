// The double fork that detaches a long-lived supervisor process (the daemon,
// a relay) from the exec call that started it, written once.
//
// The caller's process stays the caller; a grandchild becomes the daemon:
// in its own session (the exec call's hangup never reaches it), reparented
// away from the caller, stdio on /dev/null, every descriptor closed except
// `keep`, cwd "/", SIGPIPE and SIGHUP ignored.
//
//   switch (Daemonize({.keep = {listen_fd}, .subreaper = true})) {
//     case Forked::kDaemon: _exit(RunDaemon(...));
//     case Forked::kCaller: /* the daemon runs */ break;
//     case Forked::kFailed: /* nothing runs; errno says why */ break;
//   }
#pragma once

#include <vector>

namespace tether::supervisor {

enum class Forked {
  kDaemon,  // we are the detached grandchild
  kCaller,  // we are the caller, and the daemon runs
  kFailed,  // no daemon: a fork failed (errno is the first fork's, or EAGAIN)
};

struct DaemonizeOptions {
  std::vector<int> keep;   // descriptors the daemon keeps open (besides stdio)
  bool subreaper = false;  // PR_SET_CHILD_SUBREAPER: orphans of our child are ours to reap
};

// Forks twice; see the file comment. Only kDaemon returns in the grandchild.
Forked Daemonize(const DaemonizeOptions& options);

// Closes every descriptor from 3 up except those in `keep`.
void CloseFdsExcept(std::vector<int> keep);

}  // namespace tether::supervisor
