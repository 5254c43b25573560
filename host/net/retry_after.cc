#include "host/net/retry_after.h"

#include <algorithm>
#include <cstdint>
#include <ctime>
#include <string>

#include "absl/strings/numbers.h"

namespace tether::net {

std::optional<std::chrono::seconds> RetryAfter(const Response& r, std::chrono::system_clock::time_point now) {
  constexpr std::int64_t kMax = 1 << 30;  // s: far beyond any delay a caller waits
  const std::string v(r.header("Retry-After"));
  if (v.empty()) return std::nullopt;
  std::int64_t n = 0;
  if (absl::SimpleAtoi(v, &n)) {
    if (n < 0) return std::nullopt;
    return std::chrono::seconds(std::min(n, kMax));
  }
  std::tm tm{};
  const char* end = ::strptime(v.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  if (end == nullptr || *end != '\0') return std::nullopt;
  const auto at = std::chrono::system_clock::from_time_t(::timegm(&tm));
  if (at <= now) return std::chrono::seconds(0);
  return std::chrono::seconds(std::min<std::int64_t>(std::chrono::ceil<std::chrono::seconds>(at - now).count(), kMax));
}

std::optional<std::chrono::milliseconds> RetryDelay(const Response& r, std::chrono::milliseconds fallback,
                                                    std::chrono::seconds max) {
  const std::optional<std::chrono::seconds> after = RetryAfter(r, std::chrono::system_clock::now());
  if (!after) return fallback;
  if (*after > max) return std::nullopt;
  return std::chrono::duration_cast<std::chrono::milliseconds>(*after);
}

}  // namespace tether::net
