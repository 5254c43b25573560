// The `daytona` provider: a Daytona sandbox through the toolbox's process
// API v2 where the sandbox's daemon serves it (the transport asks once per
// Transport: GET /processes, then GET /process/v2/processes; 404 from both
// is an older daemon), else through its session processes (v1).
//
// v2 (host/native/daytona/daytona_v2.h): each Exec is one `kind: exec`
// process (POST /processes {argv, stdin: "pipe", name: tether-<random>});
// its stdin is POST .../stdin {data} with EOF as {eof: true}; its stdout
// the follow log (GET .../logs?encoding=base64&follow=true: server-sent
// events of base64 frames, each with a cursor), exact, resumed after a cut
// from the last cursor (no replay); its exit the stream's state event or
// GET .../{id}. A closed channel's process is killed (POST .../signals
// KILL) and purged (DELETE). Input is still a JSON string, so the text
// tunnel runs over v2 too, but without v1's replays, NUL loss and one
// input POST per output frame (writes batched, at most ~3 requests a
// second while they keep coming).
//
// v1: each Exec is one session (POST /process/session) running the
// command with runAsync; its stdin is POST .../command/{cid}/input (a JSON
// string), its stdout the follow-logs WebSocket, its exit GET
// .../command/{cid}. Text only both ways, no stdin EOF: the host runs the
// text tunnel (armored lines, host/tunnel/choose.h) over it.
//
//   DaytonaOptions o;
//   o.sandbox_id = "my-sandbox";      // the key comes from DAYTONA_API_KEY
//   absl::StatusOr<std::shared_ptr<Transport>> t = MakeDaytonaTransport(ex, o);
//   if (!t.ok()) return t.status();
//   auto p = co_await Process::Start(*t, {.argv = {"/bin/cat"}});
//
// Why the duplex-text tunnel and not the exchange one (one synchronous exec
// per poll): the toolbox streams a command's output while it runs (the log
// WebSocket) and takes its input while it runs, so one bridge command
// carries the whole attachment: output arrives as the child writes it, in
// WebSocket messages of up to 64 KiB of log, with no request per round
// trip, and the host's input costs one POST per batch of frames (writes
// queued while one is under way go together). An exchange poll would be at
// least three toolbox calls (a session, a synchronous exec that returns the
// output, its deletion) per round trip, each answer capped by the poll.
// Measured through tests/emulators/daytona.mjs (tests/bench/daytona_vs_sdk.sh,
// 2026-12-02, 2 loaded cores, one run): 64 MiB of random output at 18.5 MB/s
// in 425 requests (1.26 bytes on the channel per byte), 64 MiB of text at
// 22 MB/s in 557 requests (0.01 bytes per byte: zstd); the cost is on
// trickling output, where every frame is acknowledged by one input POST
// (31 requests/s for a line every 20 ms, 13 bytes per byte of 8-byte lines).
//
// FACTS (PROVIDERS.md, EMULATORS.md, checked against @daytonaio/sdk 0.218.0):
//   - Auth: Authorization: Bearer $DAYTONA_API_KEY (or $DAYTONA_JWT_TOKEN
//     with X-Daytona-Organization-ID: $DAYTONA_ORGANIZATION_ID); the API URL
//     is $DAYTONA_API_URL, else $DAYTONA_SERVER_URL, else
//     https://app.daytona.io/api (the SDK's order and default).
//   - GET {api}/sandbox/{id} -> {id, state, toolboxProxyUrl?}; without
//     toolboxProxyUrl, GET {api}/sandbox/{id}/toolbox-proxy-url -> {url}.
//     The toolbox base is toolboxProxyUrl + "/" + id.
//   - POST /process/session {sessionId}; POST /process/session/{sid}/exec
//     {command, runAsync: true, suppressInputEcho} -> {cmdId};
//     POST .../command/{cid}/input {data} (a newline appended when missing;
//     echoed into the log unless suppressed); GET .../command/{cid} ->
//     {exitCode?}; DELETE /process/session/{sid} kills its processes.
//   - GET .../command/{cid}/logs?follow=true is a WebSocket that replays the
//     log from byte 0 on every connect and closes (1000) after the end;
//     lines are prefixed 01 01 01 (stdout) or 02 02 02 (stderr), NUL is
//     dropped, a newline added; marker-like bytes in output switch streams.
//   - An async command never sees stdin EOF.
//   - POST /files/bulk-upload: multipart files[0].path, files[0].file.
// v2 FACTS (DAYTONA_V2.md: the daemon's OpenAPI of PR191 and docs v2; no
// released SDK speaks it, so no SDK has checked the emulator's v2 side):
//   - POST {P} CreateProcessRequest {argv | shellCommand, stdin none|pipe
//     (docs: closed|open), kind exec|pty|code, name, keepLogs, ...} -> 201
//     Process {id, state running|terminal, exitCode, signal, reason, ...};
//     GET {P}?name= lists; GET/DELETE {P}/{id}; POST {P}/{id}/stdin {data?,
//     eof?} -> 204 (data a JSON string: not exact bytes); POST
//     {P}/{id}/signals {signal}; GET {P}/{id}/wait.
//   - GET {P}/{id}/logs?cursor&encoding=base64&follow=true: SSE events
//     log {channel, cursor, seq, data, encoding}, state {Process}, warning,
//     eof {cursor}; a cursor resumes strictly after its frame; an evicted
//     one is 409 {code: CURSOR_EXPIRED}.
//   - {P} is /processes (the OpenAPI) or /process/v2/processes (a later
//     client): both are probed.
// v2 ASSUMPTIONS: a 5xx on POST {P} may come after the process was made
//   (looked up by our name, sent again only when absent); on a data stdin
//   it is not sent again (the channel is given up, as v1's input); "pipe"
//   is accepted for stdin (the OpenAPI's word; the docs say "open").
//
// ASSUMPTIONS (ours, not checked against the real service):
//   - One session per Exec, deleted on Close (a session's shell may run its
//     commands one after another, so a long bridge must not share one).
//   - A reconnect of the log stream sees the same bytes again (append-only
//     log), so the bytes already read are skipped by count; a stream cut
//     after more than kMaxReplayBytes, or cut too often, fails the channel
//     instead (the tunnel reattaches through a new bridge, losing nothing).
//   - A 429 means the call was refused before it ran: sent again after its
//     Retry-After (at most 30 s; else the backoff), up to 5 times. A 5xx
//     may come after the call took effect (a gateway that timed out on it,
//     an answer lost): calls that are safe to repeat (GETs, DELETE, the
//     upload to a temporary name) are sent again on 502/503/504; those
//     that are not are never resent blindly: the session (our own random
//     id) is sent again and a 409 then means the lost attempt made it; an
//     exec is looked for in its session's command list (the SDK's
//     getSession: the session is ours, so a command in it is the one we
//     sent) and sent again only when the list is empty, else
//     OUTCOME_UNKNOWN with the session deleted; an input, which has no
//     offset or request id, is not sent again: the channel is given up
//     (UNAVAILABLE) and the tunnel reattaches through a new bridge,
//     resending by its own offsets what the supervisor did not get.
//     Assumed: the toolbox lists a command before it answers its exec (a
//     gateway's 504 while the toolbox still works on it would escape the
//     check). Other errors are as net::HttpError maps them: 401/403 a
//     refused key, 404 not found, 409 an existing session.
//   - Input may still be echoed (a daemon that ignores suppressInputEcho):
//     the armor's direction markers keep echoed lines from being read as
//     the supervisor's frames.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tether/transport.h"

namespace tether {

struct DaytonaOptions {
  std::string sandbox_id;  // required: the sandbox id or name ([A-Za-z0-9._-], at most 128)
  std::string api_url;     // empty: $DAYTONA_API_URL, else $DAYTONA_SERVER_URL, else the public API
  std::string ca_file;     // a PEM CA trusted besides the system's (API and toolbox)
  // Empty: $DAYTONA_API_KEY, else $DAYTONA_JWT_TOKEN. Never from argv; never in a message.
  std::string api_key;
  // Sent as X-Daytona-Organization-ID with a JWT; empty: $DAYTONA_ORGANIZATION_ID.
  std::string organization_id;
  // Which process API: "auto" (v2 where the daemon serves it, else v1),
  // "v1" (the session API) or "v2" (refused where the daemon lacks it).
  std::string process_api = "auto";
  // Called as an upload proceeds (bytes sent, total).
  std::function<void(std::size_t, std::size_t)> upload_progress;
};

// Checks the options (a sandbox id, a URL that parses, a key) and makes the
// transport; nothing is contacted until its first call.
absl::StatusOr<std::shared_ptr<Transport>> MakeDaytonaTransport(boost::asio::any_io_executor ex,
                                                                DaytonaOptions options);

}  // namespace tether
