// Daytona's process API v2 as data, sans-I/O: the request bodies tether
// sends and the parsers of what the toolbox answers (a process record, a
// log event, an error's code). The wire facts (paths, fields, the cursor
// rules) come from the published OpenAPI of the daemon and its docs, as
// recorded in include/tether/providers/daytona.h; nothing here is I/O.
//
// How tether uses it (daytona_v2_channel.cc): the supervisor's bridge runs
// as one `kind: exec` process with stdin piped; frames go to it as armored
// text lines through POST .../stdin (a JSON string must be valid UTF-8;
// armor is ASCII), and come back from GET .../logs?encoding=base64&follow=
// true (server-sent events), read exactly and resumed from the last cursor
// after a cut, with no replay from byte 0.
//
//   absl::StatusOr<v2::LogFrame> f = v2::ParseLogFrame(event.data);
//   if (f.ok() && f->stream == 1) out.append(f->bytes);
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tether::daytona::v2 {

// Where the API lives under the toolbox base; the versions seen differ
// (the OpenAPI's /processes, a later client's /process/v2/processes): the
// transport probes them in this order.
inline constexpr std::array<std::string_view, 2> kPrefixes = {"/processes", "/process/v2/processes"};

// One stdin request's data (armored frames, a few batched).
inline constexpr std::size_t kMaxStdinBytes = 1u << 20;
// A process record, a list of them, an error: small; larger is refused.
inline constexpr std::size_t kMaxRecordBytes = 1u << 20;
// One log event's data (a frame's bytes as base64 in JSON).
inline constexpr std::size_t kMaxLogEventBytes = 4u << 20;

// What tether reads of a process record.
struct ProcessView {
  std::string id;
  std::string name;
  bool terminal = false;              // state "terminal" (the process exited and its output ended)
  std::optional<int> exit_code;       // exitCode, when it exited with one
  std::string signal;                 // "KILL", ... when a signal ended it
};

// POST {prefix}: {"argv", "stdin": "pipe", "kind": "exec", "name",
// "keepLogs": "until_cleanup"}. kInvalidArgument for an empty argv or an
// argument that is not valid UTF-8 or holds a NUL (a JSON string).
absl::StatusOr<std::string> CreateProcessJson(const std::vector<std::string>& argv, std::string_view name);

// A process record (POST's 201, GET {prefix}/{id}, a `state` event).
// kProtocol for anything that is not an object with a usable id (at most
// 256 bytes of [A-Za-z0-9._-], not dots only: it goes into paths).
absl::StatusOr<ProcessView> ParseProcess(std::string_view body);
// GET {prefix}?name=: a JSON array of process records.
absl::StatusOr<std::vector<ProcessView>> ParseProcessList(std::string_view body);

// The exit status a terminal record gives: its code, or 128 + the number
// of its signal; nullopt when it gives neither (or names no signal we know).
std::optional<int> ExitStatusOf(const ProcessView& p);

// A `log` event's frame: the stream (1 stdout, 2 stderr, 0 another channel,
// such as "system" or "setup", which carries none of the command's bytes),
// its cursor (opaque, non-empty, at most 256 bytes of printable ASCII: it
// goes back in a query) and its exact bytes (base64 decoded; "text"
// encoding is refused: it is lossy).
struct LogFrame {
  int stream = 0;
  std::string cursor;
  std::string bytes;
};
absl::StatusOr<LogFrame> ParseLogFrame(std::string_view data);

// An `eof` event's data: {"cursor"}; the cursor ("" when absent).
absl::StatusOr<std::string> ParseEofCursor(std::string_view data);

// The "code" of an error body ({"code": "CURSOR_EXPIRED", ...}); "" when
// the body is not such an object.
std::string ErrorCodeOf(std::string_view body);

// POST .../stdin: {"data": text} (valid UTF-8, at most kMaxStdinBytes), or
// {"eof": true} for an empty text with `eof`.
absl::StatusOr<std::string> StdinJson(std::string_view text, bool eof);

// POST .../signals: {"signal": name} ("KILL", "TERM", ...).
std::string SignalJson(std::string_view name);

// A cursor as a query value (percent-encoded).
std::string CursorQuery(std::string_view cursor);

}  // namespace tether::daytona::v2
