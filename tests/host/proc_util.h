// /proc helpers for the reliability tests: find the processes a test left in
// its sandbox (by an environment marker given to the child, or by the
// supervisor binary they run) and measure our own memory and fds.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace tether::testing {

// The whole of /proc/<pid>/<name> (empty when unreadable or gone).
// (POSIX reads: a process that exits mid-read makes libstdc++'s streams throw.)
inline std::string ReadProc(pid_t pid, const char* name) {
  std::string out;
  const int fd = ::open(("/proc/" + std::to_string(pid) + "/" + name).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  return out;
}

inline std::vector<pid_t> AllPids() {
  std::vector<pid_t> pids;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return pids;
  while (dirent* e = ::readdir(d)) {
    const pid_t pid = std::atoi(e->d_name);
    if (pid > 0) pids.push_back(pid);
  }
  ::closedir(d);
  return pids;
}

inline pid_t ParentOf(pid_t pid) {
  const std::string stat = ReadProc(pid, "stat");
  const std::size_t close = stat.rfind(')');
  return close == std::string::npos ? 0 : std::atoi(stat.c_str() + close + 4);
}

// Processes whose environment holds exactly `entry` ("NAME=value"), or with
// `prefix` an entry that starts with it.
inline std::vector<pid_t> PidsWithEnv(const std::string& entry, bool prefix = false) {
  std::vector<pid_t> out;
  const std::string needle = std::string(1, '\0') + entry + (prefix ? "" : std::string(1, '\0'));
  for (pid_t pid : AllPids()) {
    const std::string env = std::string(1, '\0') + ReadProc(pid, "environ");
    if (env.find(needle) != std::string::npos) out.push_back(pid);
  }
  return out;
}

// Processes running an executable under `dir` (the sandbox's supervisors).
inline std::vector<pid_t> PidsRunningFrom(const std::string& dir) {
  std::vector<pid_t> out;
  for (pid_t pid : AllPids()) {
    char buf[4096];
    const ssize_t n = ::readlink(("/proc/" + std::to_string(pid) + "/exe").c_str(), buf, sizeof buf - 1);
    if (n <= 0) continue;
    const std::string exe(buf, static_cast<std::size_t>(n));
    if (exe.compare(0, dir.size() + 1, dir + "/") == 0) out.push_back(pid);
  }
  return out;
}

// Kills the processes carrying `marker` in their environment, their process
// groups, and their parents when those run from `supervisor_dir` (the
// daemon): for runs that left a process behind on purpose or by failure.
inline int KillMarked(const std::string& marker, const std::string& supervisor_dir, bool prefix = false) {
  int killed = 0;
  const std::vector<pid_t> daemons = PidsRunningFrom(supervisor_dir);
  for (pid_t pid : PidsWithEnv(marker, prefix)) {
    const pid_t parent = ParentOf(pid);
    for (pid_t d : daemons) {
      if (d == parent) ::kill(d, SIGKILL);
    }
    ::kill(-pid, SIGKILL);
    ::kill(pid, SIGKILL);
    ++killed;
  }
  return killed;
}

// A process's resident set in KiB (VmRSS; -1 when gone), ours, our heap in
// use (a leak grows it; allocator fragmentation only grows RSS), open fds.
inline long RssKib(pid_t pid) {
  const std::string s = ReadProc(pid, "status");
  const std::size_t at = s.find("VmRSS:");
  return at == std::string::npos ? -1 : std::atol(s.c_str() + at + 6);
}
inline long SelfRssKib() { return RssKib(::getpid()); }
inline std::size_t HeapInUseBytes() {
  const struct mallinfo2 m = ::mallinfo2();
  return m.uordblks + m.hblkhd;
}
inline int SelfOpenFds() {
  int n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(d);
  return n - 1;  // the directory stream itself
}

}  // namespace tether::testing
