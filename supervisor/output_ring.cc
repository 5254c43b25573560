#include "supervisor/output_ring.h"

#include <algorithm>

#include "protocol/status_macros.h"

namespace tether::supervisor {

OutputRing::OutputRing(std::size_t capacity) : capacity_(capacity) {
  TETHER_CHECK(capacity_ >= kMinRingBytes && capacity_ <= kMaxRingBytes);
}

std::span<char> OutputRing::WritableSpan() {
  if (free_space() == 0) return {};
  if (!buf_) buf_ = std::make_unique_for_overwrite<char[]>(capacity_);
  const std::size_t at = Index(end_);
  const std::size_t n = std::min(free_space(), capacity_ - at);
  return {buf_.get() + at, n};
}

void OutputRing::Commit(std::size_t n) {
  TETHER_CHECK(n <= free_space());
  end_ += n;
}

std::string_view OutputRing::Readable(std::uint64_t from, std::size_t max) const {
  TETHER_CHECK(from >= begin_ && from <= end_);
  if (from == end_) return {};
  const std::size_t at = Index(from);
  const std::size_t n = std::min({max, static_cast<std::size_t>(end_ - from), capacity_ - at});
  return {buf_.get() + at, n};
}

void OutputRing::Release(std::uint64_t offset) {
  TETHER_CHECK(offset <= end_);
  if (offset > begin_) begin_ = offset;
}

std::uint64_t OutputRing::Evict(std::size_t n) {
  const std::uint64_t from = begin_;
  begin_ += std::min<std::uint64_t>(n, size());
  if (begin_ == from) return begin_;
  if (!dropped_ranges_.empty() && dropped_ranges_.back().to == from) {
    dropped_ranges_.back().to = begin_;  // the same detached spell
    return begin_;
  }
  if (dropped_ranges_.size() == kMaxDroppedRanges) {
    dropped_ranges_[1].from = dropped_ranges_[0].from;
    dropped_ranges_.erase(dropped_ranges_.begin());
  }
  dropped_ranges_.push_back({from, begin_});
  return begin_;
}

std::uint64_t OutputRing::DroppedIn(std::uint64_t from, std::uint64_t to) const {
  std::uint64_t n = 0;
  for (const Range& r : dropped_ranges_) {
    const std::uint64_t lo = std::max(from, r.from), hi = std::min(to, r.to);
    if (lo < hi) n += hi - lo;
  }
  return n;
}

}  // namespace tether::supervisor
