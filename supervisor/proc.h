// What /proc says about a process: its parent, state, group and session, and
// which processes are children (or descendants) of a given one. One parser for
// /proc/<pid>/stat, used by the daemon's orphan sweep and by the tests.
//
//   for (pid_t p : ChildrenOf(::getpid())) ::kill(p, SIGKILL);
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

namespace tether::supervisor {

// The fields of /proc/<pid>/stat that we use (proc(5) numbering).
struct ProcStat {
  char state = '?';         // field 3: R, S, D, Z, T, ...
  pid_t ppid = 0;           // field 4
  pid_t pgrp = 0;           // field 5
  pid_t session = 0;        // field 6
  unsigned long long utime = 0;  // field 14, clock ticks
  unsigned long long stime = 0;  // field 15, clock ticks
};

// Parses the text of a /proc/<pid>/stat file: "pid (comm) state ppid ...",
// where comm may hold spaces and parentheses (so the last ')' ends it).
// nullopt when the text is not such a line.
std::optional<ProcStat> ParseProcStat(std::string_view text);

// Reads and parses /proc/<pid>/stat; nullopt when the process is gone.
std::optional<ProcStat> ReadProcStat(pid_t pid);

// Every process whose parent is `parent`, zombies included (they are gone
// only once reaped). Empty when /proc cannot be read. From the parent's
// own lists (ChildrenOfByTasks) where the kernel has them, so that its cost
// is its children's number, not the sandbox's (a terminate's sweep with
// thousands of processes beside it); else by reading every /proc/PID/stat.
std::vector<pid_t> ChildrenOf(pid_t parent);

// Every descendant of `root` (its children, theirs, ...), zombies included,
// each parent before its children; at most kMaxDescendants. A process
// forked while the walk goes on may be missing (a sweep's next round finds
// it). From the children lists where the kernel has them, else from one
// scan of /proc.
inline constexpr std::size_t kMaxDescendants = 1 << 16;
std::vector<pid_t> DescendantsOf(pid_t root);

// The two ways, for tests: every thread's /proc/PARENT/task/TID/children
// (nullopt when the kernel has no such files), and the full scan.
std::optional<std::vector<pid_t>> ChildrenOfByTasks(pid_t parent);
std::vector<pid_t> ChildrenOfByScan(pid_t parent);

}  // namespace tether::supervisor
