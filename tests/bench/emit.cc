// tether_bench_emit BYTES MS: writes BYTES zero bytes to stdout every MS
// milliseconds until stdout closes or a signal ends it. The scale
// benchmark's streaming child: one small process per stream, no shell loop
// (a fork per tick would cost more than what is measured).
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const long bytes = std::atol(argv[1]);
  const long ms = std::atol(argv[2]);
  if (bytes <= 0 || bytes > (1 << 20) || ms <= 0) return 2;
  std::vector<char> buf(static_cast<std::size_t>(bytes), '\0');
  timespec next;
  ::clock_gettime(CLOCK_MONOTONIC, &next);
  while (true) {
    for (long off = 0; off < bytes;) {
      const ssize_t n = ::write(1, buf.data() + off, static_cast<std::size_t>(bytes - off));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return 0;
      off += n;
    }
    next.tv_nsec += ms % 1000 * 1000000;
    next.tv_sec += ms / 1000 + next.tv_nsec / 1000000000;
    next.tv_nsec %= 1000000000;
    while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, nullptr) == EINTR) {
    }
  }
}
