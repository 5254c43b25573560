// What several providers' JSON answers share: numbers written by any
// encoder. Header-only (Boost.JSON), sans-I/O.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

#include <boost/json/value.hpp>

namespace tether::native {

// The integer a JSON number holds, or nullopt when it holds none (a
// string, a fraction, a double past +-1e6). 1.0 is an encoder's way of
// writing 1; an unsigned past int64's range comes back as int64's maximum
// (out of any range a caller checks).
inline std::optional<std::int64_t> JsonInteger(const boost::json::value& v) {
  if (v.is_int64()) return v.get_int64();
  if (v.is_uint64()) {
    const std::uint64_t u = v.get_uint64();
    return u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())
               ? std::numeric_limits<std::int64_t>::max()
               : static_cast<std::int64_t>(u);
  }
  if (v.is_double() && std::fabs(v.get_double()) <= 1e6 && v.get_double() == std::floor(v.get_double())) {
    return static_cast<std::int64_t>(v.get_double());
  }
  return std::nullopt;
}

}  // namespace tether::native
