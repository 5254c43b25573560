// The daytona provider's Channel (internal to host/native/daytona/): one
// session command's stdin (complete lines batched into POST .../input), its
// stdout (the follow-logs WebSocket, reopened after a cut and its replay
// skipped by count) and its exit (GET .../command/{cid}); and what the
// transport and its channels share: the two origins, the credentials and
// the calls with their retries (DaytonaApi). Facts and assumptions:
// tether/providers/daytona.h.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "host/native/daytona/daytona_api.h"
#include "host/net/http.h"
#include "tether/transport.h"

namespace tether::daytona {

inline constexpr int kCallAttempts = 5;                        // a call answered 429 (a safe one also 502/503/504)
inline constexpr std::chrono::milliseconds kCallBackoff{100};  // doubled per attempt (a 429 without Retry-After)

// The two origins and the credentials, shared by the transport and every
// channel (a channel's session is deleted after the channel is gone).
struct DaytonaApi {
  std::shared_ptr<net::Client> api;      // the control plane
  std::shared_ptr<net::Client> toolbox;  // set once the sandbox was looked up
  std::shared_ptr<net::Client> upload;   // the toolbox, with kUploadTimeout
  std::string sandbox_id, key, org_id, ca_file;

  net::Headers Headers(std::string_view content_type = "application/json") const {
    net::Headers h;
    h.emplace_back("Authorization", absl::StrCat("Bearer ", key));
    if (!org_id.empty()) h.emplace_back("X-Daytona-Organization-ID", org_id);
    h.emplace_back("X-Daytona-Source", "tether");
    if (!content_type.empty()) h.emplace_back("Content-Type", std::string(content_type));
    h.emplace_back("Accept", "application/json");
    return h;
  }

  absl::Status Clean(const absl::Status& st) const { return Scrub(st, key); }

  // One call that is safe to repeat, sent again on 429 (after its
  // Retry-After) and 502/503/504. A 2xx answer is returned; others are errors.
  boost::asio::awaitable<absl::StatusOr<net::Response>> Call(std::shared_ptr<net::Client> client, std::string method,
                                                      std::string target, std::string body,
                                                      std::string content_type = "application/json") {
    co_return co_await Send(std::move(client), std::move(method), std::move(target), std::move(body),
                            std::move(content_type), /*safe=*/true);
  }

  // One call that is not safe to repeat (an exec, an input): sent again only
  // after a 429 (refused before it took effect); a 5xx is OUTCOME_UNKNOWN
  // (EffectHttpFailure), never sent again here.
  boost::asio::awaitable<absl::StatusOr<net::Response>> CallOnce(std::shared_ptr<net::Client> client, std::string method,
                                                          std::string target, std::string body) {
    co_return co_await Send(std::move(client), std::move(method), std::move(target), std::move(body),
                            "application/json", /*safe=*/false);
  }

  // Call and CallOnce: sends a request, again as `safe` allows.
  boost::asio::awaitable<absl::StatusOr<net::Response>> Send(std::shared_ptr<net::Client> client, std::string method,
                                                             std::string target, std::string body,
                                                             std::string content_type, bool safe);

  std::string SessionPath(std::string_view sid) const {
    return absl::StrCat("/process/session/", net::UrlEncode(sid));
  }
  std::string CommandPath(std::string_view sid, std::string_view cid) const {
    return absl::StrCat(SessionPath(sid), "/command/", net::UrlEncode(cid));
  }
};

// Deletes a session (its processes die with it); nobody waits for it.
boost::asio::awaitable<void> DeleteSession(std::shared_ptr<DaytonaApi> api, std::string sid);

// The channel of command `cid` in session `sid`, reading its log stream
// `ws` (null: a stream that failed transiently, opened again by the first read).
std::unique_ptr<Channel> MakeDaytonaChannel(boost::asio::any_io_executor ex, std::shared_ptr<DaytonaApi> api,
                                            std::string sid, std::string cid, std::unique_ptr<net::WebSocket> ws);

}  // namespace tether::daytona
