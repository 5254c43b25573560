// Runloop's devbox execution API as data, sans-I/O: the JSON bodies tether
// sends, the parser of an execution view, the SSE decoder of the output
// streams and the parser of one output chunk, argv as one shell command
// line, the multipart body of upload_file, and HTTP failures as Status
// codes. runloop_transport.cc only moves these bytes; the unit tests
// (tests/host/native/runloop_test.cc) and the fuzzer (fuzz/runloop_response_fuzzer.cc)
// call them directly. Facts vs our assumptions: tether/providers/runloop.h.
//
//   runloop::SseDecoder sse;
//   std::vector<runloop::SseEvent> events;
//   if (absl::Status st = sse.Feed(bytes, events); !st.ok()) return st;
//   for (auto& e : events) auto chunk = runloop::ParseOutputChunk(e.data);
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "host/codec/sse.h"
#include "host/net/http.h"

namespace tether::runloop {

// An execution view (stdout and stderr as JSON strings; tether's one-shot
// commands print at most an exchange reply, 2 MiB, and a JSON escape takes
// at most 6 bytes per byte).
inline constexpr std::size_t kMaxViewBytes = 16u << 20;
// One SSE line or event's data (host/codec/sse.h).
inline constexpr std::size_t kMaxSseEventBytes = codec::kMaxSseEventBytes;
// One send_std_in text (the text tunnel writes armored lines, at most a
// few hundred KiB at a time).
inline constexpr std::size_t kMaxStdinTextBytes = 4u << 20;
// One upload_file (the supervisor is a few MB).
inline constexpr std::size_t kMaxFileBytes = 64u << 20;
// execute's optimistic_timeout cap (SDK docs: "up to 25 seconds").
inline constexpr int kMaxOptimisticSeconds = 25;

// What the service says about one execution.
struct ExecutionView {
  std::string execution_id;
  std::string status;                // "queued", "running", "completed"
  std::optional<int> exit_status;    // set once completed (0..255)
  std::string stdout_text;           // set once completed: the last lines, decoded (lossy)
  std::string stderr_text;
  bool stdout_truncated = false;
  bool completed() const { return status == "completed"; }
};

// argv quoted into one shell command line (`exec 'a' 'b'`); kInvalidArgument
// for an empty argv, a NUL byte, or bytes that are not UTF-8 (JSON text).
absl::StatusOr<std::string> CommandLine(const std::vector<std::string>& argv);

// {"command": ..., "attach_stdin": bool} for POST .../execute_async.
absl::StatusOr<std::string> ExecuteAsyncJson(std::string_view command, bool attach_stdin);
// {"command", "command_id", "optimistic_timeout"} for POST .../execute
// (idempotent per command_id); the timeout within 0..kMaxOptimisticSeconds.
absl::StatusOr<std::string> ExecuteJson(std::string_view command, std::string_view command_id,
                                        int optimistic_timeout_seconds);
// {"text": ...}: `text` must be valid UTF-8 (a JSON string) and at most
// kMaxStdinTextBytes.
absl::StatusOr<std::string> SendStdinJson(std::string_view text);
// {"text": null, "signal": "EOF"} (the SDK's own {signal} alone is taken for
// request options: EMULATORS.md).
std::string SendEofJson();
// {"statuses": ["completed"]} for wait_for_status.
std::string WaitCompletedJson();
// {"kill_process_group": true}.
std::string KillJson();

// A fresh command_id (UUID version 7 text, as the SDK makes them).
std::string NewCommandId();

// Parses a 2xx execution view: kResourceExhausted above kMaxViewBytes
// (before parsing); kDataLoss (ErrorCode kProtocol) for anything that is not
// an object with a string execution_id and status, an exit_status that is
// null or 0..255 (a completed view must have one), and string-or-null
// stdout/stderr.
absl::StatusOr<ExecutionView> ParseExecutionView(std::string_view body);

// The output streams' SSE decoder (host/codec/sse.h).
using SseEvent = codec::SseEvent;
using SseDecoder = codec::SseDecoder;

// One output chunk: {"output": string, "offset": the byte offset after it}.
struct OutputChunk {
  std::string output;
  std::optional<std::uint64_t> offset;
};
// kDataLoss (kProtocol) unless `data` is such an object (offset optional).
absl::StatusOr<OutputChunk> ParseOutputChunk(std::string_view data);
// The "code" of an `event: error` payload ({"code": 408, ...}); 0 when it
// has none that is an integer.
int ErrorEventCode(std::string_view data);

// A multipart/form-data body with the fields `path` and `file` (filename
// "file"), as upload_file takes; `boundary` must not occur in either.
std::string MultipartBody(std::string_view boundary, std::string_view path, std::string_view bytes);

// A non-2xx answer as a Status: 401 kUnauthenticated and 403
// kPermissionDenied ("the API key (RUNLOOP_API_KEY) was refused"), 404
// kNotFound ("devbox 'ID' or its execution not found"), 408/429/5xx
// kUnavailable (a caller may retry), other 4xx as net::HttpError; `what`
// names the call.
absl::Status HttpFailure(const net::Response& r, std::string_view what, std::string_view devbox_id);

// The failure of a call that is not safe to repeat (execute_async, stdin
// text): any 5xx is OUTCOME_UNKNOWN (a gateway or the service failed
// somewhere between taking the call and answering it: it may have taken
// effect, and Runloop has no idempotency key for these calls nor a list of
// a devbox's executions to ask, so it is not sent again); others as
// HttpFailure.
absl::Status EffectHttpFailure(const net::Response& r, std::string_view what, std::string_view devbox_id);

// `command` behind a first line "# tether-call CALL_ID" (a shell comment:
// nothing runs). execute_async has no request id; this one makes every
// start tether sends its own call, so a resend of the same call (after a
// 429) is told apart from a new call with the same command line, in the
// service's records and by the emulator's duplicate check.
std::string WithCallId(std::string_view command, std::string_view call_id);
// 8 random bytes in hex, for WithCallId.
std::string NewCallId();

// `st` with every occurrence of `key` replaced by <RUNLOOP_API_KEY>.
absl::Status Scrub(const absl::Status& st, std::string_view key);

}  // namespace tether::runloop
