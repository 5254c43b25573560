// envd's process API as a Channel (internal to the e2b provider): a Start
// stream read as Connect envelopes of ProcessEvent JSON, stdin as ordered
// SendInput calls, CloseStdin, and SendSignal SIGKILL to a closed channel's
// process. The pure parts (events, versions, error mapping) are in
// envd_events.h, so tests can call them without a server.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "host/native/e2b/envd_events.h"
#include "host/net/http.h"
#include "tether/transport.h"

namespace tether::e2b {

inline constexpr char kEnvdPort[] = "49983";
inline constexpr std::size_t kInputPiece = 64 * 1024;  // raw stdin bytes per SendInput
inline constexpr std::size_t kDiagnosticsBytes = 4096;  // stderr tail kept

// What the transport learned from the control plane, shared by its channels.
struct EnvdSession {
  std::shared_ptr<net::Client> client;  // envd's origin: streams and unary calls
  std::shared_ptr<net::Client> files;   // the same origin for /files (a longer request timeout)
  std::string sandbox_id;
  std::string access_token;  // may be empty (no header then)
  EnvdVersion version;
  // The headers of every envd call, with this Content-Type.
  net::Headers HeadersFor(std::string_view content_type) const;
};

// Starts argv with stdin piped (POST /process.Process/Start, no timeout) and
// returns once envd's start event arrived (any other first event is a
// kProtocol error). HTTP 502/503/504 are retried a few times.
boost::asio::awaitable<absl::StatusOr<std::unique_ptr<Channel>>> StartProcess(
    std::shared_ptr<const EnvdSession> session, std::vector<std::string> argv);

// The Channel over a Start stream whose head was 200 (tests pass a scripted
// stream and client): returns once the start event arrived.
boost::asio::awaitable<absl::StatusOr<std::unique_ptr<Channel>>> OpenEnvdChannel(
    std::shared_ptr<const EnvdSession> session, std::unique_ptr<net::BodyStream> stream);

}  // namespace tether::e2b
