// One output stream's bytes, addressed by absolute offset, in a bounded ring.
//
// The ring holds [begin(), end()): bytes read from the child that the host
// has not yet acknowledged. The child's pipe is read only into free space, so
// a full ring stops reading and the child blocks (backpressure, nothing lost).
// Evict() is the detached policy: drop the oldest bytes to keep the newest;
// the dropped range is a gap the host is told about. Bytes below begin()
// were either acknowledged (delivered to some attachment) or dropped; the
// ring remembers which ranges were dropped, so that a reattach that resumes
// below begin() is told how many bytes were really lost.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "protocol/limits.h"

namespace tether::supervisor {

// Per stream (protocol/limits.h).
using protocol::kDefaultRingBytes;
using protocol::kMaxRingBytes;
using protocol::kMinRingBytes;
// Dropped ranges remembered per stream (one per detached spell that
// overflowed the ring, merged when adjacent). Past this many the two
// oldest merge, counting the acknowledged bytes between them as dropped
// too: a loss may be overstated, never hidden. 16 bytes each.
inline constexpr std::size_t kMaxDroppedRanges = 64;

class OutputRing {
 public:
  explicit OutputRing(std::size_t capacity);

  std::uint64_t begin() const { return begin_; }
  std::uint64_t end() const { return end_; }
  std::size_t size() const { return static_cast<std::size_t>(end_ - begin_); }
  std::size_t capacity() const { return capacity_; }
  std::size_t free_space() const { return capacity_ - size(); }

  // Contiguous free space after end() (empty when full); fill it, then Commit.
  std::span<char> WritableSpan();
  void Commit(std::size_t n);

  // Contiguous bytes starting at `from` (begin() <= from <= end()), at most max.
  std::string_view Readable(std::uint64_t from, std::size_t max) const;

  // The host holds everything below `offset`: free it. Offsets outside
  // [begin, end] are clamped by the caller's validation, CHECKed here.
  void Release(std::uint64_t offset);

  // Drops the oldest `n` bytes (detached mode). Returns the new begin().
  std::uint64_t Evict(std::size_t n);

  // How many bytes in [from, to) Evict() dropped (the rest of what lies
  // below begin() was acknowledged). Never less than the truth.
  std::uint64_t DroppedIn(std::uint64_t from, std::uint64_t to) const;

 private:
  struct Range {
    std::uint64_t from, to;
  };

  std::size_t Index(std::uint64_t offset) const { return static_cast<std::size_t>(offset % capacity_); }

  std::size_t capacity_;
  std::unique_ptr<char[]> buf_;  // allocated on first write: idle processes cost nothing
  std::uint64_t begin_ = 0;
  std::uint64_t end_ = 0;
  std::vector<Range> dropped_ranges_;  // ascending, disjoint, at most kMaxDroppedRanges
};

}  // namespace tether::supervisor
