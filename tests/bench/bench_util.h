// Shared by the benchmarks: timing, child processes on raw pipes, and the
// side-by-side runner that alternates a baseline with tether and reports
// medians and their ratio (the machine is shared and noisy, so absolute
// figures from different moments are not comparable; ratios from the same
// moment are).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace tether::bench {

inline double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

[[noreturn]] inline void Die(const std::string& what) {
  std::fprintf(stderr, "tether_bench: %s\n", what.c_str());
  std::exit(1);
}

// A child on raw pipes: the baseline every figure is compared with.
struct RawChild {
  pid_t pid = -1;
  int in = -1;   // its stdin (ours to write), -1 if not piped
  int out = -1;  // its stdout (ours to read)

  static RawChild Spawn(const std::vector<std::string>& argv, bool pipe_stdin) {
    int o[2], i[2] = {-1, -1};
    if (::pipe2(o, O_CLOEXEC) != 0) Die("pipe");
    if (pipe_stdin && ::pipe2(i, O_CLOEXEC) != 0) Die("pipe");
    RawChild c;
    c.pid = ::fork();
    if (c.pid < 0) Die("fork");
    if (c.pid == 0) {
      ::dup2(o[1], 1);
      if (pipe_stdin) ::dup2(i[0], 0);
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execvp(args[0], args.data());
      ::_exit(127);
    }
    ::close(o[1]);
    c.out = o[0];
    if (pipe_stdin) {
      ::close(i[0]);
      c.in = i[1];
    }
    return c;
  }
  int Wait() {
    if (in >= 0) ::close(in);
    if (out >= 0) ::close(out);
    in = out = -1;
    int st = 0;
    ::waitpid(pid, &st, 0);
    return st;
  }
};

// Reads `fd` to EOF in 64 KiB reads; returns the byte count.
inline std::uint64_t DrainFd(int fd) {
  static char buf[64 * 1024];
  std::uint64_t total = 0;
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      total += static_cast<std::uint64_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return total;
  }
}

}  // namespace tether::bench
