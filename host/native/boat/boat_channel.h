// The boat provider's Channel (internal to host/native/boat/): a one-shot
// command whose stdout arrives once its POST .../commands has returned,
// then EOF; no stdin. And what the transport and its commands share: the
// two calls with their retries (BoatApi). Facts and assumptions:
// tether/providers/boat.h.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "host/native/boat/boat_api.h"
#include "host/net/http.h"
#include "host/support/sleep.h"
#include "tether/transport.h"

namespace tether::boat {

inline constexpr int kCallAttempts = 5;                        // a call answered 429 (a PUT also 502/503/504)
inline constexpr std::chrono::milliseconds kCallBackoff{100};  // doubled per attempt (a 429 without Retry-After)
inline constexpr std::size_t kDiagnosticsBytes = 4096;         // the stderr tail kept for messages

// The two calls, shared by the transport and every command in flight (a
// command's POST outlives a channel closed early: Boat cannot stop it).
struct BoatApi {
  std::shared_ptr<net::Client> commands;  // request_timeout: timeoutSeconds + 30 s of slack
  std::shared_ptr<net::Client> files;     // request_timeout: 300 s (an upload)
  std::string sandbox_id, api_key;
  int timeout_seconds = 120;

  net::Headers Headers() const {
    net::Headers h;
    h.emplace_back("Authorization", absl::StrCat("Bearer ", api_key));
    h.emplace_back("Content-Type", "application/json");
    h.emplace_back("Accept", "application/json");
    return h;
  }

  // POST /sandboxes/{id}/commands; `command` is a shell command line, sent
  // as a call of its own (WithCallId). Sent again only after a 429
  // (the service refused it before running it), after its Retry-After; a
  // 5xx is OUTCOME_UNKNOWN (CommandHttpFailure): a caller whose
  // command is safe to run twice may run it again, as a new call.
  boost::asio::awaitable<absl::StatusOr<CommandResult>> Run(std::string command);

  // PUT /sandboxes/{id}/files: safe to repeat (the caller names a temporary file).
  boost::asio::awaitable<absl::Status> Put(std::string path, std::string_view bytes);
};

using internal::Sleep;  // (host/support/sleep.h)

// Runs `command` (a shell command line) through api->Run in the background;
// its channel. The POST outlives a channel closed early: Boat cannot stop it.
std::unique_ptr<Channel> StartCommand(const boost::asio::any_io_executor& ex, std::shared_ptr<BoatApi> api,
                                      std::string command);

}  // namespace tether::boat
