// RETURN_IF_ERROR / ASSIGN_OR_RETURN for absl::Status, which the abseil in
// Debian 12 (20220623) does not ship.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TETHER_CONCAT_INNER_(a, b) a##b
#define TETHER_CONCAT_(a, b) TETHER_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                         \
  do {                                                \
    if (::absl::Status _st = (expr); !_st.ok()) {     \
      return _st;                                     \
    }                                                 \
  } while (0)

#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(TETHER_CONCAT_(_status_or_, __LINE__), lhs, expr)

#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return std::move(tmp).status(); \
  lhs = std::move(tmp).value()

// Our own broken invariant: abort loudly. Never used for peer input.
#define TETHER_CHECK(cond)                                                   \
  do {                                                                       \
    if (!(cond)) ::tether::internal::CheckFailed(#cond, __FILE__, __LINE__); \
  } while (0)

namespace tether::internal {
[[noreturn]] void CheckFailed(const char* cond, const char* file, int line);
}  // namespace tether::internal
