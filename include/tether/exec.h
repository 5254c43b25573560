// Bounded exec: run a command to completion, feed it finite stdin, capture
// its exact bytes up to a limit, and optionally see every chunk live.
//
//   ExecOptions o;
//   o.start.argv = {"make", "-j2"};
//   o.on_output = [](const OutputChunk& c) -> asio::awaitable<absl::Status> {
//     Render(c);                         // awaited per chunk
//     co_return absl::OkStatus();
//   };
//   absl::StatusOr<ExecResult> r = co_await Exec(transport, o);
//
// A failing callback stops local observation only: the process is not
// terminated, and the result keeps the error plus whatever was confirmed
// (captured bytes, and the exit if it was already known).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "tether/process.h"

namespace tether {

inline constexpr std::size_t kDefaultCaptureBytes = 1 << 20;  // per stream

struct ExecOptions {
  StartOptions start;                      // stdin_pipe is set from `stdin`
  std::optional<std::string> stdin;        // written in order, then EOF; none: stdin closed
  std::size_t capture_limit = kDefaultCaptureBytes;  // retained bytes per stream
  std::function<boost::asio::awaitable<absl::Status>(const OutputChunk&)> on_output;
};

struct ExecResult {
  std::optional<ExitStatus> exit;  // set unless `error` cut the observation short
  std::string stdout_bytes, stderr_bytes;
  bool stdout_truncated = false, stderr_truncated = false;  // capture_limit reached
  absl::Status error;  // a callback or input failure; OK when it ran to the end
};

// Start errors are returned as the status; everything after the start is in
// the result.
boost::asio::awaitable<absl::StatusOr<ExecResult>> Exec(Transport& transport, ExecOptions options);

}  // namespace tether
