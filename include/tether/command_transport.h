// The `command` provider: the native channel is any local command that runs
// one shell command line inside the sandbox with its stdin and stdout
// connected as byte streams. The command line is appended to `prefix` as one
// argument:
//
//   ssh:      {"ssh", "-T", "-o", "BatchMode=yes", "user@host"}
//   docker:   {"docker", "exec", "-i", "CONTAINER", "sh", "-c"}
//   podman:   {"podman", "exec", "-i", "CONTAINER", "sh", "-c"}
//   kubectl:  {"kubectl", "exec", "-i", "POD", "--", "sh", "-c"}
//   nsenter:  {"nsenter", "-t", "PID", "-U", "-m", "-p", "-n", "sh", "-c"}
//
// The sandbox needs a POSIX sh, uname, id, mkdir, chmod, mv, head and
// sha256sum (coreutils or busybox), and base64 for text tunnels. Probe
// detects the architecture (uname -m)
// and makes a private directory $TMPDIR/tether-<uid> (0700, ours, not a
// symlink; /tmp when TMPDIR is unset or not absolute). The supervisor is
// uploaded through the channel as exact bytes (through text tunnels: as
// base64 pieces in command lines, no stdin needed), checked with sha256
// inside the sandbox, installed atomically under a content-addressed name,
// and reused when it is already there: a second start uploads nothing and,
// within one transport, does not even look.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tether/shell_setup.h"  // ShellQuote
#include "tether/transport.h"

namespace tether {

struct CommandOptions {
  std::vector<std::string> prefix;  // the native channel; see above
  // Identifies the sandbox in process references; empty: the prefix.
  std::string sandbox_id;
  // Empty: detect with uname -m. Set it, with `emulator`, to run a sandbox of
  // another architecture under user-mode emulation (qemu-aarch64).
  std::string arch;
  std::string emulator;  // prepended to every supervisor command line
  // kText for a channel that carries only text lines: frames travel as
  // armored lines, and a failed channel is reattached automatically.
  TunnelMode tunnel = TunnelMode::kBinary;
  // Called as an upload proceeds (bytes sent, total).
  std::function<void(std::size_t, std::size_t)> upload_progress;
};

absl::StatusOr<std::shared_ptr<Transport>> MakeCommandTransport(boost::asio::any_io_executor ex,
                                                                CommandOptions options);

}  // namespace tether
