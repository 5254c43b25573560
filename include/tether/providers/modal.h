// The `modal` provider: Modal sandboxes through the task command router's
// exec API over gRPC (Debian's gRPC C++, callback API; completions posted
// to the Asio executor). stdin and stdout are exact bytes addressed by
// offset, so the binary tunnel runs over it; the router has no kill, signal
// or resize, which tether's supervisor supplies in-band. Probe and PutFile
// are shell scripts over Exec (exact bytes on stdin, sha256-checked).
//
//   ModalOptions o;
//   o.sandbox_id = "sb-AbCdEfGhIjKlMnOpQrStUv";  // token from MODAL_TOKEN_ID/SECRET or ~/.modal.toml
//   absl::StatusOr<std::shared_ptr<Transport>> t = MakeModalTransport(ex, o);
//   if (!t.ok()) return t.status();
//   auto p = co_await Process::Start(*t, {.argv = {"/bin/cat"}});
//
// FACTS (/work/shared/EMULATORS.md section 5, read from modal@0.11.1 and
// proven against tests/emulators/modal.mjs by that SDK):
//   - Control plane modal.client.ModalClient: AuthTokenGet with metadata
//     x-modal-token-id / x-modal-token-secret returns a JWT with exp, sent
//     as x-modal-auth-token afterwards. Every control-plane call of the SDK
//     carries x-modal-client-type: 8 and x-modal-client-version: 1.0.0 (we
//     send both; tests/emulators/modal.mjs requires them), plus
//     x-modal-libmodal-version: modal-js/<release>, x-modal-host and the
//     token id/secret again (we send none of these three). Ids "sb-" + 22
//     base62 use SandboxGetTaskId + TaskGetCommandRouterAccess{task_id}; other ids
//     SandboxGetTaskIdV2 + SandboxGetCommandRouterAccess{sandbox_id}; both
//     answer {jwt, url}, the URL https.
//   - Router modal.task_command_router.TaskCommandRouter with
//     `authorization: Bearer <jwt>`: TaskExecStart (client exec id,
//     idempotent), TaskExecStdinWrite {offset, data, eof} (idempotent per
//     offset), TaskExecStdioRead {offset, fd} server stream (EOF = end),
//     TaskExecWait / TaskExecPoll {code | signal}.
//   - The SDK retries DEADLINE_EXCEEDED, UNAVAILABLE, CANCELLED, INTERNAL and
//     UNKNOWN (10 ms doubling, 10 times) and refreshes the router JWT on
//     UNAUTHENTICATED; credentials from MODAL_TOKEN_ID / MODAL_TOKEN_SECRET,
//     else the active (or $MODAL_PROFILE) profile of ~/.modal.toml
//     ($MODAL_CONFIG_PATH); the server from MODAL_SERVER_URL, else the
//     profile's server_url, else https://api.modal.com:443.
// ASSUMPTIONS (ours, to be checked against the real service):
//   - What the real service requires of that metadata is not documented:
//     we assume the SDK's client type and protocol version suffice, without
//     its release string, x-modal-host and the repeated token (the SDK sends
//     them; a server that needs them would refuse us, never misread us).
//   - The router is dialled with TLS unless the control plane URL is http://
//     (then plaintext, for local emulators); the SDK instead uses plaintext
//     for any loopback server name.
//   - A stdio stream ends (OK) only at the command's end of output; the exit
//     status is then available from TaskExecWait.
//   - Closing stdin (eof) ends a bridge that lost its host: there is no
//     other way to stop a command.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tether/transport.h"

namespace tether {

struct ModalOptions {
  std::string sandbox_id;  // required: letters, digits, '-', '_' (at most 128)
  // The control plane; empty: $MODAL_SERVER_URL, the profile's server_url,
  // else https://api.modal.com:443.
  std::string server_url;
  std::string ca_file;  // a PEM CA trusted besides the system's (control plane and router)
  // Empty: $MODAL_TOKEN_ID / $MODAL_TOKEN_SECRET, else ~/.modal.toml.
  // Never from argv; never in a message.
  std::string token_id, token_secret;
  // Called as an upload proceeds (bytes sent, total).
  std::function<void(std::size_t, std::size_t)> upload_progress;
};

// Checks the options (a sandbox id, a URL that parses, credentials, a CA
// file that reads) and makes the transport; nothing is contacted until its
// first call.
absl::StatusOr<std::shared_ptr<Transport>> MakeModalTransport(boost::asio::any_io_executor ex, ModalOptions options);

}  // namespace tether
