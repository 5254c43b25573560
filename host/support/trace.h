// Phase marks for measuring a start (tests/bench/start_latency.py): with
// TETHER_TRACE=FILE in the environment, every Trace() appends one line to
// FILE:
//
//   <CLOCK_MONOTONIC in ns> <pid> <phase> [detail]
//
// The clock is the system-wide monotonic one, so a benchmark that notes
// its own time.monotonic() before it asks for a start can place each mark
// on its own time line (control plane answered, TCP connected, TLS done,
// exec call answered, launch sent, welcome received). Without the variable
// a mark costs one load of a cached flag; the file is opened once, with
// O_APPEND, and each line is one write(2), so marks from several threads
// or processes never interleave within a line. Marks are for measuring,
// never for logging: they carry no argv, no environment, no credential and
// no URL path, only a host:port or a size at most.
#pragma once

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace tether::internal {

inline int TraceFd() {
  static const int fd = [] {
    const char* path = std::getenv("TETHER_TRACE");
    if (path == nullptr || *path != '/') return -1;
    return ::open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  }();
  return fd;
}

inline void Trace(std::string_view phase, std::string_view detail = {}) {
  const int fd = TraceFd();
  if (fd < 0) return;
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  char line[256];
  const int n = std::snprintf(line, sizeof line, "%lld %d %.*s %.*s\n",
                              static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec, static_cast<int>(::getpid()),
                              static_cast<int>(phase.size() > 64 ? 64 : phase.size()), phase.data(),
                              static_cast<int>(detail.size() > 128 ? 128 : detail.size()), detail.data());
  if (n > 0) {
    const ssize_t ignored = ::write(fd, line, static_cast<std::size_t>(n) < sizeof line ? n : sizeof line - 1);
    (void)ignored;
  }
}

}  // namespace tether::internal
