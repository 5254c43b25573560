#include "supervisor/admission.h"

#include <vector>

#include <doctest.h>

namespace tether::supervisor {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

ConnectionView View(bool authenticated, bool waiting, int age_ms) {
  return {authenticated, waiting, steady_clock::time_point{} + milliseconds(100000 - age_ms)};
}

TEST_CASE("the oldest silent unauthenticated connection gives way first") {
  const std::vector<ConnectionView> open = {View(false, true, 900), View(true, false, 1000), View(false, false, 50),
                                            View(false, false, 700), View(false, true, 10)};
  CHECK(PickEviction(open) == 3u);
}

TEST_CASE("with every unauthenticated connection holding bytes, the oldest of them goes") {
  const std::vector<ConnectionView> open = {View(false, true, 10), View(true, false, 1000), View(false, true, 500)};
  CHECK(PickEviction(open) == 2u);
}

TEST_CASE("authenticated connections never give way") {
  const std::vector<ConnectionView> open = {View(true, false, 10), View(true, true, 1000)};
  CHECK_FALSE(PickEviction(open).has_value());
  CHECK_FALSE(PickEviction({}).has_value());
}

}  // namespace
}  // namespace tether::supervisor
