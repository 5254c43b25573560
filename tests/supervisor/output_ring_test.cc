#include "supervisor/output_ring.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <string_view>

#include <doctest.h>

#include "tests/supervisor/test_util.h"

namespace tether::supervisor {
namespace {

using testing::RandomBytes;

// Writes `bytes` through WritableSpan/Commit (possibly in two spans when it
// wraps). Returns how many bytes fitted.
std::size_t Put(OutputRing& r, std::string_view bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    std::span<char> s = r.WritableSpan();
    if (s.empty()) break;
    const std::size_t n = std::min(s.size(), bytes.size() - done);
    std::memcpy(s.data(), bytes.data() + done, n);
    r.Commit(n);
    done += n;
  }
  return done;
}

// Everything in [from, end()) through Readable, span by span.
std::string ReadAll(const OutputRing& r, std::uint64_t from, std::size_t max_per_call = SIZE_MAX) {
  std::string out;
  while (from < r.end()) {
    std::string_view v = r.Readable(from, max_per_call);
    REQUIRE(!v.empty());
    out.append(v);
    from += v.size();
  }
  return out;
}

// Runs `body` in a forked child; true when the child died of SIGABRT (a
// CHECK failure), with its stderr discarded.
bool Aborts(const std::function<void()>& body) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::signal(SIGABRT, SIG_DFL);  // not doctest's crash reporter: this child dies quietly
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 2);
    body();
    ::_exit(0);
  }
  const std::optional<int> st = testing::WaitPid(pid);
  REQUIRE(st.has_value());
  return WIFSIGNALED(*st) && WTERMSIG(*st) == SIGABRT;
}

TEST_CASE("a new ring is empty at offset zero with all of its capacity writable") {
  OutputRing r(kMinRingBytes);
  CHECK(r.begin() == 0);
  CHECK(r.end() == 0);
  CHECK(r.size() == 0);
  CHECK(r.capacity() == kMinRingBytes);
  CHECK(r.free_space() == kMinRingBytes);
  CHECK(r.WritableSpan().size() == kMinRingBytes);
  CHECK(r.Readable(0, 100).empty());
}

TEST_CASE("commit advances end and the committed bytes are readable at their offsets") {
  OutputRing r(kMinRingBytes);
  REQUIRE(Put(r, "hello world") == 11);
  CHECK(r.begin() == 0);
  CHECK(r.end() == 11);
  CHECK(r.size() == 11);
  CHECK(r.free_space() == kMinRingBytes - 11);
  CHECK(r.Readable(0, 100) == "hello world");
  CHECK(r.Readable(6, 100) == "world");
  CHECK(r.Readable(6, 3) == "wor");
  CHECK(r.Readable(11, 100).empty());
  CHECK(r.Readable(0, 0).empty());
}

TEST_CASE("a write span across the physical end wraps to the start of the buffer") {
  OutputRing r(kMinRingBytes);
  const std::string first = RandomBytes(3000, 1);
  REQUIRE(Put(r, first) == first.size());
  r.Release(3000);
  CHECK(r.begin() == 3000);
  CHECK(r.size() == 0);

  // The first span ends at the physical end of the buffer ...
  std::span<char> s = r.WritableSpan();
  CHECK(s.size() == kMinRingBytes - 3000);
  const std::string tail = RandomBytes(kMinRingBytes - 3000, 2);
  std::memcpy(s.data(), tail.data(), tail.size());
  r.Commit(tail.size());
  CHECK(r.end() == kMinRingBytes);

  // ... and the next one starts at its beginning, up to the released bytes.
  s = r.WritableSpan();
  CHECK(s.size() == 3000);
  const std::string head = RandomBytes(1000, 3);
  std::memcpy(s.data(), head.data(), head.size());
  r.Commit(head.size());
  CHECK(r.end() == kMinRingBytes + 1000);
  CHECK(r.free_space() == 2000);

  // Readable stops at the physical end too; the rest comes from the start.
  std::string_view v = r.Readable(3000, SIZE_MAX);
  CHECK(v == tail);
  v = r.Readable(kMinRingBytes, SIZE_MAX);
  CHECK(v == head);
  CHECK(ReadAll(r, 3000) == tail + head);
  CHECK(ReadAll(r, 3000, 7) == tail + head);
  CHECK(ReadAll(r, 4000) == tail.substr(1000) + head);
}

TEST_CASE("release frees bytes below an offset and never moves begin backwards") {
  OutputRing r(kMinRingBytes);
  REQUIRE(Put(r, std::string(100, 'x')) == 100);
  r.Release(40);
  CHECK(r.begin() == 40);
  CHECK(r.size() == 60);
  CHECK(r.free_space() == kMinRingBytes - 60);
  r.Release(10);  // the host already released more: no change
  CHECK(r.begin() == 40);
  r.Release(40);
  CHECK(r.begin() == 40);
  r.Release(100);
  CHECK(r.begin() == 100);
  CHECK(r.size() == 0);
  CHECK(r.free_space() == kMinRingBytes);
}

TEST_CASE("release beyond the end is our own bug and aborts") {
  CHECK(Aborts([] {
    OutputRing r(kMinRingBytes);
    Put(r, "abc");
    r.Release(4);
  }));
}

TEST_CASE("readable outside [begin, end] is our own bug and aborts") {
  CHECK(Aborts([] {
    OutputRing r(kMinRingBytes);
    Put(r, "abcdef");
    r.Release(3);
    (void)r.Readable(2, 10);
  }));
  CHECK(Aborts([] {
    OutputRing r(kMinRingBytes);
    Put(r, "abcdef");
    (void)r.Readable(7, 10);
  }));
}

TEST_CASE("evict drops the oldest bytes and returns the new begin") {
  OutputRing r(kMinRingBytes);
  REQUIRE(Put(r, "0123456789") == 10);
  CHECK(r.Evict(3) == 3);
  CHECK(r.begin() == 3);
  CHECK(r.end() == 10);
  CHECK(r.Readable(3, 100) == "3456789");
  CHECK(r.Evict(0) == 3);
  // More than is held: everything goes, never past end().
  CHECK(r.Evict(1000) == 10);
  CHECK(r.size() == 0);
  CHECK(r.end() == 10);
  CHECK(r.Evict(1) == 10);
  // Offsets keep counting after an eviction.
  REQUIRE(Put(r, "ab") == 2);
  CHECK(r.Readable(10, 100) == "ab");
}

TEST_CASE("a full ring gives an empty writable span until bytes are released or evicted") {
  OutputRing r(kMinRingBytes);
  const std::string all = RandomBytes(kMinRingBytes + 10, 4);
  CHECK(Put(r, all) == kMinRingBytes);
  CHECK(r.free_space() == 0);
  CHECK(r.WritableSpan().empty());
  CHECK(r.size() == kMinRingBytes);
  CHECK(ReadAll(r, 0) == all.substr(0, kMinRingBytes));

  r.Release(5);
  CHECK(r.WritableSpan().size() == 5);
  CHECK(Put(r, all.substr(kMinRingBytes)) == 5);
  CHECK(r.WritableSpan().empty());
  CHECK(r.Evict(2) == 7);
  CHECK(r.WritableSpan().size() == 2);
  CHECK(ReadAll(r, 7) == all.substr(7, kMinRingBytes - 2));
}

TEST_CASE("commit of more than the free space is our own bug and aborts") {
  CHECK(Aborts([] {
    OutputRing r(kMinRingBytes);
    r.Commit(kMinRingBytes + 1);
  }));
}

TEST_CASE("capacity must be within kMinRingBytes..kMaxRingBytes") {
  CHECK(kMinRingBytes <= kDefaultRingBytes);
  CHECK(kDefaultRingBytes <= kMaxRingBytes);
  {
    OutputRing r(kMaxRingBytes);  // nothing is allocated before the first write
    CHECK(r.capacity() == kMaxRingBytes);
    CHECK(r.free_space() == kMaxRingBytes);
  }
  {
    OutputRing r(kMinRingBytes + 1);  // not a power of two: offsets still map right
    CHECK(r.capacity() == kMinRingBytes + 1);
  }
  CHECK(Aborts([] { OutputRing r(kMinRingBytes - 1); }));
  CHECK(Aborts([] { OutputRing r(kMaxRingBytes + 1); }));
  CHECK(Aborts([] { OutputRing r(0); }));
}

// Random fills, reads, releases and evictions, checked against a plain
// string holding [begin, end).
void RandomWalk(std::size_t capacity, std::uint32_t seed) {
  CAPTURE(capacity);
  CAPTURE(seed);
  OutputRing r(capacity);
  std::mt19937 rng(seed);
  std::string model;          // bytes [model_begin, model_begin + model.size())
  std::uint64_t model_begin = 0;
  std::uint64_t produced = 0;  // next byte value comes from this counter
  auto next_byte = [&] { return static_cast<char>((produced++ * 131 + 7) & 0xff); };

  for (int step = 0; step < 20000; ++step) {
    const unsigned op = rng() % 10;
    if (op < 4) {  // fill a random amount through one span
      std::span<char> s = r.WritableSpan();
      REQUIRE(s.size() <= r.free_space());
      if (r.free_space() == 0) {
        REQUIRE(s.empty());
        continue;
      }
      REQUIRE(!s.empty());
      const std::size_t n = std::uniform_int_distribution<std::size_t>(0, s.size())(rng);
      for (std::size_t i = 0; i < n; ++i) {
        s[i] = next_byte();
        model.push_back(s[i]);
      }
      r.Commit(n);
    } else if (op < 7) {  // read a random window and compare
      if (model.empty()) {
        REQUIRE(r.Readable(r.begin(), 100).empty());
        continue;
      }
      const std::uint64_t from =
          model_begin + std::uniform_int_distribution<std::size_t>(0, model.size())(rng);
      const std::size_t max = std::uniform_int_distribution<std::size_t>(1, capacity)(rng);
      std::string_view v = r.Readable(from, max);
      REQUIRE(v.size() <= max);
      REQUIRE(v == std::string_view(model).substr(from - model_begin, v.size()));
      if (from < r.end()) REQUIRE(!v.empty());
    } else if (op < 9) {  // release up to a random offset
      const std::size_t n = std::uniform_int_distribution<std::size_t>(0, model.size())(rng);
      r.Release(model_begin + n);
      model.erase(0, n);
      model_begin += n;
    } else {  // evict a random amount (sometimes more than is held)
      const std::size_t n = std::uniform_int_distribution<std::size_t>(0, model.size() + 10)(rng);
      const std::size_t dropped = std::min(n, model.size());
      REQUIRE(r.Evict(n) == model_begin + dropped);
      model.erase(0, dropped);
      model_begin += dropped;
    }
    REQUIRE(r.begin() == model_begin);
    REQUIRE(r.end() == model_begin + model.size());
    REQUIRE(r.size() == model.size());
    REQUIRE(r.free_space() == capacity - model.size());
  }
  REQUIRE(ReadAll(r, r.begin()) == model);
  CHECK(produced > 4 * capacity);  // the walk really went round the ring
}

TEST_CASE("dropped bytes are told apart from acknowledged ones below begin()") {
  OutputRing r(kMinRingBytes);
  const auto fill = [&r](std::size_t n) {
    while (n > 0) {
      std::span<char> s = r.WritableSpan();
      const std::size_t k = std::min(n, s.size());
      r.Commit(k);
      n -= k;
    }
  };
  fill(4096);
  r.Release(1000);  // acknowledged: delivered
  r.Evict(500);     // [1000, 1500) dropped
  r.Evict(100);     // [1500, 1600): the same spell, merged
  r.Release(2000);  // acknowledged
  r.Evict(96);      // [2000, 2096) dropped
  CHECK(r.begin() == 2096);
  CHECK(r.DroppedIn(0, r.begin()) == 696);
  CHECK(r.DroppedIn(0, 1000) == 0);
  CHECK(r.DroppedIn(1200, 2050) == 450);
  CHECK(r.DroppedIn(1600, 2000) == 0);
  // Past kMaxDroppedRanges spells the oldest merge: overstated, never hidden.
  OutputRing m(kMinRingBytes);
  std::uint64_t truly = 0;
  for (std::size_t i = 0; i < kMaxDroppedRanges + 5; ++i) {
    m.Release(m.end());
    const std::uint64_t b = m.begin();
    std::span<char> s = m.WritableSpan();
    m.Commit(std::min<std::size_t>(20, s.size()));
    m.Release(b + 10);  // 10 acknowledged,
    m.Evict(10);        // 10 dropped
    truly += 10;
  }
  CHECK(m.DroppedIn(0, m.begin()) >= truly);
  CHECK(m.DroppedIn(0, m.begin()) <= truly + 6 * 10);
}

TEST_CASE("random fills and drains match a reference string") {
  RandomWalk(kMinRingBytes, 1);
  RandomWalk(kMinRingBytes + 1, 2);
  RandomWalk(5000, 3);
  RandomWalk(3 * kMinRingBytes - 7, 4);
}

}  // namespace
}  // namespace tether::supervisor
