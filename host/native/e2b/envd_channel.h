// envd's process API as a Channel (internal to the e2b provider): a Start
// stream read as Connect envelopes of ProcessEvent JSON, stdin as ordered
// SendInput calls, CloseStdin, and SendSignal SIGKILL to a closed channel's
// process. The pure parts (events, versions, error mapping) are functions
// here so tests can call them without a server.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "host/net/http.h"
#include "tether/transport.h"

namespace tether::e2b {

inline constexpr char kEnvdPort[] = "49983";
inline constexpr std::size_t kInputPiece = 64 * 1024;  // raw stdin bytes per SendInput
inline constexpr std::size_t kDiagnosticsBytes = 4096;  // stderr tail kept

struct EnvdVersion {
  int major = 0, minor = 0, patch = 0;
  bool AtLeast(int a, int b, int c) const {
    return major != a ? major > a : minor != b ? minor > b : patch >= c;
  }
};
// "0.5.7", "v0.5.7", "0.5.7-beta"; kInvalidArgument otherwise.
absl::StatusOr<EnvdVersion> ParseEnvdVersion(std::string_view text);

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
