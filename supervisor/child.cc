#include "supervisor/child.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tether::supervisor {
namespace {

absl::Status FromErrno(int err, const std::string& what) {
  const std::string msg = absl::StrCat(what, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(msg);
    case EMFILE:
    case ENFILE:
    case ENOMEM:
    case EAGAIN:
    case ENOSPC:
      // Out of descriptors, memory or processes: the sandbox's limits, not
      // the command's fault (never a 126/127 exit).
      return absl::ResourceExhaustedError(msg);
    default:
      return absl::FailedPreconditionError(msg);
  }
}

bool IsExecutableFile(const std::string& path, int* err) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    *err = errno;
    return false;
  }
  if (S_ISDIR(st.st_mode)) {
    *err = EACCES;
    return false;
  }
  if (::access(path.c_str(), X_OK) != 0) {
    *err = errno;
    return false;
  }
  return true;
}

std::string EnvValue(const std::vector<std::string>& env, const std::string& name) {
  for (const std::string& e : env) {
    if (e.size() > name.size() && e[name.size()] == '=' && e.compare(0, name.size(), name) == 0) {
      return e.substr(name.size() + 1);
    }
  }
  return {};
}

void CloseFrom(int lowfd) {
#ifdef SYS_close_range
  if (::syscall(SYS_close_range, lowfd, ~0U, 0) == 0) return;
#endif
  long max = ::sysconf(_SC_OPEN_MAX);
  if (max < 0 || max > 65536) max = 65536;
  for (int fd = lowfd; fd < max; ++fd) ::close(fd);
}

// In the forked child: only async-signal-safe calls until exec.
[[noreturn]] void ExecChild(const ChildSpec& spec, char* const* argv, char* const* envp,
                            int in_fd, int out_fd, int err_fd, int report_fd) {
  auto fail = [report_fd](int stage) {
    const int e[2] = {stage, errno};
    (void)!::write(report_fd, e, sizeof(e));
    ::_exit(127);
  };
  ::setsid();
  // A pty slave becomes the controlling terminal of the new session.
  if (spec.pty && ::ioctl(in_fd, TIOCSCTTY, 0) != 0) fail(0);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig = 1; sig < NSIG; ++sig) ::signal(sig, SIG_DFL);
  if (::dup2(in_fd, 0) < 0 || ::dup2(out_fd, 1) < 0 || ::dup2(err_fd, 2) < 0) fail(0);
  if (report_fd < 3) fail(0);  // cannot happen: fds 0..2 are taken by /dev/null in the daemon
  // Everything else, including our own fds, must not leak into the child; the
  // report fd is close-on-exec.
  for (int fd = 3; fd < report_fd; ++fd) ::close(fd);
  CloseFrom(report_fd + 1);
  if (!spec.cwd.empty() && ::chdir(spec.cwd.c_str()) != 0) fail(1);
  ::execve(spec.path.c_str(), argv, envp);
  fail(2);
  ::_exit(127);
}

}  // namespace

namespace {

// The environment boundary's rules (child.h lists them): a pattern on the
// upper-cased name and why what it matches is scrubbed. A scrubbed variable
// the child needs is passed explicitly (Launch.env, `--env`).
enum class Match {
  kContains,  // anywhere in the name
  kWord,      // a whole word, words being split at anything but A-Z and 0-9
  kPrefix,
  kExact,
};
struct ScrubRule {
  Match match;
  std::string_view pattern;
  std::string_view why;
};
constexpr ScrubRule kScrubRules[] = {
    {Match::kContains, "KEY", "API, access and signing keys: API_KEY, AWS_ACCESS_KEY_ID, STRIPE_KEY"},
    {Match::kContains, "SECRET", "client and signing secrets: AZURE_CLIENT_SECRET, JWT_SECRET"},
    {Match::kContains, "TOKEN", "bearer and session tokens: GITHUB_TOKEN, AWS_SESSION_TOKEN"},
    {Match::kContains, "PASSW", "passwords: DB_PASSWORD, PGPASSWORD, MYSQL_PASSWD"},
    {Match::kContains, "PASSPHRASE", "passphrases of keys: GPG_PASSPHRASE"},
    {Match::kContains, "PASSFILE", "names a file of passwords: PGPASSFILE"},
    {Match::kContains, "CREDENTIAL",
     "credentials, or the file holding them: GOOGLE_APPLICATION_CREDENTIALS, AWS_SHARED_CREDENTIALS_FILE"},
    {Match::kContains, "AUTH",
     "authentication agents, configs and cookies: SSH_AUTH_SOCK (an agent that signs with our keys), "
     "DOCKER_AUTH_CONFIG, NPM_CONFIG__AUTH, XAUTHORITY (the X11 cookie file)"},
    {Match::kContains, "PRIVATE", "private keys and tokens: SIGNING_PRIVATE_KEY, GITLAB_PRIVATE_TOKEN"},
    {Match::kContains, "COOKIE", "session cookies and cookie jars"},
    {Match::kContains, "DATABASE_URL", "a database's address usually with its credentials: DATABASE_URL"},
    {Match::kContains, "CONNECTION_STRING",
     "connection strings carry account keys: AZURE_STORAGE_CONNECTION_STRING"},
    {Match::kWord, "PASS", "short for password: SMTP_PASS, DB_PASS"},
    {Match::kWord, "PWD", "short for password: MYSQL_PWD (PWD itself is exempt)"},
    {Match::kWord, "PW", "short for password: DB_PW"},
    {Match::kWord, "PAT", "personal access tokens: GH_PAT, AZURE_DEVOPS_PAT"},
    {Match::kWord, "DSN", "data source names embed keys or passwords: SENTRY_DSN"},
    {Match::kPrefix, "AWS_", "AWS credentials and what selects them: AWS_PROFILE, AWS_ROLE_ARN"},
    {Match::kPrefix, "AZURE_", "Azure credentials and what selects them: AZURE_CLIENT_ID"},
    {Match::kPrefix, "TETHER_", "the supervisor's own configuration"},
    {Match::kExact, "KUBECONFIG", "names a file of cluster credentials"},
    {Match::kExact, "DOCKER_CONFIG", "names the directory of registry credentials (config.json)"},
};

// Names a rule matches that are not credentials.
constexpr std::string_view kNeverScrubbed[] = {
    "PWD",  // the shell's working directory (the PWD word rule)
    "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_AUTHOR_DATE",  // git's identity (the AUTH rule)
};

bool HasWord(std::string_view upper, std::string_view word) {
  const auto is_word_char = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); };
  std::size_t i = 0;
  while (i < upper.size()) {
    while (i < upper.size() && !is_word_char(upper[i])) ++i;
    std::size_t j = i;
    while (j < upper.size() && is_word_char(upper[j])) ++j;
    if (j > i && upper.substr(i, j - i) == word) return true;
    i = j;
  }
  return false;
}

bool Matches(const ScrubRule& r, std::string_view upper) {
  switch (r.match) {
    case Match::kContains:
      return upper.find(r.pattern) != std::string_view::npos;
    case Match::kWord:
      return HasWord(upper, r.pattern);
    case Match::kPrefix:
      return upper.substr(0, r.pattern.size()) == r.pattern;
    case Match::kExact:
      return upper == r.pattern;
  }
  return false;
}

}  // namespace

bool IsCredentialShaped(std::string_view name) {
  const std::string upper = absl::AsciiStrToUpper(std::string(name));
  for (std::string_view exempt : kNeverScrubbed) {
    if (upper == exempt) return false;
  }
  for (const ScrubRule& r : kScrubRules) {
    if (Matches(r, upper)) return true;
  }
  return false;
}

bool HasUrlPassword(std::string_view value) {
  for (std::size_t at = value.find("://"); at != std::string_view::npos; at = value.find("://", at + 3)) {
    // The authority runs to the first of "/?#"; its userinfo to the '@'. A
    // raw '@' in the password makes the first '@' end the userinfo early,
    // which still leaves a password before it.
    const std::string_view rest = value.substr(at + 3);
    const std::size_t end = rest.find_first_of("/?#@ \t\r\n");
    if (end == std::string_view::npos || rest[end] != '@') continue;
    const std::size_t colon = rest.substr(0, end).find(':');
    if (colon != std::string_view::npos && colon + 1 < end) return true;
  }
  return false;
}

absl::StatusOr<std::vector<std::string>> BuildEnvironment(
    const google::protobuf::RepeatedPtrField<wire::EnvVar>& requested, bool inherit,
    char** ambient) {
  std::map<std::string, std::string> env;
  if (inherit && ambient != nullptr) {
    for (char** e = ambient; *e != nullptr; ++e) {
      std::string_view kv(*e);
      const std::size_t eq = kv.find('=');
      if (eq == std::string_view::npos || eq == 0) continue;
      std::string name(kv.substr(0, eq));
      if (IsCredentialShaped(name) || HasUrlPassword(kv.substr(eq + 1))) continue;
      env[name] = std::string(kv.substr(eq + 1));
    }
  }
  for (const wire::EnvVar& v : requested) {
    if (v.name().empty()) return absl::InvalidArgumentError("environment: empty variable name");
    if (v.name().find('=') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("environment: name '", v.name(), "' contains '='"));
    }
    if (v.name().find('\0') != std::string::npos || v.value().find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("environment: variable '", absl::CEscape(v.name()), "' contains NUL"));
    }
    env[v.name()] = v.value();
  }
  std::vector<std::string> out;
  out.reserve(env.size());
  for (auto& [k, v] : env) out.push_back(absl::StrCat(k, "=", v));
  return out;
}

absl::StatusOr<std::string> ResolveExecutable(const std::string& name,
                                              const std::vector<std::string>& env,
                                              const std::string& cwd, bool allow_relative) {
  if (name.empty()) return absl::InvalidArgumentError("argv[0] is empty");
  int err = 0;
  if (name[0] == '/') {
    if (IsExecutableFile(name, &err)) return name;
    return FromErrno(err, absl::StrCat("cannot run '", name, "'"));
  }
  if (name.find('/') != std::string::npos) {
    if (!allow_relative) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", name, "' is a relative path; pass an absolute path or a bare name from PATH"));
    }
    std::string base = cwd;
    if (base.empty()) {
      char buf[4096];
      if (::getcwd(buf, sizeof(buf)) == nullptr) return FromErrno(errno, "getcwd");
      base = buf;
    }
    std::string full = absl::StrCat(base, "/", name);
    if (IsExecutableFile(full, &err)) return full;
    return FromErrno(err, absl::StrCat("cannot run '", full, "'"));
  }
  std::string path = EnvValue(env, "PATH");
  if (path.empty()) path = kDefaultPath;
  int first_err = ENOENT;
  for (absl::string_view dir : absl::StrSplit(path, ':')) {
    if (dir.empty()) continue;  // an empty entry would mean cwd; never implied
    std::string full = absl::StrCat(dir, "/", name);
    if (IsExecutableFile(full, &err)) return full;
    if (err == EACCES && first_err == ENOENT) first_err = EACCES;
  }
  return FromErrno(first_err, absl::StrCat("cannot run '", name, "': not found in PATH=", path));
}

absl::Status ResizePty(int master_fd, unsigned cols, unsigned rows) {
  if (cols == 0 || rows == 0 || cols > kMaxPtyCells || rows > kMaxPtyCells) {
    return absl::InvalidArgumentError(absl::StrCat("terminal size ", cols, "x", rows, " is outside 1..",
                                                   kMaxPtyCells));
  }
  struct winsize ws {};
  ws.ws_col = static_cast<unsigned short>(cols);
  ws.ws_row = static_cast<unsigned short>(rows);
  if (::ioctl(master_fd, TIOCSWINSZ, &ws) != 0) return FromErrno(errno, "TIOCSWINSZ");
  return absl::OkStatus();
}

namespace {

// Reads the child's report pipe (closed by a successful exec) and closes it:
// OK once exec succeeded, else why it failed (stage and errno from ExecChild).
absl::Status AwaitExec(int report_fd, const ChildSpec& spec) {
  int failure[2];
  ssize_t n;
  do {
    n = ::read(report_fd, failure, sizeof(failure));
  } while (n < 0 && errno == EINTR);
  ::close(report_fd);
  if (n != static_cast<ssize_t>(sizeof(failure))) return absl::OkStatus();
  static constexpr const char* kStage[] = {"set up stdio or the terminal for", "chdir to", "exec"};
  const std::string target = failure[0] == 1 ? spec.cwd : spec.path;
  return FromErrno(failure[1], absl::StrCat("cannot ", kStage[failure[0] % 3], " '", target, "'"));
}

// Opens a pty pair: master (non-blocking, close-on-exec) and slave.
absl::Status OpenPty(const ChildSpec& spec, int* master, int* slave) {
  *master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (*master < 0) return FromErrno(errno, "posix_openpt");
  char name[128];
  if (::grantpt(*master) != 0 || ::unlockpt(*master) != 0 || ::ptsname_r(*master, name, sizeof(name)) != 0) {
    const int e = errno;
    ::close(*master);
    return FromErrno(e, "pty setup");
  }
  *slave = ::open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (*slave < 0) {
    const int e = errno;
    ::close(*master);
    return FromErrno(e, absl::StrCat("open ", name));
  }
  if (absl::Status st = ResizePty(*master, spec.cols, spec.rows); !st.ok()) {
    ::close(*master);
    ::close(*slave);
    return st;
  }
  return absl::OkStatus();
}

absl::StatusOr<Child> SpawnPtyChild(const ChildSpec& spec, char* const* argv, char* const* envp) {
  int master = -1, slave = -1, report[2];
  if (absl::Status st = OpenPty(spec, &master, &slave); !st.ok()) return st;
  if (::pipe2(report, O_CLOEXEC) != 0) {
    const int e = errno;
    ::close(master);
    ::close(slave);
    return FromErrno(e, "pipe");
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    for (int fd : {master, slave, report[0], report[1]}) ::close(fd);
    return FromErrno(e, "fork");
  }
  if (pid == 0) ExecChild(spec, argv, envp, slave, slave, slave, report[1]);
  ::close(slave);
  ::close(report[1]);
  if (absl::Status st = AwaitExec(report[0], spec); !st.ok()) {
    ::close(master);
    return st;
  }
  Child c;
  c.pid = pid;
  c.stdout_fd = master;
  c.stdin_fd = ::fcntl(master, F_DUPFD_CLOEXEC, 3);
  for (int fd : {c.stdin_fd, c.stdout_fd}) {
    if (fd >= 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  return c;
}

}  // namespace

absl::StatusOr<Child> SpawnChild(const ChildSpec& spec) {
  if (spec.pty) {
    std::vector<char*> argv, envp;
    for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (const std::string& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    return SpawnPtyChild(spec, argv.data(), envp.data());
  }
  int in[2] = {-1, -1}, out[2], err[2], report[2];
  auto close_all = [&] {
    for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1], report[0], report[1]}) {
      if (fd >= 0) ::close(fd);
    }
  };
  out[0] = out[1] = err[0] = err[1] = report[0] = report[1] = -1;
  if (spec.stdin_pipe) {
    if (::pipe2(in, O_CLOEXEC) != 0) return FromErrno(errno, "pipe");
  } else {
    in[0] = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (in[0] < 0) return FromErrno(errno, "open /dev/null");
  }
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0 ||
      ::pipe2(report, O_CLOEXEC) != 0) {
    const int e = errno;
    close_all();
    return FromErrno(e, "pipe");
  }

  std::vector<char*> argv, envp;
  for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const std::string& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    close_all();
    return FromErrno(e, "fork");
  }
  if (pid == 0) ExecChild(spec, argv.data(), envp.data(), in[0], out[1], err[1], report[1]);

  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  ::close(report[1]);
  if (absl::Status st = AwaitExec(report[0], spec); !st.ok()) {
    // The child exits 127 and is reaped by the daemon's reaper.
    if (in[1] >= 0) ::close(in[1]);
    ::close(out[0]);
    ::close(err[0]);
    return st;
  }
  Child c;
  c.pid = pid;
  c.stdin_fd = spec.stdin_pipe ? in[1] : -1;
  c.stdout_fd = out[0];
  c.stderr_fd = err[0];
  for (int fd : {c.stdin_fd, c.stdout_fd, c.stderr_fd}) {
    if (fd >= 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  return c;
}

}  // namespace tether::supervisor
