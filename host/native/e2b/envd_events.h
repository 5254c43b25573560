// What envd says, decoded without I/O (internal to the e2b provider): the
// ProcessEvent JSON of a Start stream's messages, the exit status an end
// event means, envd's version, and Connect errors (end-of-stream messages
// and failed calls) as Status values. Used by e2b_channel.cc; tests and
// fuzzers call them directly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "host/net/http.h"

namespace tether::e2b {

struct EnvdVersion {
  int major = 0, minor = 0, patch = 0;
  bool AtLeast(int a, int b, int c) const {
    return major != a ? major > a : minor != b ? minor > b : patch >= c;
  }
};
// "0.5.7", "v0.5.7", "0.5.7-beta"; kInvalidArgument otherwise.
absl::StatusOr<EnvdVersion> ParseEnvdVersion(std::string_view text);

// One ProcessEvent, from a Start stream's message {"event":{...}}.
struct ProcessEvent {
  enum class Kind { kStart, kData, kEnd, kKeepalive, kOther };
  Kind kind = Kind::kOther;
  std::uint32_t pid = 0;       // start
  std::string out, err;        // data: decoded stdout / stderr bytes
  std::optional<int> exit;     // end: the code, or 128 + signal; nullopt if unknowable
  std::string status, error;   // end: envd's status text and error, if any
};
// kInvalidArgument (with kProtocol attached) for JSON or base64 that is bad.
absl::StatusOr<ProcessEvent> ParseProcessEvent(std::string_view message);

// The exit status an end event means: `exit_code` unless `status` says
// "signal: NAME" (Go's wording), then 128 + that signal; nullopt when
// neither is known.
std::optional<int> ExitFromEnd(std::optional<std::int64_t> exit_code, std::string_view status);

// A Connect error code ("not_found", ...) as a Status code.
absl::StatusCode StatusCodeOfConnect(std::string_view code);
// The end-stream message: OK for {} (or no error), else the mapped error.
absl::Status ParseEndStream(std::string_view message, std::string_view what);
// A failed unary call or stream head: the Connect error JSON when the body
// is one, else net::HttpError.
absl::Status EnvdHttpError(const net::Response& r, std::string_view what);

// HTTP answers that say nothing was done (429, 502, 503, 504): worth a retry.
bool RetryableStatus(int status);

}  // namespace tether::e2b
