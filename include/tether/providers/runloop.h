// The `runloop` provider: a Runloop devbox through Runloop's REST API. An
// Exec is one execution: POST .../execute_async with attach_stdin, host
// bytes through send_std_in (JSON strings), the command's stdout from the
// SSE stream stream_stdout_updates (resumed from the byte offset after the
// last chunk when it ends with a 408 or is cut), its exit status from the
// wait_for_status long poll, `kill` when abandoned. Text both ways, so the
// host runs the text tunnel (armored lines, host/tunnel/choose.h) over it.
// Where sending stdin kills the execution (the SDK warns of that), the
// transport finds out in Prepare() and declares one-shot channels instead:
// every Exec is then a synchronous POST .../execute (idempotent by its
// command_id) and the exchange tunnel polls the supervisor's relay.
//
//   RunloopOptions o;
//   o.devbox_id = "dbx_123";          // api_key from RUNLOOP_API_KEY
//   absl::StatusOr<std::shared_ptr<Transport>> t = MakeRunloopTransport(ex, o);
//   if (!t.ok()) return t.status();
//   auto p = co_await Process::Start(**t, {.argv = {"/bin/cat"}});
//
// FACTS (PROVIDERS.md, EMULATORS.md, @runloop/api-client 1.32.0's sources):
//   - Base URL $RUNLOOP_BASE_URL, default https://api.runloop.ai; the key
//     $RUNLOOP_API_KEY as `Authorization: Bearer`.
//   - execute_async {command, attach_stdin} -> {execution_id, status, ...};
//     send_std_in {text} / {text: null, signal: "EOF"}; kill
//     {kill_process_group}; execute {command, command_id, optimistic_timeout
//     <= 25} ?last_n answers once completed or with status "running";
//     wait_for_status {statuses} holds up to ~25 s, then 408; upload_file is
//     multipart with the fields path and file.
//   - stream_stdout_updates?offset=N is SSE of {output, offset}; it ends
//     (the response closes) when the output is complete; `event: error`
//     with code 408 means "reconnect from your offset".
//   - stdin text and output are JSON strings: not exact bytes.
//   - execute_async and send_std_in carry no request id, offset or
//     idempotency key, and the API has no list of a devbox's executions
//     (only GET .../executions/{eid}, by an id the lost answer held):
//     what such a call did when its answer was lost cannot be asked.
// WHAT IS SENT AGAIN (every emulator fault of issue 29: a 5xx may come
// after the call took effect; a 429 comes before it, with Retry-After):
//   - A 429 is the same call sent again after its Retry-After
//     (net::RetryDelay; more than 30 s is UNAVAILABLE at once), else the
//     backoff, up to 6 tries.
//   - Safe to repeat, so also sent again after a 5xx or a failed
//     connection: execute (the same command_id), wait_for_status, kill,
//     the EOF signal (stdin closes once; "not running" means it is
//     closed), GET stream_stdout_updates (from its offset), upload_file
//     (to a temporary name).
//   - Never sent again: execute_async (a 5xx is OUTCOME_UNKNOWN, a failed
//     connection UNAVAILABLE; each start carries a "# tether-call ID"
//     comment line, so a caller that starts the command again, as a
//     reattach does, sends a new call), and stdin text (a 5xx or a failed
//     connection gives the channel up, UNAVAILABLE: the tunnel reattaches
//     through a new execution and resends by its own offsets; the old
//     execution is killed). Prepare()'s probe whose input lost its answer
//     is killed, and its view says whether it read the line; else a new
//     probe runs (at most 3). A start whose answer was lost may leave an
//     execution nobody knows the id of, waiting on its stdin.
// ASSUMPTIONS (ours, to be checked against the real service):
//   - `offset` is the byte offset after its chunk (what the SDK's resume
//     implies); the text tunnel survives a replay or a gap anyway.
//   - `command` runs under a POSIX shell (we send `exec 'argv0' ...`,
//     behind a comment line).
//   - A send_std_in answered with a completed view means stdin killed the
//     execution (how Prepare() detects it: one small probe execution).
//   - A relative upload_file path is under the home directory; ours are
//     absolute. The mode of an uploaded file is unknown: tether uploads
//     beside the target and one command checks sha256, chmods and renames.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tether/transport.h"

namespace tether {

struct RunloopOptions {
  // How Execs run.
  enum class Mode {
    kAuto,      // streaming text; one-shot when Prepare() finds that stdin kills an execution
    kStream,    // always execute_async with stdin (the text tunnel)
    kExchange,  // always execute (the exchange tunnel)
  };
  std::string devbox_id;  // required: letters, digits, '-', '_' (at most 128)
  std::string api_url;    // empty: $RUNLOOP_BASE_URL, else https://api.runloop.ai
  std::string ca_file;    // a PEM CA trusted besides the system's
  // Empty: $RUNLOOP_API_KEY. Never from argv; never in a message.
  std::string api_key;
  Mode mode = Mode::kAuto;
  // Called as an upload proceeds (bytes sent, total).
  std::function<void(std::size_t, std::size_t)> upload_progress;
};

// Checks the options (a devbox id, a URL that parses, an API key) and makes
// the transport; nothing is contacted until its first call.
absl::StatusOr<std::shared_ptr<Transport>> MakeRunloopTransport(boost::asio::any_io_executor ex,
                                                                RunloopOptions options);

}  // namespace tether
