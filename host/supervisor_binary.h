// Finding the static supervisor for a sandbox's architecture and installing
// it there through the transport, under a content-addressed name so that a
// second start finds it in place.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <string>

#include "absl/status/statusor.h"
#include "host/transport.h"

namespace tether {

// Path of tether-supervisor-<arch> on this machine. Searched in order:
// $TETHER_SUPERVISOR_DIR, the build tree that produced this library,
// <dir of the running executable>/../libexec/tether, the install prefix.
absl::StatusOr<std::string> FindSupervisorBinary(const std::string& arch);

// Installs the supervisor for info.arch into info.bin_dir; returns its path
// inside the sandbox.
boost::asio::awaitable<absl::StatusOr<std::string>> InstallSupervisor(Transport& transport,
                                                                      const SandboxInfo& info);

}  // namespace tether
