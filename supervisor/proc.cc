#include "supervisor/proc.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <string>
#include <utility>

namespace tether::supervisor {
namespace {

// The next space-separated field of `s`, which it consumes.
std::string_view NextField(std::string_view* s) {
  while (!s->empty() && s->front() == ' ') s->remove_prefix(1);
  const std::size_t end = std::min(s->find(' '), s->size());
  std::string_view f = s->substr(0, end);
  s->remove_prefix(end);
  return f;
}

template <typename T>
bool ParseNumber(std::string_view f, T* out) {
  if (f.empty()) return false;
  const auto [ptr, ec] = std::from_chars(f.data(), f.data() + f.size(), *out);
  return ec == std::errc() && ptr == f.data() + f.size();
}

}  // namespace

std::optional<ProcStat> ParseProcStat(std::string_view text) {
  const std::size_t close = text.rfind(')');
  if (close == std::string_view::npos || text.find('(') > close) return std::nullopt;
  std::string_view rest = text.substr(close + 1);
  while (!rest.empty() && (rest.back() == '\n' || rest.back() == ' ')) rest.remove_suffix(1);
  ProcStat st;
  const std::string_view state = NextField(&rest);
  if (state.size() != 1) return std::nullopt;
  st.state = state[0];
  if (!ParseNumber(NextField(&rest), &st.ppid) || !ParseNumber(NextField(&rest), &st.pgrp) ||
      !ParseNumber(NextField(&rest), &st.session)) {
    return std::nullopt;
  }
  // Fields 7..13 (tty_nr .. majflt) are skipped; 14 and 15 are the CPU times.
  for (int field = 7; field <= 13; ++field) NextField(&rest);
  if (!ParseNumber(NextField(&rest), &st.utime) || !ParseNumber(NextField(&rest), &st.stime)) {
    return std::nullopt;
  }
  return st;
}

std::optional<ProcStat> ReadProcStat(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  // comm is at most 16 bytes (64 for kernel threads): 1 KiB holds the
  // fields up to stime with room to spare.
  char buf[1024];
  ssize_t n;
  do {
    n = ::read(fd, buf, sizeof(buf));
  } while (n < 0 && errno == EINTR);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  return ParseProcStat(std::string_view(buf, static_cast<std::size_t>(n)));
}

std::vector<pid_t> ChildrenOfByScan(pid_t parent) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    pid_t pid = 0;
    if (!ParseNumber(std::string_view(e->d_name), &pid) || pid <= 0) continue;
    const std::optional<ProcStat> st = ReadProcStat(pid);
    if (st && st->ppid == parent) out.push_back(pid);
  }
  ::closedir(d);
  return out;
}

std::optional<std::vector<pid_t>> ChildrenOfByTasks(pid_t parent) {
  // The kernel has the files (CONFIG_PROC_CHILDREN; gVisor, for one, may
  // not): asked once.
  static const bool supported = ::access("/proc/thread-self/children", R_OK) == 0;
  if (!supported) return std::nullopt;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/task", static_cast<int>(parent));
  DIR* d = ::opendir(path);
  if (d == nullptr) return std::nullopt;
  std::vector<pid_t> out;
  std::string text;
  char buf[4096];
  while (dirent* e = ::readdir(d)) {
    pid_t tid = 0;
    if (!ParseNumber(std::string_view(e->d_name), &tid) || tid <= 0) continue;
    std::snprintf(path, sizeof(path), "/proc/%d/task/%d/children", static_cast<int>(parent), static_cast<int>(tid));
    const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;  // that thread has ended
    text.clear();
    while (true) {
      const ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      text.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fd);
    // "pid pid ... " (each followed by a space).
    std::string_view rest(text);
    while (true) {
      const std::string_view f = NextField(&rest);
      if (f.empty()) break;
      pid_t pid = 0;
      if (ParseNumber(f, &pid) && pid > 0) out.push_back(pid);
    }
  }
  ::closedir(d);
  return out;
}

std::vector<pid_t> ChildrenOf(pid_t parent) {
  if (std::optional<std::vector<pid_t>> fast = ChildrenOfByTasks(parent)) return *std::move(fast);
  return ChildrenOfByScan(parent);
}

std::vector<pid_t> DescendantsOf(pid_t root) {
  std::vector<pid_t> out;
  if (std::optional<std::vector<pid_t>> first = ChildrenOfByTasks(root)) {
    // Breadth first, each process's own lists: the walk costs the tree.
    out = *std::move(first);
    for (std::size_t i = 0; i < out.size() && out.size() < kMaxDescendants; ++i) {
      if (std::optional<std::vector<pid_t>> more = ChildrenOfByTasks(out[i])) {
        out.insert(out.end(), more->begin(), more->end());
      }
    }
  } else {
    // No lists: one scan for every process's parent, then the tree.
    std::vector<std::pair<pid_t, pid_t>> parent_child;
    if (DIR* d = ::opendir("/proc")) {
      while (dirent* e = ::readdir(d)) {
        pid_t pid = 0;
        if (!ParseNumber(std::string_view(e->d_name), &pid) || pid <= 0) continue;
        if (const std::optional<ProcStat> st = ReadProcStat(pid)) parent_child.emplace_back(st->ppid, pid);
      }
      ::closedir(d);
    }
    std::sort(parent_child.begin(), parent_child.end());
    std::vector<pid_t> frontier{root};
    for (std::size_t i = 0; i < frontier.size() && out.size() < kMaxDescendants; ++i) {
      auto it = std::lower_bound(parent_child.begin(), parent_child.end(), std::pair<pid_t, pid_t>(frontier[i], 0));
      for (; it != parent_child.end() && it->first == frontier[i]; ++it) {
        out.push_back(it->second);
        frontier.push_back(it->second);
      }
    }
  }
  if (out.size() > kMaxDescendants) out.resize(kMaxDescendants);
  return out;
}

}  // namespace tether::supervisor
