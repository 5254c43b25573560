// The `boat` provider: Boat sandboxes through Boat's REST API, one-shot
// commands only. Every Exec is one POST .../commands whose answer carries
// the command's whole stdout, stderr and exit code; so the host runs the
// exchange tunnel (host/tunnel/choose.h): the supervisor's relay is polled
// by short one-shot commands and supplies signals, stdin and EOF in-band.
//
//   BoatOptions o;
//   o.sandbox_id = "sb-123";                 // api_key comes from BOAT_API_KEY
//   absl::StatusOr<std::shared_ptr<Transport>> t = MakeBoatTransport(ex, o);
//   if (!t.ok()) return t.status();
//   auto p = co_await Process::Start(*t, {.argv = {"/bin/cat"}});
//
// FACTS (from /work/shared/PROVIDERS.md; nothing else about Boat is known,
// no official SDK was reachable):
//   - POST /sandboxes/{id}/commands with JSON {command, timeoutSeconds}
//     returns {exitCode, stdout, stderr, timedOut}.
//   - Sync commands are capped at 600 s and cannot be killed.
//   - Files: PUT /sandboxes/{id}/files with base64 content.
//   - Text only: stdout and stderr are strings; no stdin, no streaming.
// ASSUMPTIONS (ours, to be checked against the real service):
//   - Auth: `Authorization: Bearer <key>`, the key from $BOAT_API_KEY.
//   - Base URL: --endpoint, else $BOAT_API_URL; required (no public
//     default is known). Its path, if any, prefixes /sandboxes/...
//   - `command` runs under a POSIX `sh -c` (we send `exec 'argv0' 'argv1'...`)
//     with stdin empty; stdout/stderr are decoded as UTF-8, invalid bytes
//     replaced (so Exec is text only: exact_bytes=false).
//   - The files body is {"path": ..., "content": <base64>}, no mode field: we
//     upload to a temporary name beside the path and one command checks its
//     sha256, chmods and renames it. The mode the server gives a new file is
//     unknown; tether's files live under its 0700 private root.
//   - Errors: 401/403 refused key, 404 no such sandbox, 408/429
//     transient; a JSON body's "message" is shown. A 429 means the command
//     was refused before it ran: sent again after its Retry-After (at most
//     30 s; else the backoff), up to 5 times. A 5xx may come after the
//     command ran (a gateway that timed out on it, an answer lost), and
//     PROVIDERS.md documents no request id to dedup on or to ask about, so
//     a POST .../commands answered 5xx is never sent again: the call is
//     OUTCOME_UNKNOWN, and only a caller whose command is safe to run twice
//     runs it again (setup scripts here; the exchange tunnel's polls, which
//     carry their offsets). Each call's command starts with a comment line
//     naming the call ("# tether-call ID"), so a resend is told apart from
//     a new call. PUT files (to a temporary name) is safe to repeat and is
//     sent again on 429/502/503/504. A failed connection or a lost answer
//     is not retried here.
//   - A timed-out command (timedOut true) may have its exitCode null.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tether/transport.h"

namespace tether {

struct BoatOptions {
  std::string sandbox_id;  // required: letters, digits, '-', '_' (at most 128)
  std::string api_url;     // empty: $BOAT_API_URL (one of them is required)
  std::string ca_file;     // a PEM CA trusted besides the system's
  // Empty: $BOAT_API_KEY. Never from argv; never in a message.
  std::string api_key;
  // timeoutSeconds of every command tether runs (1..600): polls and setup
  // scripts take milliseconds; a hung one is given up after this.
  int command_timeout_seconds = 120;
  // Called as an upload proceeds (bytes sent, total).
  std::function<void(std::size_t, std::size_t)> upload_progress;
};

// Checks the options (a sandbox id, a URL that parses, an API key, the
// timeout) and makes the transport; nothing is contacted until its first call.
absl::StatusOr<std::shared_ptr<Transport>> MakeBoatTransport(boost::asio::any_io_executor ex, BoatOptions options);

}  // namespace tether
