// Daytona's API and toolbox as data, sans-I/O: the JSON bodies tether sends,
// the parsers of the answers it reads (the sandbox, the toolbox proxy URL,
// an exec, a command), the follow-logs demultiplexer, argv as one shell
// command line and HTTP failures as Status codes. daytona_transport.cc only
// moves these bytes; tests/host/native/daytona_test.cc and the fuzzer call them
// directly. Facts and assumptions: tether/providers/daytona.h.
//
//   absl::StatusOr<daytona::SandboxView> s = daytona::ParseSandbox(resp.body);
//   daytona::LogDemuxer d;
//   d.Feed(ws_message, &stdout_bytes, &stderr_bytes);
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "host/net/http.h"

namespace tether::daytona {

// An answer of the API or of the toolbox's JSON calls (not the log stream):
// they are small; a larger one is refused before parsing.
inline constexpr std::size_t kMaxAnswerBytes = 1u << 20;
// One input request's data (a JSON string of armored lines: a frame is at
// most 16 KiB of payload, 20 KiB armored; writes batch a few).
inline constexpr std::size_t kMaxInputBytes = 4u << 20;
// A file for POST /files/bulk-upload (multipart, raw bytes); the supervisor is a few MB.
inline constexpr std::size_t kMaxFileBytes = 64u << 20;

// What GET /sandbox/{id} says that tether uses.
struct SandboxView {
  std::string id;
  std::string state;               // "started", "stopped", ...; "" when absent
  std::string toolbox_proxy_url;   // "" when absent: ask /toolbox-proxy-url
};

// kDataLoss (ErrorCode kProtocol) for anything that is not a JSON object
// with string fields where present; kResourceExhausted above kMaxAnswerBytes.
absl::StatusOr<SandboxView> ParseSandbox(std::string_view body);
// GET /sandbox/{id}/toolbox-proxy-url: {"url": "..."} with a non-empty url.
absl::StatusOr<std::string> ParseProxyUrl(std::string_view body);
// POST .../exec with runAsync: {"cmdId": "..."}: the id, non-empty, at most
// 256 bytes of [A-Za-z0-9._-], not dots only (it goes into paths).
absl::StatusOr<std::string> ParseExecAnswer(std::string_view body);
// GET .../command/{cid}: {"id", "command", "exitCode"?}: the exit code
// (0..255) once the command exited, nullopt while it runs.
absl::StatusOr<std::optional<int>> ParseCommandAnswer(std::string_view body);
// GET /process/session/{sid} (the SDK's getSession): {"sessionId",
// "commands": [{"id", "command", "exitCode"?}]}: the commands' ids, each
// checked as ParseExecAnswer checks a cmdId; absent or null commands: none.
absl::StatusOr<std::vector<std::string>> ParseSessionCommands(std::string_view body);

// The toolbox base: toolboxProxyUrl + "/" + sandbox id (as the SDK builds it).
std::string ToolboxBase(std::string_view proxy_url, std::string_view sandbox_id);

// argv[0..] shell-quoted into one command line, run by the session's shell.
// No `exec`: the toolbox wraps the line in a group whose redirections and
// exit-code bookkeeping must survive it. kInvalidArgument for an empty argv
// or an argument with a NUL byte or invalid UTF-8 (a JSON string).
absl::StatusOr<std::string> CommandLine(const std::vector<std::string>& argv);

std::string SessionRequestJson(std::string_view session_id);
// {"command", "runAsync": true, "suppressInputEcho": true}.
absl::StatusOr<std::string> ExecRequestJson(std::string_view command);
// {"data": text}: text must be valid UTF-8 without NUL, at most kMaxInputBytes.
absl::StatusOr<std::string> InputRequestJson(std::string_view text);

// The multipart body of POST /files/bulk-upload for one file: fields
// files[0].path and files[0].file; `boundary` must not occur in `bytes`
// (the caller picks a random one and checks).
std::string BulkUploadBody(std::string_view path, std::string_view bytes, std::string_view boundary);

// The follow-logs stream: 01 01 01 switches to stdout, 02 02 02 to stderr,
// wherever they occur (as the SDK reads them); bytes before any marker are
// dropped. A marker split across messages is recognised.
class LogDemuxer {
 public:
  // Appends the stdout and stderr bytes of `chunk` to the two outputs.
  void Feed(std::string_view chunk, std::string* out, std::string* err);
  // Bytes of the stream fed so far (a reconnect skips this many of the replay).
  std::uint64_t consumed() const { return consumed_; }

 private:
  void Emit(char c, std::string* out, std::string* err);
  enum class Stream { kNone, kOut, kErr };
  Stream cur_ = Stream::kNone;
  std::string held_;  // 1-2 bytes that may begin a marker
  std::uint64_t consumed_ = 0;
};

// A non-2xx answer as a Status: 401 kUnauthenticated and 403
// kPermissionDenied ("the API key (DAYTONA_API_KEY) was refused"), 404
// kNotFound (`what` says what was not found), 408/429/5xx kUnavailable,
// other 4xx as net::HttpError; `what` names the call.
absl::Status HttpFailure(const net::Response& r, std::string_view what, std::string_view sandbox_id);

// 429, 502, 503, 504: sent again for a call that is safe to repeat (a GET,
// a DELETE, an upload to a temporary name, a session with our own id).
bool RetryableHttpStatus(int status);

// The failure of a call that is not safe to repeat (exec, input): any 5xx
// is OUTCOME_UNKNOWN (the gateway or the toolbox failed somewhere between
// taking the call and answering it: it may have taken effect); others as
// HttpFailure.
absl::Status EffectHttpFailure(const net::Response& r, std::string_view what, std::string_view sandbox_id);

// `st` with every occurrence of `key` replaced by <DAYTONA_API_KEY>.
absl::Status Scrub(const absl::Status& st, std::string_view key);

}  // namespace tether::daytona
