// Helpers shared by the supervisor tests: a private temporary directory,
// reads with a deadline (so a bug fails a test instead of hanging it), and
// reaping with a deadline.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>

#include "absl/strings/string_view.h"

namespace tether::supervisor::testing {

inline constexpr std::chrono::milliseconds kTimeout{10000};  // per read or wait

// Debian's abseil has its own string_view type (not std::string_view).
inline bool Contains(absl::string_view haystack, absl::string_view needle) {
  return haystack.find(needle) != absl::string_view::npos;
}

// A fresh 0700 directory under /tmp (its real path), removed with everything
// in it on destruction.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/tether-test-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) std::abort();
    char* real = ::realpath(tmpl, nullptr);
    path_ = real;
    std::free(real);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string operator/(std::string_view name) const { return path_ + "/" + std::string(name); }

 private:
  std::string path_;
};

// `n` pseudo-random bytes; the same seed always gives the same bytes.
inline std::string RandomBytes(std::size_t n, std::uint32_t seed = 1) {
  std::mt19937 rng(seed);
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(rng() & 0xff);
  return out;
}

// Every byte value 0..255 once, in order.
inline std::string AllByteValues() {
  std::string out(256, '\0');
  for (int i = 0; i < 256; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>(i);
  return out;
}

// Reads `fd` (blocking or not) until EOF. nullopt if EOF does not come
// within `timeout`.
inline std::optional<std::string> ReadToEof(int fd, std::chrono::milliseconds timeout = kTimeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string out;
  char buf[65536];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return out;
    out.append(buf, static_cast<std::size_t>(n));
  }
}

// Waits for `pid` to end and returns its wait status; after `timeout` kills
// it (SIGKILL), reaps it and returns nullopt.
inline std::optional<int> WaitPid(pid_t pid, std::chrono::milliseconds timeout = kTimeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) return std::nullopt;
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// Reaps every child of this process that has ended or ends within
// `timeout`; true when none is left.
inline bool ReapAllChildren(std::chrono::milliseconds timeout = kTimeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int status = 0;
    const pid_t r = ::waitpid(-1, &status, WNOHANG);
    if (r < 0 && errno == ECHILD) return true;
    if (r > 0) continue;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// Polls `pred` every 10 ms until it holds or `timeout` passes.
template <typename Pred>
bool Eventually(Pred pred, std::chrono::milliseconds timeout = kTimeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

inline bool PathExists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

}  // namespace tether::supervisor::testing
