// Boat's REST API as data, sans-I/O: the JSON bodies of the two calls tether
// makes (POST /sandboxes/{id}/commands, PUT /sandboxes/{id}/files), the
// parser of a command's answer, argv as one shell command line, and HTTP
// failures as Status codes. boat_transport.cc only moves these bytes; the
// unit tests (tests/host/native/boat_test.cc) call them directly. What is a fact of
// Boat's API and what is our assumption: tether/providers/boat.h.
//
//   std::string body = boat::CommandRequestJson(boat::CommandLine(argv), 120);
//   absl::StatusOr<boat::CommandResult> r = boat::ParseCommandResponse(resp.body);
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "host/net/http.h"

namespace tether::boat {

inline constexpr int kMaxTimeoutSeconds = 600;  // Boat's cap on a sync command (PROVIDERS.md)
// A command's answer: stdout and stderr as JSON strings. tether's commands
// print at most an exchange reply (2 MiB, internal::kMaxOneShotOutputBytes)
// and a JSON escape takes at most 6 bytes per byte (\u0000).
inline constexpr std::size_t kMaxResponseBytes = 16u << 20;
// A file for PUT /files (base64 in JSON: 4/3 of it); the supervisor is a few MB.
inline constexpr std::size_t kMaxFileBytes = 48u << 20;

// What POST .../commands answered.
struct CommandResult {
  int exit_code = 0;        // exitCode, 0..255
  std::string stdout_text;  // stdout, as the JSON string decoded (UTF-8)
  std::string stderr_text;  // stderr
  bool timed_out = false;   // timedOut: Boat stopped it at timeoutSeconds
};

// argv[0..] shell-quoted into one command line for `command` (the sandbox's
// POSIX shell runs it; `exec` spares one shell process). kInvalidArgument
// for an empty argv or an argument with a NUL byte (a shell string cannot
// carry one).
absl::StatusOr<std::string> CommandLine(const std::vector<std::string>& argv);

// {"command": ..., "timeoutSeconds": N}. `command` must be valid UTF-8 (JSON
// text); `timeout_seconds` within 1..kMaxTimeoutSeconds.
absl::StatusOr<std::string> CommandRequestJson(std::string_view command, int timeout_seconds);

// `command` behind a first line "# tether-call CALL_ID" (a shell comment:
// nothing runs). Boat has no request id; this one makes every call tether
// sends its own request, so a resend of the same call (after a 429) is told
// apart from a new call with the same command line, in Boat's logs and by
// the emulator's duplicate check.
std::string WithCallId(std::string_view command, std::string_view call_id);

// {"path": ..., "content": <base64 of bytes>} (our assumption of the field
// names); `path` absolute, valid UTF-8, no NUL; bytes at most kMaxFileBytes.
absl::StatusOr<std::string> FileRequestJson(std::string_view path, std::string_view bytes);

// Parses a 2xx answer of POST .../commands: kResourceExhausted above
// kMaxResponseBytes (checked before parsing), kDataLoss (ErrorCode
// kProtocol) for anything that is not {exitCode: 0..255 | null when timed
// out, stdout: string, stderr: string, timedOut: bool}; absent stdout,
// stderr or timedOut count as "" and false.
absl::StatusOr<CommandResult> ParseCommandResponse(std::string_view body);

// A non-2xx answer as a Status: 401 kUnauthenticated and 403
// kPermissionDenied ("the API key (BOAT_API_KEY) was refused"), 404
// kNotFound ("sandbox 'ID' not found"), 408/429/5xx kUnavailable (a caller
// may retry), other 4xx kInvalidArgument/kFailedPrecondition as
// net::HttpError; `what` names the call ("POST /sandboxes/ID/commands").
absl::Status HttpFailure(const net::Response& r, std::string_view what, std::string_view sandbox_id);

// The failure of POST .../commands: any 5xx is OUTCOME_UNKNOWN (a gateway
// or the service failed somewhere between taking the call and answering it:
// the command may have run, and Boat documents no request id to ask or to
// dedup on, so it is never sent again); others as HttpFailure.
absl::Status CommandHttpFailure(const net::Response& r, std::string_view what, std::string_view sandbox_id);

// Whether an HTTP status means "not done, try again" for a call that is
// safe to repeat (PUT files to a temporary name): 429, 502, 503, 504.
bool RetryableHttpStatus(int status);

// `st` with every occurrence of `key` replaced by <BOAT_API_KEY> (a server
// that echoes the key back must not put it in our messages).
absl::Status Scrub(const absl::Status& st, std::string_view key);

}  // namespace tether::boat
