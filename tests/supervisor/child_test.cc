#include "supervisor/child.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include <doctest.h>

#include "absl/strings/str_split.h"
#include "supervisor/proc.h"
#include "tests/supervisor/test_util.h"

namespace tether::supervisor {
namespace {

using testing::Contains;
using testing::ReadToEof;
using testing::TempDir;
using testing::WaitPid;

google::protobuf::RepeatedPtrField<wire::EnvVar> Vars(
    const std::vector<std::pair<std::string, std::string>>& kv) {
  google::protobuf::RepeatedPtrField<wire::EnvVar> out;
  for (const auto& [k, v] : kv) {
    wire::EnvVar* e = out.Add();
    e->set_name(k);
    e->set_value(v);
  }
  return out;
}

// A NULL-terminated environ-style array over `entries`.
struct Ambient {
  explicit Ambient(std::vector<std::string> e) : entries(std::move(e)) {
    for (std::string& s : entries) ptrs.push_back(s.data());
    ptrs.push_back(nullptr);
  }
  char** get() { return ptrs.data(); }
  std::vector<std::string> entries;
  std::vector<char*> ptrs;
};

void WriteFile(const std::string& path, std::string_view bytes, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  ::close(fd);
  REQUIRE(::chmod(path.c_str(), mode) == 0);
}

// What a spawned child did: its stdout, stderr and wait status.
struct Ran {
  pid_t pid = -1;
  std::string out, err;
  int status = -1;
};

// Spawns `spec`, optionally writes `input` and closes stdin, reads both
// streams to EOF and reaps the child. Fails the test on a timeout.
Ran SpawnAndCollect(const ChildSpec& spec, std::optional<std::string> input = std::nullopt) {
  absl::StatusOr<Child> c = SpawnChild(spec);
  REQUIRE_MESSAGE(c.ok(), c.status().ToString());
  Ran r;
  r.pid = c->pid;
  if (c->stdin_fd >= 0) {
    if (input) {
      // Small inputs only: they fit in the pipe, so a non-blocking write is whole.
      REQUIRE(input->size() <= 4096);
      CHECK(::write(c->stdin_fd, input->data(), input->size()) == static_cast<ssize_t>(input->size()));
    }
    ::close(c->stdin_fd);
  }
  std::optional<std::string> out = ReadToEof(c->stdout_fd);
  std::optional<std::string> err = ReadToEof(c->stderr_fd);
  ::close(c->stdout_fd);
  ::close(c->stderr_fd);
  std::optional<int> st = WaitPid(c->pid);
  REQUIRE_MESSAGE(out.has_value(), "stdout did not end");
  REQUIRE_MESSAGE(err.has_value(), "stderr did not end");
  REQUIRE_MESSAGE(st.has_value(), "the child did not exit");
  r.out = *out;
  r.err = *err;
  r.status = *st;
  return r;
}

ChildSpec Sh(const std::string& script) {
  ChildSpec spec;
  spec.path = "/bin/sh";
  spec.argv = {"sh", "-c", script};
  spec.env = {"PATH=/usr/bin:/bin"};
  return spec;
}

// The hex mask on a "Name:\t..." line of /proc/<pid>/status.
std::uint64_t StatusMask(const std::string& status, const std::string& name) {
  for (absl::string_view line : absl::StrSplit(status, '\n')) {
    if (line.substr(0, name.size() + 1) == name + ":") {
      return std::stoull(std::string(line.substr(name.size() + 1)), nullptr, 16);
    }
  }
  FAIL("no " << name << " line in /proc/<pid>/status");
  return 0;
}

std::uint64_t Bit(int sig) { return std::uint64_t{1} << (sig - 1); }

// ------------------------------------------------------------ environment

TEST_CASE("credential-shaped names are recognised in any case") {
  for (const char* name : {"KEY", "API_KEY", "secret", "MY_SECRET_FILE", "Token", "GITHUB_TOKEN",
                           "PASSWORD", "db_password", "TETHER_X", "TETHER_LOCAL_ROOT", "keyring",
                           "SSH_AUTH_KEY"}) {
    CAPTURE(name);
    CHECK(IsCredentialShaped(name));
  }
  for (const char* name : {"PATH", "HOME", "USER", "LANG", "TERM", "SHELL", "PWD", "TETHE", "XTETHER_",
                           "PASSENGER", "TOKE", ""}) {
    CAPTURE(name);
    CHECK_FALSE(IsCredentialShaped(name));
  }
}

TEST_CASE("common credential names are scrubbed: one per rule of the table, and the usual suspects") {
  for (const std::string name : {
           // Named in issue 11.
           "DATABASE_URL", "MYSQL_PWD", "SMTP_PASS", "GH_PAT", "GOOGLE_APPLICATION_CREDENTIALS",
           "SSH_AUTH_SOCK", "KUBECONFIG", "DOCKER_AUTH_CONFIG",
           // Passwords, however spelt.
           "PGPASSWORD", "MYSQL_PASSWD", "LDAP_PASSWD", "REDIS_PASS", "PASS", "DB_PW", "smtp_pass",
           "GPG_PASSPHRASE", "PGPASSFILE",
           // Credentials and what points at them.
           "AWS_SHARED_CREDENTIALS_FILE", "CREDENTIALS_DIRECTORY", "DOCKER_CONFIG", "kubeconfig",
           // Authentication agents, configs and cookies.
           "NPM_CONFIG__AUTH", "npm_config__auth", "XAUTHORITY", "OAUTH_CLIENT_ID", "BASIC_AUTH",
           "SESSION_COOKIE", "COOKIE_JAR", "SIGNING_PRIVATE_KEY", "GITLAB_PRIVATE_TOKEN",
           // DSNs, connection strings and tokens.
           "SENTRY_DSN", "DB_DSN", "TEST_DATABASE_URL", "AZURE_STORAGE_CONNECTION_STRING", "GITLAB_PAT",
           "AZURE_DEVOPS_PAT", "pat",
           // Whole namespaces of cloud credentials.
           "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
           "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET",
           "AZURE_TENANT_ID"}) {
    CAPTURE(name);
    CHECK(IsCredentialShaped(name));
  }
}

TEST_CASE("everyday names pass the boundary, PWD and OLDPWD included") {
  for (const std::string name :
       {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "COLORTERM", "TERM_PROGRAM", "LANG", "LANGUAGE",
        "LC_ALL", "LC_CTYPE", "TZ", "PWD", "OLDPWD", "TMPDIR", "HOSTNAME", "EDITOR", "VISUAL", "PAGER",
        "DISPLAY", "SHLVL", "MAIL", "LD_LIBRARY_PATH", "MANPATH", "PYTHONPATH", "GOPATH", "CLASSPATH",
        "NODE_PATH", "JAVA_HOME", "VIRTUAL_ENV", "HTTP_PROXY", "NO_PROXY", "DEBIAN_FRONTEND",
        "XDG_RUNTIME_DIR", "XDG_SESSION_ID", "DBUS_SESSION_BUS_ADDRESS", "SSH_CONNECTION", "SSH_TTY",
        "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_AUTHOR_DATE", "GIT_COMMITTER_NAME", "SSH_ASKPASS",
        "COMPASS_HOME", "BYPASS_CACHE", "PATTERN", "SPATIAL", "_"}) {
    CAPTURE(name);
    CHECK_FALSE(IsCredentialShaped(name));
  }
}

TEST_CASE("a value holding a URL with a password is recognised, whatever the scheme") {
  for (const std::string value :
       {"postgres://app:hunter2@db.internal:5432/app", "mysql://root:pw@localhost/db",
        "mongodb+srv://u:p@cluster0.example.net/?retryWrites=true", "redis://:only-password@cache:6379/0",
        "https://user:token@github.com/org/repo.git", "http://proxyuser:proxypass@proxy:3128",
        "amqp://guest:guest@rabbit", "u:p@ss@host via ftp://me:p@ss@files.example",
        "first http://plain.example, then https://a:b@c.example/x", "smtp://mail:secret@smtp.example:587"}) {
    CAPTURE(value);
    CHECK(HasUrlPassword(value));
  }
  for (const std::string value :
       {"", "http://proxy.internal:3128", "https://example.com/path?user=a:b@c", "ssh://git@github.com:22/x.git",
        "https://user@example.com/", "https://user:@example.com/", "http://[::1]:8080/", "/usr/bin:/bin",
        "user:password", "not a url: a:b@c", "file:///home/u:p@x", "https://example.com/#a:b@c"}) {
    CAPTURE(value);
    CHECK_FALSE(HasUrlPassword(value));
  }
}

TEST_CASE("an inherited variable whose value carries a URL password is scrubbed; an explicit one passes") {
  Ambient ambient({"PATH=/bin", "HTTP_PROXY=http://u:p@proxy:3128", "NO_PROXY=localhost",
                   "UPSTREAM=https://example.com/x", "CACHE=redis://:pw@cache:6379", "GIVEN=pg://a:b@db",
                   "MYSQL_PWD=x", "PWD=/work", "OLDPWD=/"});
  absl::StatusOr<std::vector<std::string>> env =
      BuildEnvironment(Vars({{"GIVEN", "pg://a:b@db"}, {"SMTP_PASS", "explicit"}}), true, ambient.get());
  REQUIRE(env.ok());
  CHECK(*env == std::vector<std::string>{"GIVEN=pg://a:b@db", "NO_PROXY=localhost", "OLDPWD=/", "PATH=/bin",
                                         "PWD=/work", "SMTP_PASS=explicit", "UPSTREAM=https://example.com/x"});
}

TEST_CASE("the inherited environment is scrubbed of credential-shaped names unless passed explicitly") {
  Ambient ambient({"PATH=/bin", "HOME=/root", "API_KEY=ambient", "my_secret=y", "GitHubToken=z",
                   "DB_PASSWORD=p", "TETHER_X=1", "NOEQUALS", "=nameless", "EMPTY=", "EQ=a=b"});
  absl::StatusOr<std::vector<std::string>> env =
      BuildEnvironment(Vars({{"API_KEY", "explicit"}, {"NEW", "v"}}), /*inherit=*/true, ambient.get());
  REQUIRE_MESSAGE(env.ok(), env.status().ToString());
  CHECK(*env == std::vector<std::string>{"API_KEY=explicit", "EMPTY=", "EQ=a=b", "HOME=/root", "NEW=v",
                                         "PATH=/bin"});
}

TEST_CASE("requested variables override inherited ones, last request wins") {
  Ambient ambient({"PATH=/bin", "HOME=/root"});
  absl::StatusOr<std::vector<std::string>> env = BuildEnvironment(
      Vars({{"PATH", "/opt/bin"}, {"X", "1"}, {"X", "2"}, {"V", "with=equals\nand newline"}}), true,
      ambient.get());
  REQUIRE(env.ok());
  CHECK(*env == std::vector<std::string>{"HOME=/root", "PATH=/opt/bin", "V=with=equals\nand newline", "X=2"});
}

TEST_CASE("without inherit the environment is exactly the requested variables") {
  Ambient ambient({"PATH=/bin", "HOME=/root"});
  absl::StatusOr<std::vector<std::string>> env =
      BuildEnvironment(Vars({{"A", "1"}, {"TOKEN", "t"}}), /*inherit=*/false, ambient.get());
  REQUIRE(env.ok());
  CHECK(*env == std::vector<std::string>{"A=1", "TOKEN=t"});
  env = BuildEnvironment(Vars({}), false, ambient.get());
  REQUIRE(env.ok());
  CHECK(env->empty());
  env = BuildEnvironment(Vars({{"B", ""}}), true, nullptr);
  REQUIRE(env.ok());
  CHECK(*env == std::vector<std::string>{"B="});
}

TEST_CASE("bad requested variables are rejected with kInvalidArgument") {
  Ambient ambient({"PATH=/bin"});
  struct Bad {
    std::string name, value, why;
  };
  for (const Bad& b : {Bad{"", "v", "empty"}, Bad{"A=B", "v", "'='"}, Bad{"=", "v", "'='"},
                       Bad{std::string("A\0B", 3), "v", "NUL"}, Bad{"A", std::string("v\0w", 3), "NUL"},
                       Bad{"A", std::string(1, '\0'), "NUL"}}) {
    CAPTURE(b.name);
    CAPTURE(b.why);
    for (bool inherit : {true, false}) {
      absl::StatusOr<std::vector<std::string>> env =
          BuildEnvironment(Vars({{"OK", "1"}, {b.name, b.value}}), inherit, ambient.get());
      CHECK(absl::IsInvalidArgument(env.status()));
      CHECK(Contains(env.status().message(), b.why));
    }
  }
}

// ------------------------------------------------------ executable lookup

TEST_CASE("an absolute executable path is checked and returned as is") {
  TempDir tmp;
  absl::StatusOr<std::string> p = ResolveExecutable("/bin/sh", {}, "", false);
  REQUIRE(p.ok());
  CHECK(*p == "/bin/sh");

  CHECK(absl::IsNotFound(ResolveExecutable(tmp / "missing", {}, "", false).status()));
  CHECK(absl::IsNotFound(ResolveExecutable("/bin/sh/not-a-dir", {}, "", false).status()));

  const std::string plain = tmp / "plain";
  WriteFile(plain, "#!/bin/sh\n", 0644);
  absl::StatusOr<std::string> np = ResolveExecutable(plain, {}, "", false);
  CHECK(absl::IsPermissionDenied(np.status()));
  CHECK(Contains(np.status().message(), plain));

  absl::StatusOr<std::string> dir = ResolveExecutable(tmp.path(), {}, "", false);
  CHECK(absl::IsPermissionDenied(dir.status()));
}

TEST_CASE("a bare name is searched in PATH from the child's environment, not ours") {
  TempDir tmp;
  const std::string bin = tmp / "bin";
  REQUIRE(::mkdir(bin.c_str(), 0700) == 0);
  WriteFile(bin + "/tether-test-tool", "#!/bin/sh\n", 0755);
  WriteFile(bin + "/not-executable", "#!/bin/sh\n", 0644);

  absl::StatusOr<std::string> p =
      ResolveExecutable("tether-test-tool", {"HOME=/", "PATH=/nonexistent:" + bin + ":/bin"}, "", false);
  REQUIRE_MESSAGE(p.ok(), p.status().ToString());
  CHECK(*p == bin + "/tether-test-tool");

  // Our own PATH does not have `bin`, and the child's PATH is the one searched.
  absl::StatusOr<std::string> missing = ResolveExecutable("tether-test-tool", {"PATH=/bin"}, "", false);
  CHECK(absl::IsNotFound(missing.status()));
  CHECK(Contains(missing.status().message(), "PATH=/bin"));

  // The first directory that has it wins.
  p = ResolveExecutable("sh", {"PATH=" + bin + ":/bin:/usr/bin"}, "", false);
  REQUIRE(p.ok());
  CHECK(*p == "/bin/sh");

  // Found but not executable: permission denied, not "not found".
  CHECK(absl::IsPermissionDenied(ResolveExecutable("not-executable", {"PATH=" + bin}, "", false).status()));
  // Empty PATH entries never mean the current directory.
  CHECK(absl::IsNotFound(ResolveExecutable("tether-test-tool", {"PATH=::"}, bin, false).status()));
}

TEST_CASE("a bare name uses the default PATH when the environment has none") {
  absl::StatusOr<std::string> p = ResolveExecutable("sh", {"HOME=/"}, "", false);
  REQUIRE_MESSAGE(p.ok(), p.status().ToString());
  bool in_default = false;
  for (absl::string_view dir : absl::StrSplit(kDefaultPath, ':')) {
    if (*p == std::string(dir) + "/sh") in_default = true;
  }
  CHECK(in_default);
  // An empty PATH value is treated as missing.
  CHECK(ResolveExecutable("sh", {"PATH="}, "", false).ok());
  CHECK(absl::IsNotFound(ResolveExecutable("tether-no-such-tool-xyz", {}, "", false).status()));
}

TEST_CASE("a relative path with a slash is rejected unless allowed, then resolved against cwd") {
  TempDir tmp;
  const std::string sub = tmp / "sub";
  REQUIRE(::mkdir(sub.c_str(), 0700) == 0);
  WriteFile(sub + "/tool", "#!/bin/sh\n", 0755);

  for (const char* rel : {"./sub/tool", "sub/tool", "../x/tool"}) {
    CAPTURE(rel);
    absl::StatusOr<std::string> p = ResolveExecutable(rel, {"PATH=/bin"}, tmp.path(), false);
    CHECK(absl::IsInvalidArgument(p.status()));
    CHECK(Contains(p.status().message(), "relative"));
  }
  absl::StatusOr<std::string> p = ResolveExecutable("./sub/tool", {}, tmp.path(), true);
  REQUIRE_MESSAGE(p.ok(), p.status().ToString());
  CHECK(*p == tmp.path() + "/./sub/tool");
  p = ResolveExecutable("sub/tool", {}, tmp.path(), true);
  REQUIRE(p.ok());
  CHECK(::access(p->c_str(), X_OK) == 0);
  CHECK(absl::IsNotFound(ResolveExecutable("sub/missing", {}, tmp.path(), true).status()));
}

TEST_CASE("an empty executable name is rejected") {
  CHECK(absl::IsInvalidArgument(ResolveExecutable("", {"PATH=/bin"}, "", false).status()));
}

// ---------------------------------------------------------------- spawning

TEST_CASE("the child gets exactly the requested argv, environment and cwd") {
  TempDir tmp;
  ChildSpec spec;
  spec.path = "/bin/sh";
  // $$ is the shell itself, exec'd straight by SpawnChild: its cmdline and
  // environ files hold exactly what execve received.
  spec.argv = {"custom-argv0", "-c", "cat /proc/$$/cmdline; printf '\\036'; cat /proc/$$/environ; printf '\\036'; pwd -P",
               "zero", "a b", "", "x'y\"z", "tab\there", "\xff\x01"};
  spec.env = {"PATH=/usr/bin:/bin", "A=b c", "EMPTY=", "MULTI=x=y", "NL=line1\nline2", "TOKEN=given"};
  spec.cwd = tmp.path();
  Ran r = SpawnAndCollect(spec);
  CHECK(r.err == "");
  CHECK(WIFEXITED(r.status));
  CHECK(WEXITSTATUS(r.status) == 0);
  std::vector<std::string> parts = absl::StrSplit(r.out, '\036');
  REQUIRE(parts.size() == 3);

  std::string want_argv;
  for (const std::string& a : spec.argv) want_argv += a + '\0';
  CHECK(parts[0] == want_argv);
  std::string want_env;
  for (const std::string& e : spec.env) want_env += e + '\0';
  CHECK(parts[1] == want_env);
  CHECK(parts[2] == tmp.path() + "\n");
}

TEST_CASE("an empty environment and an inherited cwd are passed as such") {
  char cwd[4096];
  REQUIRE(::getcwd(cwd, sizeof cwd) != nullptr);
  ChildSpec spec;
  spec.path = "/bin/cat";
  spec.argv = {"cat", "/proc/self/environ"};
  Ran r = SpawnAndCollect(spec);
  CHECK(r.out == "");
  CHECK(WEXITSTATUS(r.status) == 0);

  spec.argv = {"readlink", "/proc/self/cwd"};
  spec.path = "/bin/readlink";
  if (::access(spec.path.c_str(), X_OK) != 0) spec.path = "/usr/bin/readlink";
  r = SpawnAndCollect(spec);
  char real[4096];
  REQUIRE(::realpath(cwd, real) != nullptr);
  CHECK(r.out == std::string(real) + "\n");
}

TEST_CASE("the child is a session leader and its own process group") {
  ChildSpec spec;
  spec.path = "/bin/cat";
  spec.argv = {"cat", "/proc/self/stat"};
  Ran r = SpawnAndCollect(spec);
  REQUIRE(WEXITSTATUS(r.status) == 0);
  std::optional<ProcStat> st = ParseProcStat(r.out);
  REQUIRE(st.has_value());
  CHECK(st->ppid == ::getpid());  // we are its parent
  CHECK(st->pgrp == r.pid);
  CHECK(st->session == r.pid);
  CHECK(st->session != ::getsid(0));
}

TEST_CASE("a blocked signal mask and ignored signals in the parent are reset in the child") {
  sigset_t block, old_mask;
  sigemptyset(&block);
  sigaddset(&block, SIGUSR1);
  sigaddset(&block, SIGTERM);
  REQUIRE(::pthread_sigmask(SIG_BLOCK, &block, &old_mask) == 0);
  struct sigaction ign {}, old_usr2 {}, old_int {};
  ign.sa_handler = SIG_IGN;
  REQUIRE(::sigaction(SIGUSR2, &ign, &old_usr2) == 0);
  REQUIRE(::sigaction(SIGINT, &ign, &old_int) == 0);

  ChildSpec spec;
  spec.path = "/bin/cat";
  spec.argv = {"cat", "/proc/self/status"};
  Ran r = SpawnAndCollect(spec);

  ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  ::sigaction(SIGUSR2, &old_usr2, nullptr);
  ::sigaction(SIGINT, &old_int, nullptr);

  REQUIRE(WEXITSTATUS(r.status) == 0);
  CHECK(StatusMask(r.out, "SigBlk") == 0);
  CHECK((StatusMask(r.out, "SigIgn") & (Bit(SIGUSR2) | Bit(SIGINT))) == 0);
  CHECK(StatusMask(r.out, "SigIgn") == 0);
}

TEST_CASE("a child with stdin closed reads EOF at once") {
  ChildSpec spec = Sh("cat; echo \"done $?\"");
  spec.stdin_pipe = false;
  absl::StatusOr<Child> c = SpawnChild(spec);
  REQUIRE(c.ok());
  CHECK(c->stdin_fd == -1);
  std::optional<std::string> out = ReadToEof(c->stdout_fd);
  std::optional<std::string> err = ReadToEof(c->stderr_fd);
  ::close(c->stdout_fd);
  ::close(c->stderr_fd);
  std::optional<int> st = WaitPid(c->pid);
  REQUIRE(st.has_value());
  CHECK(out == std::optional<std::string>("done 0\n"));
  CHECK(err == std::optional<std::string>(""));
}

TEST_CASE("a stdin pipe carries exact bytes and its close is the child's EOF") {
  ChildSpec spec;
  spec.path = "/bin/cat";
  spec.argv = {"cat"};
  spec.stdin_pipe = true;
  const std::string input = testing::AllByteValues();
  Ran r = SpawnAndCollect(spec, input);
  CHECK(r.out == input);
  CHECK(WEXITSTATUS(r.status) == 0);
}

TEST_CASE("stdout and stderr are separate pipes and the exit status is the child's") {
  Ran r = SpawnAndCollect(Sh("printf out; printf err >&2; exit 7"));
  CHECK(r.out == "out");
  CHECK(r.err == "err");
  CHECK(WIFEXITED(r.status));
  CHECK(WEXITSTATUS(r.status) == 7);
}

TEST_CASE("parent-side fds are non-blocking and close-on-exec; our other fds do not leak") {
  // An inheritable fd in the parent, at a number ls will not reuse.
  const int leak = ::fcntl(0, F_DUPFD, 100);
  REQUIRE(leak >= 100);
  ChildSpec spec;
  spec.path = "/bin/ls";
  if (::access(spec.path.c_str(), X_OK) != 0) spec.path = "/usr/bin/ls";
  spec.argv = {"ls", "/proc/self/fd"};
  spec.stdin_pipe = true;
  absl::StatusOr<Child> c = SpawnChild(spec);
  ::close(leak);
  REQUIRE(c.ok());
  for (int fd : {c->stdin_fd, c->stdout_fd, c->stderr_fd}) {
    CAPTURE(fd);
    CHECK((::fcntl(fd, F_GETFL) & O_NONBLOCK) != 0);
    CHECK((::fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
  }
  ::close(c->stdin_fd);
  std::optional<std::string> out = ReadToEof(c->stdout_fd);
  ::close(c->stdout_fd);
  ::close(c->stderr_fd);
  REQUIRE(WaitPid(c->pid).has_value());
  REQUIRE(out.has_value());
  std::vector<std::string> fds = absl::StrSplit(*out, '\n', absl::SkipEmpty());
  // 0, 1, 2 and the directory ls itself has open; nothing of ours.
  CHECK(fds.size() <= 4);
  for (const std::string& fd : fds) CHECK(std::stoi(fd) < 10);
}

TEST_CASE("an exec error is reported, not hidden behind exit status 127") {
  TempDir tmp;
  ChildSpec spec;
  spec.path = tmp / "missing";
  spec.argv = {"missing"};
  absl::StatusOr<Child> c = SpawnChild(spec);
  CHECK(absl::IsNotFound(c.status()));
  CHECK(Contains(c.status().message(), "exec"));
  CHECK(Contains(c.status().message(), spec.path));

  const std::string plain = tmp / "plain";
  WriteFile(plain, "data", 0644);
  spec.path = plain;
  c = SpawnChild(spec);
  CHECK(absl::IsPermissionDenied(c.status()));

  // The failed children are left for the caller's reaper (the daemon reaps
  // everything): reap them here.
  CHECK(testing::ReapAllChildren());
}

TEST_CASE("a bad cwd is reported as a chdir error") {
  TempDir tmp;
  ChildSpec spec;
  spec.path = "/bin/true";
  spec.argv = {"true"};
  spec.cwd = tmp / "missing";
  absl::StatusOr<Child> c = SpawnChild(spec);
  CHECK(absl::IsNotFound(c.status()));
  CHECK(Contains(c.status().message(), "chdir"));
  CHECK(Contains(c.status().message(), spec.cwd));

  const std::string file = tmp / "file";
  WriteFile(file, "", 0600);
  spec.cwd = file;
  c = SpawnChild(spec);
  CHECK(!c.ok());
  CHECK(Contains(c.status().message(), "chdir"));
  CHECK(testing::ReapAllChildren());
}

}  // namespace
}  // namespace tether::supervisor
