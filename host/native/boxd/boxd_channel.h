// A command run through boxd's Exec stream, as a Channel (internal to the
// boxd provider). One bidirectional call is the command: its first chunk
// names the VM and the command line, later chunks are stdin (at most
// kInputPiece bytes each, one in flight), the half-close is EOF; server
// chunks are stdout (read ahead at most kReadAhead, then gRPC's flow
// control holds the command back) or stderr (a bounded tail for
// Diagnostics), and the exit code comes last. Close() cancels the call,
// which boxd answers by killing the command's process group: the
// supervisor's bridge, never its daemon (which left that group).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "host/native/boxd/boxd_session.h"
#include "tether/transport.h"

namespace tether::boxd {

inline constexpr std::size_t kInputPiece = 256 << 10;    // stdin bytes per chunk, far under the 4 MiB cap
inline constexpr std::size_t kReadAhead = 1 << 20;       // stdout bytes buffered before reading pauses
inline constexpr std::size_t kDiagnosticsBytes = 4096;   // stderr tail kept
inline constexpr std::size_t kMaxCommandBytes = 1 << 20; // the command line, refused above

// argv as one POSIX shell command line, "exec 'argv0' 'argv1' ...": every
// argument single-quoted (a ' as '\''), so the guest's shell runs exactly
// argv. kInvalidArgument for an empty argv, a NUL or invalid UTF-8 (the
// command is a proto string), or more than kMaxCommandBytes.
absl::StatusOr<std::string> CommandLine(const std::vector<std::string>& argv);

// The exit status a call that ended reports: the last non-zero exit_code
// it carried, else 0, when it ended OK; a negative exit_code is the signal
// -exit_code (128 + N). nullopt when it did not end OK: never a guess.
std::optional<int> ExitStatus(bool ended_ok, std::optional<int> last_exit_code);

// Starts argv in the session's VM.
boost::asio::awaitable<absl::StatusOr<std::unique_ptr<Channel>>> StartExec(std::shared_ptr<BoxdSession> session,
                                                                           std::vector<std::string> argv);

}  // namespace tether::boxd
