#include "supervisor/proc.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include <thread>

#include <doctest.h>

#include "tests/supervisor/test_util.h"

namespace tether::supervisor {
namespace {

TEST_CASE("a stat line is parsed after the last parenthesis, whatever the command name holds") {
  const std::string tail = " 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n";
  std::optional<ProcStat> st = ParseProcStat("4242 (sleep) S 17 4242 4240 0 -1 4194560 100 0 0 0 7 9 0 0 20 0");
  REQUIRE(st.has_value());
  CHECK(st->state == 'S');
  CHECK(st->ppid == 17);
  CHECK(st->pgrp == 4242);
  CHECK(st->session == 4240);
  CHECK(st->utime == 7);
  CHECK(st->stime == 9);
  st = ParseProcStat("7 (a) Z (b) c) Z 99 7 7 0 -1 0 0 0 0 0 3 4 0 0 20 0\n");
  REQUIRE(st.has_value());
  CHECK(st->state == 'Z');
  CHECK(st->ppid == 99);
  CHECK(st->utime == 3);
  st = ParseProcStat("8 (with space) R 1 8 8" + tail);
  REQUIRE(st.has_value());
  CHECK(st->ppid == 1);
}

TEST_CASE("text that is not a stat line is refused") {
  for (const char* bad : {"", "1 sleep S 2 3 4", "1 (sleep", "1 (x) S", "1 (x) SS 2 3 4 0 0 0 0 0 0 0 1 1",
                          "1 (x) S two 3 4 0 0 0 0 0 0 0 1 1", "1 (x) S 2 3 4 0 0 0 0 0 0 0 1", ") ( S 1 2 3"}) {
    CAPTURE(bad);
    CHECK_FALSE(ParseProcStat(bad).has_value());
  }
}

TEST_CASE("ReadProcStat sees this process, and ChildrenOf its child until it is reaped") {
  std::optional<ProcStat> self = ReadProcStat(::getpid());
  REQUIRE(self.has_value());
  CHECK(self->ppid == ::getppid());
  CHECK(self->state == 'R');
  const pid_t kid = ::fork();
  if (kid == 0) {
    ::pause();
    ::_exit(0);
  }
  std::vector<pid_t> kids = ChildrenOf(::getpid());
  CHECK(std::count(kids.begin(), kids.end(), kid) == 1);
  ::kill(kid, SIGKILL);
  CHECK(testing::Eventually([&] { return ReadProcStat(kid) && ReadProcStat(kid)->state == 'Z'; }));
  kids = ChildrenOf(::getpid());
  CHECK(std::count(kids.begin(), kids.end(), kid) == 1);  // a zombie is still ours
  CHECK(testing::WaitPid(kid).has_value());
  kids = ChildrenOf(::getpid());
  CHECK(std::count(kids.begin(), kids.end(), kid) == 0);
  CHECK_FALSE(ReadProcStat(kid).has_value());
}


TEST_CASE("the children lists and the full scan agree: live children, a zombie, a child of another thread") {
  std::vector<pid_t> kids;
  for (int i = 0; i < 3; ++i) {
    const pid_t kid = ::fork();
    if (kid == 0) {
      ::pause();
      ::_exit(0);
    }
    kids.push_back(kid);
  }
  ::kill(kids[0], SIGKILL);  // a zombie until reaped below
  CHECK(testing::Eventually([&] { return ReadProcStat(kids[0]) && ReadProcStat(kids[0])->state == 'Z'; }));
  // A child forked by another thread hangs on that thread's list.
  pid_t from_thread = 0;
  std::thread([&] {
    from_thread = ::fork();
    if (from_thread == 0) {
      ::pause();
      ::_exit(0);
    }
  }).join();
  kids.push_back(from_thread);
  std::vector<pid_t> scan = ChildrenOfByScan(::getpid());
  std::optional<std::vector<pid_t>> tasks = ChildrenOfByTasks(::getpid());
  std::vector<pid_t> any = ChildrenOf(::getpid());
  std::sort(kids.begin(), kids.end());
  std::sort(scan.begin(), scan.end());
  std::sort(any.begin(), any.end());
  // (Other tests in this binary may have left this process, a subreaper,
  // children of its own: the sets must contain ours and agree.)
  const auto has_all = [&](const std::vector<pid_t>& v) {
    return std::includes(v.begin(), v.end(), kids.begin(), kids.end());
  };
  CHECK(has_all(scan));
  CHECK(has_all(any));
  if (tasks) {
    std::sort(tasks->begin(), tasks->end());
    CHECK(*tasks == scan);
  } else {
    MESSAGE("this kernel has no /proc/PID/task/TID/children: only the scan was checked");
  }
  for (pid_t k : kids) {
    ::kill(k, SIGKILL);
    CHECK(testing::WaitPid(k).has_value());
  }
  for (pid_t k : ChildrenOf(::getpid())) CHECK(std::find(kids.begin(), kids.end(), k) == kids.end());
}

TEST_CASE("DescendantsOf finds a whole tree, new sessions included, each parent before its children") {
  // child -> grandchild (in a session of its own) -> great-grandchild,
  // reported through a pipe once all three exist.
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t child = ::fork();
  if (child == 0) {
    const pid_t grandchild = ::fork();
    if (grandchild == 0) {
      ::setsid();
      const pid_t great = ::fork();
      if (great == 0) {
        ::pause();
        ::_exit(0);
      }
      const pid_t pids[2] = {::getpid(), great};
      (void)!::write(fds[1], pids, sizeof pids);
      ::pause();
      ::_exit(0);
    }
    ::pause();
    ::_exit(0);
  }
  ::close(fds[1]);
  pid_t pids[2] = {0, 0};
  REQUIRE(::read(fds[0], pids, sizeof pids) == static_cast<ssize_t>(sizeof pids));
  ::close(fds[0]);
  const std::vector<pid_t> all = DescendantsOf(::getpid());
  const auto at = [&](pid_t p) { return std::find(all.begin(), all.end(), p) - all.begin(); };
  REQUIRE(at(child) < static_cast<std::ptrdiff_t>(all.size()));
  REQUIRE(at(pids[0]) < static_cast<std::ptrdiff_t>(all.size()));
  REQUIRE(at(pids[1]) < static_cast<std::ptrdiff_t>(all.size()));
  CHECK(at(child) < at(pids[0]));
  CHECK(at(pids[0]) < at(pids[1]));
  for (pid_t p : {pids[1], pids[0], child}) ::kill(p, SIGKILL);
  CHECK(testing::WaitPid(child).has_value());
  for (pid_t p : pids) (void)testing::WaitPid(p);  // ours if this process is a subreaper
}

}  // namespace
}  // namespace tether::supervisor
