// Finding the static supervisor for a sandbox's architecture and installing
// it there through the transport, under a content-addressed name so that a
// second start finds it in place.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tether/transport.h"

namespace tether {

// Path of tether-supervisor-<arch> on this machine. Searched in order:
// $TETHER_SUPERVISOR_DIR, the build tree that produced this library,
// <dir of the running executable>/../libexec/tether, the install prefix.
absl::StatusOr<std::string> FindSupervisorBinary(const std::string& arch);

// The bytes of tether-supervisor-<arch>: from $TETHER_SUPERVISOR_DIR when it
// is set, else the copy built into this library, else FindSupervisorBinary().
absl::StatusOr<std::string> SupervisorBytes(const std::string& arch);

// Where the supervisor with these bytes is installed inside a sandbox:
// <bin_dir>/tether-supervisor-<version>-<arch>-<sha256 prefix>.
std::string SupervisorInstallPath(const SandboxInfo& info, std::string_view bytes);
// Its file name alone: tether-supervisor-<version>-<arch>-<sha256 prefix>.
std::string SupervisorInstallName(std::string_view arch, std::string_view sha256_hex);

// A supervisor binary in memory with its sha256 (hex).
struct SupervisorImage {
  std::string bytes, sha256;
};

// The bytes of tether-supervisor-<arch> (SupervisorBytes) and their hash,
// read and hashed once per process on a helper thread, never on the
// caller's event loop; later calls share the cached image.
boost::asio::awaitable<absl::StatusOr<std::shared_ptr<const SupervisorImage>>> LoadSupervisor(
    const std::string& arch);

// Installs the supervisor for info.arch into info.bin_dir; returns its path
// inside the sandbox.
boost::asio::awaitable<absl::StatusOr<std::string>> InstallSupervisor(Transport& transport,
                                                                      const SandboxInfo& info);

}  // namespace tether
