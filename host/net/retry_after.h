// A 429's Retry-After (RFC 9110 section 10.2.3) and how long a caller waits
// before sending a refused call again: one reading for every provider
// (boat, daytona, runloop), so each honours it the same way.
//
//   std::optional<std::chrono::milliseconds> d = net::RetryDelay(resp, backoff);
//   if (!d) return absl::UnavailableError("... asks for more than we wait");
//   co_await Sleep(*d);  // then send the same call again
#pragma once

#include <chrono>
#include <optional>

#include "host/net/http.h"

namespace tether::net {

// A Retry-After asking for longer than this is given up on (the caller
// fails UNAVAILABLE at once instead of holding its own caller).
inline constexpr std::chrono::seconds kMaxRetryAfter{30};

// The Retry-After of `r`: delta-seconds, or an HTTP-date relative to `now`
// (a date in the past is 0 s); nullopt when absent or unreadable.
std::optional<std::chrono::seconds> RetryAfter(const Response& r, std::chrono::system_clock::time_point now);

// How long to wait before sending again a call answered `r` (a 429): its
// Retry-After, else `fallback` (the caller's backoff); nullopt when it asks
// for more than `max`.
std::optional<std::chrono::milliseconds> RetryDelay(const Response& r, std::chrono::milliseconds fallback,
                                                    std::chrono::seconds max = kMaxRetryAfter);

}  // namespace tether::net
