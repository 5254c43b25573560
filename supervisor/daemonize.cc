#include "supervisor/daemonize.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace tether::supervisor {
namespace {

constexpr int kFallbackMaxFd = 65536;  // without close_range: RLIMIT_NOFILE's usual hard cap

void CloseRange(int from, int to) {  // [from, to]
  if (from > to) return;
#ifdef SYS_close_range
  if (::syscall(SYS_close_range, static_cast<unsigned>(from), static_cast<unsigned>(to), 0) == 0) return;
#endif
  for (int fd = from; fd <= std::min(to, kFallbackMaxFd); ++fd) ::close(fd);
}

}  // namespace

void CloseFdsExcept(std::vector<int> keep) {
  std::sort(keep.begin(), keep.end());
  int from = 3;
  for (int fd : keep) {
    if (fd < from) continue;
    CloseRange(from, fd - 1);
    from = fd + 1;
  }
  CloseRange(from, ~0U >> 1);
}

Forked Daemonize(const DaemonizeOptions& options) {
  const pid_t p = ::fork();
  if (p < 0) return Forked::kFailed;
  if (p > 0) {
    int st = 0;
    while (::waitpid(p, &st, 0) < 0 && errno == EINTR) {
    }
    // Status 1: its fork failed. (Killed by a signal, it may have forked
    // first: then the caller's connect to the daemon tells.)
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 1) return Forked::kCaller;
    errno = EAGAIN;
    return Forked::kFailed;
  }
  ::setsid();  // leave the exec call's session: its hangup never reaches us
  const pid_t daemon = ::fork();
  if (daemon != 0) ::_exit(daemon > 0 ? 0 : 1);
  const int null = ::open("/dev/null", O_RDWR);
  ::dup2(null, 0);
  ::dup2(null, 1);
  ::dup2(null, 2);
  if (null > 2) ::close(null);
  CloseFdsExcept(options.keep);
  (void)!::chdir("/");
  if (options.subreaper) ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  ::signal(SIGPIPE, SIG_IGN);
  ::signal(SIGHUP, SIG_IGN);
  return Forked::kDaemon;
}

}  // namespace tether::supervisor
