// A command run through Modal's task command router, as a Channel
// (internal to the modal provider): TaskExecStart with an exec id chosen
// here (a retried start is the same exec), stdin as TaskExecStdinWrite at
// exact offsets (a retried write is idempotent) and eof, stdout and stderr
// as TaskExecStdioRead streams reopened at the next offset after a transient
// error (or a refreshed JWT), and the exit status from TaskExecWait once
// stdout ended. The router has no kill: Close() cancels the streams and
// closes stdin, which ends the supervisor's bridge.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "host/native/modal/modal_session.h"
#include "tether/transport.h"

namespace tether::modal {

inline constexpr std::size_t kInputPiece = 1 << 20;         // stdin bytes per TaskExecStdinWrite
inline constexpr std::size_t kReadAhead = 4 << 20;          // stdout bytes buffered before the stream is paused
inline constexpr std::size_t kDiagnosticsBytes = 4096;      // stderr tail kept
inline constexpr std::size_t kMaxArgvBytes = 1 << 20;       // all of argv, refused above

// Starts argv (argv[0] an absolute path) in the session's sandbox.
boost::asio::awaitable<absl::StatusOr<std::unique_ptr<Channel>>> StartExec(std::shared_ptr<ModalSession> session,
                                                                           std::vector<std::string> argv);

// A fresh exec id: a random UUID (version 4), as the SDK's.
std::string NewExecId();

}  // namespace tether::modal
