// host/net/retry_after.h: reading a 429's Retry-After, and the delay a
// provider waits before sending the refused call again (boat, daytona and
// runloop all use it).
#include "host/net/retry_after.h"

#include <doctest.h>

#include <chrono>
#include <string>

namespace tether::net {
namespace {

Response With(std::string retry_after) {
  Response r;
  r.status = 429;
  if (!retry_after.empty()) r.headers.emplace_back("Retry-After", std::move(retry_after));
  return r;
}

TEST_CASE("RetryAfter reads delta-seconds and an HTTP-date; nothing else") {
  const auto now = std::chrono::system_clock::from_time_t(784111777);  // Sun, 06 Nov 1994 08:49:37 GMT
  CHECK(!RetryAfter(With(""), now).has_value());
  CHECK(RetryAfter(With("0"), now) == std::chrono::seconds(0));
  CHECK(RetryAfter(With("7"), now) == std::chrono::seconds(7));
  CHECK(RetryAfter(With("120"), now) == std::chrono::seconds(120));
  CHECK(RetryAfter(With("Sun, 06 Nov 1994 08:49:40 GMT"), now) == std::chrono::seconds(3));
  CHECK(RetryAfter(With("Sun, 06 Nov 1994 08:49:00 GMT"), now) == std::chrono::seconds(0));
  CHECK(RetryAfter(With("99999999999999"), now) == std::chrono::seconds(1 << 30));  // bounded, not overflowed
  for (const char* bad : {"-1", "-3", "soon", "later", "1.5", "2.5", "Sun, 06 Nov 1994 08:49:40"}) {
    CAPTURE(bad);
    CHECK(!RetryAfter(With(bad), now).has_value());
  }
}

TEST_CASE("RetryDelay waits the Retry-After, else the caller's backoff; above the bound it gives up") {
  using std::chrono::milliseconds;
  CHECK(RetryDelay(With(""), milliseconds(250)) == milliseconds(250));
  CHECK(RetryDelay(With("soon"), milliseconds(250)) == milliseconds(250));
  CHECK(RetryDelay(With("1"), milliseconds(250)) == milliseconds(1000));
  CHECK(RetryDelay(With("0"), milliseconds(250)) == milliseconds(0));
  CHECK(RetryDelay(With("30"), milliseconds(250)) == milliseconds(30000));
  CHECK(!RetryDelay(With("31"), milliseconds(250)).has_value());
  CHECK(!RetryDelay(With("3600"), milliseconds(250)).has_value());
  CHECK(!RetryDelay(With("5"), milliseconds(250), std::chrono::seconds(4)).has_value());
}

}  // namespace
}  // namespace tether::net
