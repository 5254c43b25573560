#include "supervisor/admission.h"

namespace tether::supervisor {

std::optional<std::size_t> PickEviction(std::span<const ConnectionView> open) {
  std::optional<std::size_t> best;
  // Ranks: silent before waiting, then older before newer.
  const auto before = [](const ConnectionView& a, const ConnectionView& b) {
    if (a.bytes_waiting != b.bytes_waiting) return !a.bytes_waiting;
    return a.accepted < b.accepted;
  };
  for (std::size_t i = 0; i < open.size(); ++i) {
    if (open[i].authenticated) continue;
    if (!best || before(open[i], open[*best])) best = i;
  }
  return best;
}

}  // namespace tether::supervisor
