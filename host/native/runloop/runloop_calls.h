// The Runloop provider's REST calls with their retries (internal to
// host/native/runloop/): shared by the transport and by every execution in
// flight, whose background reader or kill can outlive a channel closed early.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "host/native/runloop/runloop_api.h"
#include "host/net/http.h"
#include "host/net/retry_after.h"
#include "host/support/sleep.h"

namespace tether::runloop {

namespace asio = boost::asio;

inline constexpr int kCallAttempts = 6;                        // a call that failed transiently
inline constexpr std::chrono::milliseconds kCallBackoff{100};  // doubled per attempt, up to kMaxBackoff
inline constexpr std::chrono::milliseconds kMaxBackoff{2000};
inline constexpr std::chrono::milliseconds kCallTimeout{60000};     // a call; long polls hold ~25 s
inline constexpr std::chrono::milliseconds kUploadTimeout{300000};  // one upload_file
inline constexpr int kMaxLongPolls = 400;          // wait_for_status rounds (408 each ~25 s): ~2.8 h
inline constexpr std::size_t kDiagnosticsBytes = 4096;       // the stderr tail kept for messages
inline constexpr const char* kLastN = "100000";             // execute's last_n: every line of a reply

using internal::Sleep;

// The last kDiagnosticsBytes of `s` (a stderr tail for messages).
inline std::string Tail(std::string_view s) {
  return std::string(s.size() <= kDiagnosticsBytes ? s : s.substr(s.size() - kDiagnosticsBytes));
}

// The REST calls, shared by the transport and every execution in flight
// (a background reader or a kill outlives a channel closed early).
struct RunloopApi {
  std::shared_ptr<net::Client> calls;   // request_timeout kCallTimeout
  std::shared_ptr<net::Client> files;   // request_timeout kUploadTimeout
  std::string devbox_id, api_key;

  std::string Base() const { return absl::StrCat("/v1/devboxes/", net::UrlEncode(devbox_id)); }
  std::string ExecPath(std::string_view eid, std::string_view what) const {
    return absl::StrCat(Base(), "/executions/", net::UrlEncode(eid), what.empty() ? "" : "/", std::string(what));
  }
  net::Headers Headers(std::string_view content_type = "application/json") const {
    net::Headers h;
    h.emplace_back("Authorization", absl::StrCat("Bearer ", api_key));
    if (!content_type.empty()) h.emplace_back("Content-Type", std::string(content_type));
    h.emplace_back("Accept", "application/json");
    return h;
  }
  absl::Status Fail(const absl::Status& st) const { return runloop::Scrub(st, api_key); }

  // POST `target` with `body`. kOnce: a call that is not safe to repeat
  // (execute_async, stdin text) is sent again only after a 429 (refused
  // before it took effect); any other answer or failure is returned as is.
  // kAnyFailure: a call that is safe to repeat (idempotent) is also sent
  // again after a 5xx or a failed connection. A 429 waits its Retry-After
  // (net::RetryDelay; more than net::kMaxRetryAfter is UNAVAILABLE at
  // once), else the backoff. 408 is returned as is (a long poll's "not yet").
  enum class Repeat { kOnce, kAnyFailure };
  asio::awaitable<absl::StatusOr<net::Response>> Post(std::string target, std::string body, Repeat repeat) {
    std::chrono::milliseconds backoff = kCallBackoff;
    for (int attempt = 1;; ++attempt) {
      net::Request r;
      r.method = "POST";
      r.target = target;
      r.headers = Headers();
      r.body = body;
      absl::StatusOr<net::Response> resp = co_await calls->Call(std::move(r));
      std::optional<std::chrono::milliseconds> delay = backoff;
      if (!resp.ok()) {
        const bool again = repeat == Repeat::kAnyFailure && resp.status().code() == absl::StatusCode::kUnavailable;
        if (!again || attempt >= kCallAttempts) {
          co_return Fail(absl::Status(resp.status().code(), absl::StrCat("runloop: ", resp.status().message())));
        }
      } else {
        const int s = resp->status;
        const bool again = s == 429 || (repeat == Repeat::kAnyFailure && s >= 500 && s <= 599);
        if (!again || attempt >= kCallAttempts) co_return resp;
        if (s == 429) delay = net::RetryDelay(*resp, backoff);
        if (!delay) {
          co_return Fail(absl::UnavailableError(absl::StrCat(
              "runloop: POST ", target.substr(0, target.find('?')), " answered 429 with Retry-After ",
              std::string(resp->header("Retry-After")), ", above the ", net::kMaxRetryAfter.count(),
              " s tether waits")));
        }
      }
      co_await Sleep(*delay);
      backoff = std::min(backoff * 2, kMaxBackoff);
    }
  }

  // A 2xx view, or the failure as a Status (`what` names the call); with
  // `effect` (a call that is not safe to repeat) a 5xx is OUTCOME_UNKNOWN
  // (runloop::EffectHttpFailure).
  absl::StatusOr<runloop::ExecutionView> View(const absl::StatusOr<net::Response>& resp, std::string_view what,
                                              bool effect = false) const {
    if (!resp.ok()) return resp.status();
    if (!net::IsSuccess(*resp)) {
      return Fail(effect ? runloop::EffectHttpFailure(*resp, what, devbox_id)
                         : runloop::HttpFailure(*resp, what, devbox_id));
    }
    absl::StatusOr<runloop::ExecutionView> v = runloop::ParseExecutionView(resp->body);
    if (!v.ok()) return Fail(v.status());
    return v;
  }

  // wait_for_status until completed (a 408 means "poll again").
  asio::awaitable<absl::StatusOr<runloop::ExecutionView>> WaitCompleted(std::string eid) {
    const std::string target = absl::StrCat(ExecPath(eid, "wait_for_status"), "?last_n=", kLastN);
    for (int round = 0; round < kMaxLongPolls; ++round) {
      absl::StatusOr<net::Response> resp = co_await Post(target, runloop::WaitCompletedJson(), Repeat::kAnyFailure);
      if (resp.ok() && resp->status == 408) continue;
      absl::StatusOr<runloop::ExecutionView> v = View(resp, "POST .../wait_for_status");
      if (!v.ok()) co_return v.status();
      if (v->completed()) co_return v;
    }
    co_return absl::DeadlineExceededError(absl::StrCat("runloop: execution ", eid, " did not complete"));
  }

  // One wait_for_status round: the completed view, or nullopt on a 408.
  asio::awaitable<absl::StatusOr<std::optional<runloop::ExecutionView>>> PollCompleted(std::string eid) {
    const std::string target = absl::StrCat(ExecPath(eid, "wait_for_status"), "?last_n=", kLastN);
    absl::StatusOr<net::Response> resp = co_await Post(target, runloop::WaitCompletedJson(), Repeat::kAnyFailure);
    if (resp.ok() && resp->status == 408) co_return std::nullopt;
    absl::StatusOr<runloop::ExecutionView> v = View(resp, "POST .../wait_for_status");
    if (!v.ok()) co_return v.status();
    if (!v->completed()) co_return std::nullopt;
    co_return std::optional<runloop::ExecutionView>(*std::move(v));
  }

  // execute_async `command` with stdin attached, as a call of its own
  // (runloop::WithCallId), sent once (Repeat::kOnce): a 5xx is
  // OUTCOME_UNKNOWN, a failed connection UNAVAILABLE; neither is sent
  // again, and a caller whose command is safe to start twice starts it
  // again as a new call.
  asio::awaitable<absl::StatusOr<runloop::ExecutionView>> StartAsync(std::string command) {
    absl::StatusOr<std::string> body =
        runloop::ExecuteAsyncJson(runloop::WithCallId(command, runloop::NewCallId()), true);
    if (!body.ok()) co_return body.status();
    absl::StatusOr<net::Response> resp = co_await Post(absl::StrCat(Base(), "/execute_async"), *body, Repeat::kOnce);
    co_return View(resp, "POST .../execute_async", /*effect=*/true);
  }

  // execute (synchronous, idempotent by command_id) until completed.
  asio::awaitable<absl::StatusOr<runloop::ExecutionView>> RunOnce(std::string command) {
    const std::string id = runloop::NewCommandId();
    absl::StatusOr<std::string> body = runloop::ExecuteJson(command, id, runloop::kMaxOptimisticSeconds);
    if (!body.ok()) co_return body.status();
    absl::StatusOr<net::Response> resp =
        co_await Post(absl::StrCat(Base(), "/execute?last_n=", kLastN), *body, Repeat::kAnyFailure);
    absl::StatusOr<runloop::ExecutionView> v = View(resp, "POST .../execute");
    if (!v.ok()) co_return v.status();
    if (!v->completed()) v = co_await WaitCompleted(v->execution_id);
    if (!v.ok()) co_return v.status();
    if (v->stdout_truncated) {
      co_return absl::DataLossError("runloop: the service truncated a command's stdout (stdout_truncated)");
    }
    co_return v;
  }

  asio::any_io_executor executor;  // where detached calls (kill, EOF) run
};

// Fire-and-forget POSTs that hold the API alive.
inline asio::awaitable<void> PostDetached(std::shared_ptr<RunloopApi> api, std::string target, std::string body) {
  (void)co_await api->Post(std::move(target), std::move(body), RunloopApi::Repeat::kAnyFailure);
}

// What the transport learned about stdin (Prepare, or a channel that saw it).
struct StdinVerdict {
  enum State { kUnknown, kWorks, kKills } state = kUnknown;
};

}  // namespace tether::runloop
