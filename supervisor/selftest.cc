#include "supervisor/selftest.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "supervisor/proc.h"
#include "supervisor/state_dir.h"

namespace tether::supervisor {
namespace {

std::int64_t NowMs() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::int64_t{ts.tv_sec} * 1000 + ts.tv_nsec / 1000000;
}

SelftestCheck Ok(std::string name, std::string detail) { return {true, std::move(name), std::move(detail)}; }
SelftestCheck Missing(std::string name, std::string detail) { return {false, std::move(name), std::move(detail)}; }

std::string ErrnoText(const char* what, int err) { return absl::StrCat(what, ": ", std::strerror(err)); }

// waitpid with a deadline; on timeout the child is killed and reaped. nullopt
// on timeout or when waitpid fails (errno kept in *err).
std::optional<int> WaitFor(pid_t pid, int timeout_ms, int* err) {
  const std::int64_t deadline = NowMs() + timeout_ms;
  while (true) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) {
      *err = errno;
      return std::nullopt;
    }
    if (NowMs() >= deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      *err = ETIMEDOUT;
      return std::nullopt;
    }
    const timespec tick{0, 5 * 1000 * 1000};
    ::nanosleep(&tick, nullptr);
  }
}

// Waits up to timeout_ms for `fd` to be readable and reads one byte; -1 if none.
int ReadByte(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  int r;
  do {
    r = ::poll(&p, 1, timeout_ms);
  } while (r < 0 && errno == EINTR);
  if (r <= 0) return -1;
  unsigned char c;
  ssize_t n;
  do {
    n = ::read(fd, &c, 1);
  } while (n < 0 && errno == EINTR);
  return n == 1 ? c : -1;
}

// In a forked child: default signal dispositions and mask, stdio on /dev/null.
void ChildReset() {
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::signal(SIGTERM, SIG_DFL);
  ::signal(SIGPIPE, SIG_DFL);
  const int null = ::open("/dev/null", O_RDWR);
  if (null >= 0) {
    for (int fd = 0; fd < 3; ++fd) ::dup2(null, fd);
    if (null > 2) ::close(null);
  }
}

// Runs argv[0] with argv; its exit status, or the exec's errno in *exec_err
// (0 when it ran), or a wait failure in *wait_err.
struct SpawnResult {
  int exec_err = 0;  // errno of a failed fork or exec
  int wait_err = 0;  // ETIMEDOUT, ...
  int status = 0;    // waitpid status when both are 0
};

SpawnResult Spawn(const std::vector<std::string>& args) {
  SpawnResult res;
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    res.exec_err = errno;
    return res;
  }
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    res.exec_err = errno;
    ::close(report[0]);
    ::close(report[1]);
    return res;
  }
  if (pid == 0) {
    ::close(report[0]);
    ChildReset();
    ::execv(argv[0], argv.data());
    const int e = errno;
    (void)!::write(report[1], &e, sizeof e);
    ::_exit(127);
  }
  ::close(report[1]);
  int e = 0;
  ssize_t n;
  do {
    n = ::read(report[0], &e, sizeof e);  // EOF once the exec succeeded (close-on-exec)
  } while (n < 0 && errno == EINTR);
  ::close(report[0]);
  if (n == static_cast<ssize_t>(sizeof e)) res.exec_err = e;
  std::optional<int> status = WaitFor(pid, kSelftestChildTimeoutMs, &res.wait_err);
  if (status) res.status = *status;
  return res;
}

std::string DescribeStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("killed by signal ", WTERMSIG(status));
  return absl::StrCat("wait status ", status);
}

// Copies `from` to a new file `to` (mode 0700). 0 or an errno.
int CopyFile(const std::string& from, const std::string& to) {
  const int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return errno;
  const int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0700);
  if (out < 0) {
    const int e = errno;
    ::close(in);
    return e;
  }
  int err = 0;
  char buf[64 * 1024];
  while (true) {
    const ssize_t n = ::read(in, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) err = errno;
    if (n <= 0) break;
    for (ssize_t off = 0; off < n && err == 0;) {
      const ssize_t w = ::write(out, buf + off, static_cast<std::size_t>(n - off));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) err = errno;
      if (w > 0) off += w;
    }
    if (err) break;
  }
  if (::close(out) != 0 && err == 0) err = errno;
  ::close(in);
  return err;
}

// The steps inside a usable-looking root: a socket, then an exec. Empty
// when both work, else the refusal.
std::string TryInside(const std::string& root, const std::string& exe) {
  const std::string dir = absl::StrCat(root, "/selftest-", ::getpid());
  if (::mkdir(dir.c_str(), 0700) != 0) {
    const int e = errno;
    return absl::StrCat(RefusalReason(e), " (mkdir ", dir, ")");
  }
  std::string refused;
  absl::StatusOr<int> sock = ListenInDir(dir);
  if (!sock.ok()) {
    refused = absl::StrCat("cannot bind a Unix socket (", sock.status().message(), ")");
  } else {
    ::close(*sock);
    const std::string copy = dir + "/exe";
    if (const int e = CopyFile(exe, copy); e != 0) {
      refused = absl::StrCat(RefusalReason(e), " (copying ", exe, " there: ", std::strerror(e), ")");
    } else {
      SpawnResult r = Spawn({copy, "--version"});
      if (r.exec_err == ENOEXEC) {
        // The mount let the kernel try, but it cannot load this binary
        // itself (run through an emulator such as qemu-user, without
        // binfmt_misc): a script tells whether files there can run.
        const std::string script = dir + "/exe.sh";
        const int fd = ::open(script.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0700);
        if (fd >= 0) {
          constexpr char kScript[] = "#!/bin/sh\nexit 0\n";
          const bool written = ::write(fd, kScript, sizeof kScript - 1) == static_cast<ssize_t>(sizeof kScript - 1);
          ::close(fd);
          if (written) r = Spawn({script});
          ::unlink(script.c_str());
        }
      }
      struct statvfs vfs;
      const bool noexec_mount = ::statvfs(dir.c_str(), &vfs) == 0 && (vfs.f_flag & ST_NOEXEC);
      if (r.exec_err == EACCES && noexec_mount) {
        refused = "noexec";
      } else if (r.exec_err != 0) {
        refused = absl::StrCat("cannot execute a file there (", std::strerror(r.exec_err), ")");
      } else if (r.wait_err != 0) {
        refused = absl::StrCat("a file executed there did not finish (", std::strerror(r.wait_err), ")");
      } else if (!WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0) {
        refused = absl::StrCat("a file executed there ", DescribeStatus(r.status));
      }
      ::unlink(copy.c_str());
    }
    ::unlink((dir + "/" + kSocketName).c_str());
  }
  ::rmdir(dir.c_str());
  return refused;
}

}  // namespace

std::string FormatCheck(const SelftestCheck& check) {
  return absl::StrCat(check.ok ? "ok " : "missing ", check.name, ": ", check.detail);
}

int SelftestExitStatus(const std::vector<SelftestCheck>& checks) {
  for (const SelftestCheck& c : checks) {
    if (!c.ok) return 1;
  }
  return 0;
}

std::optional<std::string> EnvValue(const std::vector<std::string>& env, std::string_view name) {
  for (const std::string& kv : env) {
    if (kv.size() > name.size() && kv[name.size()] == '=' && std::string_view(kv).starts_with(name)) {
      return kv.substr(name.size() + 1);
    }
  }
  return std::nullopt;
}

std::vector<std::string> CandidateRoots(const std::optional<std::string>& tmpdir,
                                        const std::optional<std::string>& home) {
  std::vector<std::string> out;
  const auto add = [&out](std::string p) {
    while (p.size() > 1 && p.back() == '/') p.pop_back();
    for (const std::string& have : out) {
      if (have == p) return;
    }
    out.push_back(std::move(p));
  };
  if (tmpdir && tmpdir->starts_with('/')) add(*tmpdir);
  add("/tmp");
  add("/var/tmp");
  add("/dev/shm");
  if (home && home->starts_with('/')) {
    std::string h = *home;
    while (!h.empty() && h.back() == '/') h.pop_back();
    add(absl::StrCat(h, "/.cache"));
  }
  return out;
}

std::string RefusalReason(int err) {
  switch (err) {
    case EROFS:
      return "read-only";
    case ENOSPC:
    case EDQUOT:
      return "no space";
    case EACCES:
    case EPERM:
      return "not writable by us (permission denied)";
    case ENOENT:
      return "does not exist";
    case ENOTDIR:
      return "not a directory";
    default:
      return std::strerror(err);
  }
}

SelftestCheck PrivateDirCheck(const std::vector<RootVerdict>& tried) {
  std::vector<std::string> refusals;
  for (const RootVerdict& v : tried) {
    if (!v.refused.empty()) refusals.push_back(absl::StrCat(v.candidate, ": ", v.refused));
  }
  const std::string why = absl::StrJoin(refusals, "; ");
  if (!tried.empty() && tried.back().refused.empty()) {
    const std::string& root = tried.back().root;
    return Ok("private-dir", refusals.empty() ? root : absl::StrCat(root, " (refused: ", why, ")"));
  }
  return Missing("private-dir",
                 absl::StrCat("no candidate can hold the private directory: ", tried.empty() ? "none tried" : why,
                              " (make /tmp, or the directory TMPDIR names, a writable mount without noexec; "
                              "or install the supervisor where it can run and give it such a directory)"));
}

RootVerdict ProbeRoot(const std::string& candidate, const std::string& exe) {
  RootVerdict v;
  v.candidate = candidate;
  v.root = absl::StrCat(candidate == "/" ? "" : candidate, "/tether-", ::geteuid());
  struct stat st;
  if (::stat(candidate.c_str(), &st) != 0) {
    v.refused = RefusalReason(errno);
    return v;
  }
  if (!S_ISDIR(st.st_mode)) {
    v.refused = "not a directory";
    return v;
  }
  bool made = false;
  if (::lstat(v.root.c_str(), &st) != 0) {
    if (errno != ENOENT) {
      v.refused = ErrnoText("lstat", errno);
      return v;
    }
    const mode_t old = ::umask(077);
    const int rc = ::mkdir(v.root.c_str(), 0700);
    const int e = errno;
    ::umask(old);
    if (rc != 0) {
      v.refused = RefusalReason(e);
      return v;
    }
    made = true;
    if (::lstat(v.root.c_str(), &st) != 0) {
      v.refused = ErrnoText("lstat", errno);
      return v;
    }
  }
  const std::string base = v.root.substr(v.root.find_last_of('/') + 1);
  if (S_ISLNK(st.st_mode)) {
    v.refused = absl::StrCat(base, " is a symlink");
  } else if (!S_ISDIR(st.st_mode)) {
    v.refused = absl::StrCat(base, " is not a directory");
  } else if (st.st_uid != ::geteuid()) {
    v.refused = absl::StrCat(base, " is owned by uid ", st.st_uid, ", not by us");
  } else if ((st.st_mode & 0777) != 0700 && ::chmod(v.root.c_str(), 0700) != 0) {
    v.refused = absl::StrCat(base, " has mode 0", absl::Hex(st.st_mode & 0777), " and chmod 0700 failed (",
                             RefusalReason(errno), ")");
  } else {
    v.refused = TryInside(v.root, exe);
  }
  if (made) ::rmdir(v.root.c_str());
  return v;
}

SelftestCheck CheckProc() {
  constexpr char kWhat[] = " (mount procfs at /proc: the supervisor finds its own binary and its children there)";
  const int fd = ::open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Missing("proc", absl::StrCat(ErrnoText("open /proc/self/stat", errno), kWhat));
  char buf[1024];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  const int e = errno;
  ::close(fd);
  if (n < 0) return Missing("proc", absl::StrCat(ErrnoText("read /proc/self/stat", e), kWhat));
  const std::optional<ProcStat> stat = ParseProcStat(std::string_view(buf, static_cast<std::size_t>(n)));
  if (!stat) return Missing("proc", absl::StrCat("/proc/self/stat is not a proc(5) stat line", kWhat));
  char exe[4096];
  const ssize_t len = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len < 0) return Missing("proc", absl::StrCat(ErrnoText("readlink /proc/self/exe", errno), kWhat));
  const int efd = ::open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
  if (efd < 0) return Missing("proc", absl::StrCat(ErrnoText("open /proc/self/exe", errno), kWhat));
  ::close(efd);
  return Ok("proc", absl::StrCat("/proc/self/stat parsed, /proc/self/exe -> ",
                                 std::string(exe, static_cast<std::size_t>(len))));
}

SelftestCheck CheckPty() {
  constexpr char kWhat[] =
      " (mount devpts at /dev/pts and make /dev/ptmx reach it, e.g. a symlink to pts/ptmx; only --pty needs it)";
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0) return Missing("pty", absl::StrCat(ErrnoText("posix_openpt", errno), kWhat));
  char name[128];
  std::string fail;
  if (::grantpt(master) != 0) {
    fail = ErrnoText("grantpt", errno);
  } else if (::unlockpt(master) != 0) {
    fail = ErrnoText("unlockpt", errno);
  } else if (::ptsname_r(master, name, sizeof name) != 0) {
    fail = ErrnoText("ptsname", errno);
  } else {
    const int slave = ::open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (slave < 0) {
      fail = ErrnoText(absl::StrCat("open ", name).c_str(), errno);
    } else {
      ::close(slave);
    }
  }
  ::close(master);
  if (!fail.empty()) return Missing("pty", absl::StrCat(fail, kWhat));
  return Ok("pty", absl::StrCat("opened a pty pair (", name, ")"));
}

SelftestCheck CheckSubreaper() {
  constexpr char kWhat[] =
      " (the supervisor adopts what its child leaves behind: Linux >= 3.4, no seccomp filter refusing prctl; "
      "qemu-user does not pass it on)";
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    return Missing("subreaper", absl::StrCat(ErrnoText("prctl(PR_SET_CHILD_SUBREAPER)", errno), kWhat));
  }
  // Seen working: an orphaned grandchild is reparented to us. The middle
  // child writes the grandchild's pid, then exits; the grandchild writes 'y'
  // or 'n' once its parent has changed.
  const pid_t self = ::getpid();
  int pipefd[2];
  std::string fail;
  if (::pipe2(pipefd, O_CLOEXEC) != 0) {
    fail = ErrnoText("pipe", errno);
  } else {
    const pid_t middle = ::fork();
    if (middle == 0) {
      ::close(pipefd[0]);
      const pid_t grandchild = ::fork();
      if (grandchild == 0) {
        const pid_t first = ::getppid();
        for (int i = 0; i < 400 && ::getppid() == first; ++i) ::usleep(5000);
        const char verdict = ::getppid() == self ? 'y' : 'n';
        (void)!::write(pipefd[1], &verdict, 1);
        ::_exit(0);
      }
      (void)!::write(pipefd[1], &grandchild, sizeof grandchild);
      ::_exit(0);
    }
    ::close(pipefd[1]);
    if (middle < 0) {
      fail = ErrnoText("fork", errno);
    } else {
      int err = 0;
      (void)WaitFor(middle, kSelftestChildTimeoutMs, &err);
      pid_t grandchild = 0;
      bool have_pid = true;
      for (std::size_t i = 0; i < sizeof grandchild && have_pid; ++i) {
        const int b = ReadByte(pipefd[0], kSelftestChildTimeoutMs);
        have_pid = b >= 0;
        reinterpret_cast<unsigned char*>(&grandchild)[i] = static_cast<unsigned char>(b);
      }
      const int verdict = have_pid && grandchild > 0 ? ReadByte(pipefd[0], kSelftestChildTimeoutMs) : -1;
      if (verdict != 'y') fail = "an orphaned grandchild was not reparented to us";
      // Reparented, it is ours to reap; it exits right after its verdict.
      if (verdict == 'y') (void)WaitFor(grandchild, kSelftestChildTimeoutMs, &err);
    }
    ::close(pipefd[0]);
  }
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
  if (!fail.empty()) return Missing("subreaper", absl::StrCat(fail, kWhat));
  return Ok("subreaper", "PR_SET_CHILD_SUBREAPER set, an orphaned grandchild was reparented to us");
}

SelftestCheck CheckSignals() {
  constexpr char kWhat[] = " (signals to children must reach them and be reported: check the sandbox's seccomp "
                           "profile and that the process is not traced)";
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return Missing("signals", absl::StrCat(ErrnoText("pipe", errno), kWhat));
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(ready[0]);
    ChildReset();
    const char c = 'r';
    (void)!::write(ready[1], &c, 1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  if (pid < 0) {
    const int e = errno;
    ::close(ready[0]);
    return Missing("signals", absl::StrCat(ErrnoText("fork", e), kWhat));
  }
  const int got = ReadByte(ready[0], kSelftestChildTimeoutMs);
  ::close(ready[0]);
  std::string fail;
  if (got != 'r') fail = "the child did not start";
  if (fail.empty() && ::kill(pid, SIGTERM) != 0) fail = ErrnoText("kill(SIGTERM)", errno);
  if (!fail.empty()) ::kill(pid, SIGKILL);
  int err = 0;
  const std::optional<int> status = WaitFor(pid, kSelftestChildTimeoutMs, &err);
  if (fail.empty()) {
    if (!status) {
      fail = absl::StrCat("waitpid after SIGTERM: ", std::strerror(err));
    } else if (!WIFSIGNALED(*status) || WTERMSIG(*status) != SIGTERM) {
      fail = absl::StrCat("a child sent SIGTERM was reported as ", DescribeStatus(*status));
    }
  }
  if (!fail.empty()) return Missing("signals", absl::StrCat(fail, kWhat));
  return Ok("signals", "SIGTERM to a child reported by waitpid");
}

SelftestCheck CheckShell(const std::string& shell) {
  const SpawnResult r = Spawn({shell, "-c", "exit 7"});
  const std::string what = absl::StrCat(" (install a POSIX shell at ", shell, ": the host's setup commands run it)");
  if (r.exec_err == ENOENT) return Missing("exec", absl::StrCat(shell, " not found", what));
  if (r.exec_err != 0) {
    return Missing("exec", absl::StrCat(ErrnoText(absl::StrCat("fork/exec ", shell).c_str(), r.exec_err), what));
  }
  if (r.wait_err != 0) {
    return Missing("exec", absl::StrCat(shell, " -c 'exit 7': ", std::strerror(r.wait_err), what));
  }
  if (!WIFEXITED(r.status) || WEXITSTATUS(r.status) != 7) {
    return Missing("exec", absl::StrCat(shell, " -c 'exit 7' ", DescribeStatus(r.status), what));
  }
  return Ok("exec", absl::StrCat("fork and exec of ", shell, " -c 'exit 7' exited 7"));
}

std::vector<SelftestCheck> RunSelftest(const std::vector<std::string>& env) {
  // Children are ours to wait for, whatever disposition we inherited.
  ::signal(SIGCHLD, SIG_DFL);
  std::vector<SelftestCheck> out;
  out.push_back(CheckProc());
  out.push_back(CheckPty());
  // The file to execute from the private directory: a copy of this binary
  // (through /proc when it can be read, else of /bin/true).
  std::string exe = "/proc/self/exe";
  if (::access(exe.c_str(), R_OK) != 0) exe = "/bin/true";
  std::vector<RootVerdict> tried;
  for (const std::string& c : CandidateRoots(EnvValue(env, "TMPDIR"), EnvValue(env, "HOME"))) {
    tried.push_back(ProbeRoot(c, exe));
    if (tried.back().refused.empty()) break;
  }
  out.push_back(PrivateDirCheck(tried));
  out.push_back(CheckSubreaper());
  out.push_back(CheckSignals());
  out.push_back(CheckShell("/bin/sh"));
  return out;
}

int SelftestMain(const protocol::SelftestCommand&, const std::vector<std::string>& env) {
  const std::vector<SelftestCheck> checks = RunSelftest(env);
  for (const SelftestCheck& c : checks) std::printf("%s\n", FormatCheck(c).c_str());
  std::fflush(stdout);
  return SelftestExitStatus(checks);
}

}  // namespace tether::supervisor
