// Runs a command on this machine as a Channel: its stdin and stdout are one
// end of a socketpair, its stderr is kept for diagnostics. The local provider
// runs the supervisor this way; the command provider runs its native channel
// command (ssh, kubectl exec, ...) this way.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tether/transport.h"

namespace tether::internal {

// UNAVAILABLE "what: strerror(err)".
absl::Status ErrnoStatus(const std::string& what, int err);

// argv[0] is looked up in PATH when it has no slash. The command gets its own
// process group (a terminal's Ctrl-C is for the application to forward), a
// clean signal mask and default dispositions, and runs in `cwd` if set.
absl::StatusOr<std::unique_ptr<Channel>> SpawnChannel(const boost::asio::any_io_executor& ex,
                                                      const std::vector<std::string>& argv,
                                                      const std::string& cwd);

// A channel over a connection to the supervisor socket in `state_dir`, which
// must be a directory of ours with mode 0700 (never a link), holding a socket
// whose peer runs as our uid (SO_PEERCRED).
absl::StatusOr<std::unique_ptr<Channel>> ConnectChannel(const boost::asio::any_io_executor& ex,
                                                        const std::string& state_dir);

}  // namespace tether::internal
