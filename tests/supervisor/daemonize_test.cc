#include "supervisor/daemonize.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <doctest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/supervisor/test_util.h"

namespace tether::supervisor {
namespace {

// What the daemon saw of itself, one "key=value" line each.
std::string SelfReport(pid_t caller_sid) {
  std::string r;
  absl::StrAppend(&r, "own_session=", ::getsid(0) != caller_sid, "\n");
  absl::StrAppend(&r, "session_leader=", ::getsid(0) == ::getpid(), "\n");
  char cwd[256] = {};
  absl::StrAppend(&r, "cwd=", ::getcwd(cwd, sizeof cwd) ? cwd : "?", "\n");
  struct stat in {}, null {};
  ::fstat(0, &in);
  ::stat("/dev/null", &null);
  absl::StrAppend(&r, "stdin_null=", in.st_rdev == null.st_rdev && S_ISCHR(in.st_mode), "\n");
  std::string fds;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    const int fd = std::stoi(e.path().filename().string());
    if (fd > 2) absl::StrAppend(&fds, fds.empty() ? "" : ",", fd);
  }
  absl::StrAppend(&r, "fds=", fds, "\n");
  struct sigaction sa {};
  ::sigaction(SIGPIPE, nullptr, &sa);
  absl::StrAppend(&r, "sigpipe_ignored=", sa.sa_handler == SIG_IGN, "\n");
  return r;
}

TEST_CASE("Daemonize detaches a grandchild: own session, not its leader, cwd /, stdio null, only kept fds") {
  int pipefd[2];
  REQUIRE(::pipe(pipefd) == 0);  // no CLOEXEC: kept only because it is named
  const int stray = ::open("/dev/null", O_RDONLY);  // not named: must be closed
  REQUIRE(stray >= 0);
  const pid_t caller = ::fork();
  REQUIRE(caller >= 0);
  if (caller == 0) {
    // The caller's role: run Daemonize, and report from the daemon.
    ::close(pipefd[0]);
    const pid_t sid = ::getsid(0);
    switch (Daemonize({.keep = {pipefd[1]}})) {
      case Forked::kDaemon: {
        const std::string r = SelfReport(sid) + absl::StrCat("kept=", pipefd[1], "\n");
        (void)!::write(pipefd[1], r.data(), r.size());
        ::_exit(0);
      }
      case Forked::kCaller:
        ::_exit(0);
      case Forked::kFailed:
        ::_exit(3);
    }
  }
  ::close(pipefd[1]);
  ::close(stray);
  const std::optional<int> st = testing::WaitPid(caller);
  REQUIRE(st.has_value());
  CHECK(WIFEXITED(*st));
  CHECK(WEXITSTATUS(*st) == 0);
  const std::string report = testing::ReadToEof(pipefd[0]).value_or("");
  ::close(pipefd[0]);
  CHECK(testing::Contains(report, "own_session=1\n"));
  CHECK(testing::Contains(report, "session_leader=0\n"));  // cannot acquire a controlling terminal
  CHECK(testing::Contains(report, "cwd=/\n"));
  CHECK(testing::Contains(report, "stdin_null=1\n"));
  CHECK(testing::Contains(report, "sigpipe_ignored=1\n"));
  // Only the kept pipe, besides the descriptor of the /proc/self/fd listing.
  const auto value = [&](const std::string& key) {
    const std::size_t at = report.find(key + "=") + key.size() + 1;
    return report.substr(at, report.find('\n', at) - at);
  };
  CAPTURE(report);
  const std::vector<std::string> fds = absl::StrSplit(value("fds"), ',', absl::SkipEmpty());
  CHECK(std::count(fds.begin(), fds.end(), value("kept")) == 1);
  CHECK(fds.size() <= 2);
}

TEST_CASE("CloseFdsExcept keeps exactly the named descriptors") {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int a = ::open("/dev/null", O_RDONLY), b = ::open("/dev/null", O_RDONLY),
              c = ::open("/dev/null", O_RDONLY);
    CloseFdsExcept({c, a});
    const bool ok = ::fcntl(a, F_GETFD) >= 0 && ::fcntl(b, F_GETFD) < 0 && ::fcntl(c, F_GETFD) >= 0 &&
                    ::fcntl(0, F_GETFD) >= 0;
    ::_exit(ok ? 0 : 1);
  }
  const std::optional<int> st = testing::WaitPid(pid);
  REQUIRE(st.has_value());
  CHECK(WIFEXITED(*st));
  CHECK(WEXITSTATUS(*st) == 0);
}

}  // namespace
}  // namespace tether::supervisor
