// native::JsonInteger: how every provider reads a JSON number as an exit code.
#include "host/native/native_json.h"

#include <doctest.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

#include <boost/json/parse.hpp>

namespace {

std::optional<std::int64_t> Of(std::string_view json) { return tether::native::JsonInteger(boost::json::parse(json)); }

}  // namespace

TEST_CASE("JsonInteger: integers as any encoder writes them") {
  CHECK(Of("0") == std::optional<std::int64_t>(0));
  CHECK(Of("143") == std::optional<std::int64_t>(143));
  CHECK(Of("-1") == std::optional<std::int64_t>(-1));
  CHECK(Of("3.0") == std::optional<std::int64_t>(3));    // 1.0: an encoder's way of writing 1
  CHECK(Of("2e2") == std::optional<std::int64_t>(200));
  CHECK(Of("-0.0") == std::optional<std::int64_t>(0));
  CHECK(Of("9223372036854775807") == std::optional<std::int64_t>(std::numeric_limits<std::int64_t>::max()));
  // Past int64: int64's maximum, out of any range a caller checks, never a wrap to a small or negative code.
  CHECK(Of("18446744073709551615") == std::optional<std::int64_t>(std::numeric_limits<std::int64_t>::max()));
  CHECK(Of("9223372036854775808") == std::optional<std::int64_t>(std::numeric_limits<std::int64_t>::max()));
}

TEST_CASE("JsonInteger: no integer in fractions, huge doubles, strings, null, booleans") {
  for (std::string_view bad : {"1.5", "1e7", "-1e7", "1e300", "\"0\"", "null", "true", "[]", "{}"}) {
    CAPTURE(bad);
    CHECK(Of(bad) == std::nullopt);
  }
}
