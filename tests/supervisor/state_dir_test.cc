#include "supervisor/state_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include <doctest.h>

#include "tests/supervisor/test_util.h"

namespace tether::supervisor {
namespace {

using testing::Contains;
using testing::PathExists;
using testing::TempDir;

struct stat Lstat(const std::string& path) {
  struct stat st {};
  REQUIRE_MESSAGE(::lstat(path.c_str(), &st) == 0, path);
  return st;
}

mode_t CurrentUmask() {
  const mode_t m = ::umask(0);
  ::umask(m);
  return m;
}

// Restores the umask a test changed.
struct UmaskGuard {
  explicit UmaskGuard(mode_t m) : old(::umask(m)) {}
  ~UmaskGuard() { ::umask(old); }
  mode_t old;
};

// A path of at least `min_len` characters below `root`, made of private
// directories (every component private, as CreatePrivateDir requires of a
// parent). Returns the deepest directory, created.
std::string DeepPrivateDir(const std::string& root, std::size_t min_len) {
  std::string path = root;
  int i = 0;
  while (path.size() < min_len) {
    path += "/" + std::string(40, static_cast<char>('a' + i++ % 26));
    REQUIRE_MESSAGE(::mkdir(path.c_str(), 0700) == 0, path);
    REQUIRE(::chmod(path.c_str(), 0700) == 0);
  }
  return path;
}

// A directory of exactly `len` characters below `root` (root must be short).
std::string PrivateDirOfLength(const std::string& root, std::size_t len) {
  REQUIRE(root.size() + 2 < len);
  std::string path = root + "/";
  path += std::string(len - path.size(), 'L');
  REQUIRE(path.size() == len);
  REQUIRE(CreatePrivateDir(path).ok());
  return path;
}

// Accepts one connection on `listen_fd` from ConnectInDir(dir) and passes a
// few bytes each way.
void CheckRoundTrip(int listen_fd, const std::string& dir) {
  absl::StatusOr<int> c = ConnectInDir(dir);
  REQUIRE_MESSAGE(c.ok(), c.status().ToString());
  const int s = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  REQUIRE(s >= 0);
  CHECK(::write(*c, "ping", 4) == 4);
  char buf[8] = {};
  CHECK(::read(s, buf, sizeof buf) == 4);
  CHECK(std::string(buf, 4) == "ping");
  CHECK(::write(s, "pong", 4) == 4);
  CHECK(::read(*c, buf, sizeof buf) == 4);
  CHECK(std::string(buf, 4) == "pong");
  CHECK((::fcntl(*c, F_GETFD) & FD_CLOEXEC) != 0);
  ::close(s);
  ::close(*c);
}

TEST_CASE("creates a 0700 directory owned by us, whatever the umask") {
  TempDir tmp;
  UmaskGuard umask(0);  // a permissive umask must not leak into the mode
  const std::string dir = tmp / "state";
  REQUIRE(CreatePrivateDir(dir).ok());
  const struct stat st = Lstat(dir);
  CHECK(S_ISDIR(st.st_mode));
  CHECK((st.st_mode & 07777) == 0700);
  CHECK(st.st_uid == ::geteuid());
  CHECK(CurrentUmask() == 0);  // restored
  CHECK(CheckPrivateDir(dir).ok());
}

TEST_CASE("creates a missing parent as a private directory too") {
  TempDir tmp;
  UmaskGuard umask(022);
  const std::string parent = tmp / "run";
  const std::string dir = parent + "/launch-1";
  REQUIRE(CreatePrivateDir(dir).ok());
  CHECK((Lstat(parent).st_mode & 07777) == 0700);
  CHECK((Lstat(dir).st_mode & 07777) == 0700);
  CHECK(CurrentUmask() == 022);
  // A sibling in the same (now existing, private) parent works.
  CHECK(CreatePrivateDir(parent + "/launch-2").ok());
}

TEST_CASE("refuses a path that already exists with kAlreadyExists") {
  TempDir tmp;
  const std::string dir = tmp / "state";
  REQUIRE(CreatePrivateDir(dir).ok());
  absl::Status again = CreatePrivateDir(dir);
  CHECK(absl::IsAlreadyExists(again));
  CHECK(Contains(again.message(), dir));

  const std::string file = tmp / "file";
  REQUIRE(::close(::open(file.c_str(), O_CREAT | O_WRONLY, 0600)) == 0);
  CHECK(absl::IsAlreadyExists(CreatePrivateDir(file)));
}

TEST_CASE("refuses a relative or empty path") {
  CHECK(absl::IsInvalidArgument(CreatePrivateDir("")));
  CHECK(absl::IsInvalidArgument(CreatePrivateDir("relative/state")));
  CHECK(absl::IsInvalidArgument(CreatePrivateDir("./state")));
}

TEST_CASE("refuses when the parent is a symlink, and creates nothing behind it") {
  TempDir tmp;
  const std::string real = tmp / "real";
  REQUIRE(::mkdir(real.c_str(), 0700) == 0);
  const std::string link = tmp / "link";
  REQUIRE(::symlink(real.c_str(), link.c_str()) == 0);
  absl::Status st = CreatePrivateDir(link + "/state");
  CHECK(!st.ok());
  CHECK(Contains(st.message(), "symlink"));
  CHECK(!PathExists(real + "/state"));
}

TEST_CASE("refuses when the parent gives group or other access") {
  TempDir tmp;
  for (mode_t mode : {0750, 0705, 0701, 0770, 0777, 01777}) {
    CAPTURE(mode);
    const std::string parent = tmp / "shared";
    REQUIRE(::mkdir(parent.c_str(), 0700) == 0);
    REQUIRE(::chmod(parent.c_str(), mode) == 0);
    absl::Status st = CreatePrivateDir(parent + "/state");
    CHECK(!st.ok());
    CHECK(Contains(st.message(), "mode"));
    CHECK(!PathExists(parent + "/state"));
    REQUIRE(::rmdir(parent.c_str()) == 0);
  }
}

TEST_CASE("refuses when the parent is owned by another user") {
  if (::geteuid() != 0) return;  // only root can hand a directory to someone else
  TempDir tmp;
  const std::string parent = tmp / "theirs";
  REQUIRE(::mkdir(parent.c_str(), 0700) == 0);
  REQUIRE(::chown(parent.c_str(), 65534, 65534) == 0);
  absl::Status st = CreatePrivateDir(parent + "/state");
  CHECK(!st.ok());
  CHECK(Contains(st.message(), "owned by uid 65534"));
  CHECK(!PathExists(parent + "/state"));
}

TEST_CASE("does not follow a pre-created symlink at the target path") {
  TempDir tmp;
  const std::string elsewhere = tmp / "elsewhere";
  REQUIRE(::mkdir(elsewhere.c_str(), 0700) == 0);
  const std::string target = tmp / "state";
  REQUIRE(::symlink(elsewhere.c_str(), target.c_str()) == 0);
  CHECK(!CreatePrivateDir(target).ok());
  CHECK(S_ISLNK(Lstat(target).st_mode));  // left alone
  // Nothing usable either: the directory check refuses the link.
  CHECK(!CheckPrivateDir(target).ok());
  CHECK(!ConnectInDir(target).ok());

  // A dangling link must not make mkdir create its target.
  const std::string dangling = tmp / "dangling";
  const std::string nowhere = tmp / "nowhere";
  REQUIRE(::symlink(nowhere.c_str(), dangling.c_str()) == 0);
  CHECK(!CreatePrivateDir(dangling).ok());
  CHECK(!PathExists(nowhere));
}

TEST_CASE("check private dir reports every way a directory is not private") {
  TempDir tmp;
  SUBCASE("missing") {
    absl::Status st = CheckPrivateDir(tmp / "missing");
    CHECK(absl::IsNotFound(st));
  }
  SUBCASE("a regular file") {
    const std::string file = tmp / "file";
    REQUIRE(::close(::open(file.c_str(), O_CREAT | O_WRONLY, 0700)) == 0);
    absl::Status st = CheckPrivateDir(file);
    CHECK(absl::IsFailedPrecondition(st));
    CHECK(Contains(st.message(), "not a directory"));
  }
  SUBCASE("a symlink to a private directory") {
    const std::string link = tmp / "link";
    REQUIRE(::symlink(tmp.path().c_str(), link.c_str()) == 0);
    absl::Status st = CheckPrivateDir(link);
    CHECK(absl::IsFailedPrecondition(st));
    CHECK(Contains(st.message(), "symlink"));
  }
  SUBCASE("wrong modes") {
    for (mode_t mode : {0755, 0750, 0701, 0600, 0500, 0300, 0000, 01700}) {
      CAPTURE(mode);
      const std::string dir = tmp / "dir";
      REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
      REQUIRE(::chmod(dir.c_str(), mode) == 0);
      absl::Status st = CheckPrivateDir(dir);
      if (mode == 01700) {
        CHECK(st.ok());  // only the permission bits matter
      } else {
        CHECK(absl::IsFailedPrecondition(st));
        CHECK(Contains(st.message(), "want 0700"));
      }
      REQUIRE(::rmdir(dir.c_str()) == 0);
    }
  }
  SUBCASE("owned by another user") {
    if (::geteuid() != 0) return;
    const std::string dir = tmp / "theirs";
    REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
    REQUIRE(::chown(dir.c_str(), 65534, 65534) == 0);
    absl::Status st = CheckPrivateDir(dir);
    CHECK(absl::IsFailedPrecondition(st));
    CHECK(Contains(st.message(), "owned by uid 65534"));
  }
  SUBCASE("a good one") { CHECK(CheckPrivateDir(tmp.path()).ok()); }
}

TEST_CASE("listen in dir makes a 0600 socket whatever the umask") {
  TempDir tmp;
  const std::string dir = tmp / "state";
  REQUIRE(CreatePrivateDir(dir).ok());
  UmaskGuard umask(0);
  absl::StatusOr<int> l = ListenInDir(dir);
  REQUIRE_MESSAGE(l.ok(), l.status().ToString());
  CHECK(CurrentUmask() == 0);
  const struct stat st = Lstat(dir + "/" + kSocketName);
  CHECK(S_ISSOCK(st.st_mode));
  CHECK((st.st_mode & 07777) == 0600);
  CHECK(st.st_uid == ::geteuid());
  CHECK((::fcntl(*l, F_GETFD) & FD_CLOEXEC) != 0);
  CheckRoundTrip(*l, dir);
  ::close(*l);
}

TEST_CASE("listen in dir refuses a directory that already has a socket") {
  TempDir tmp;
  const std::string dir = tmp / "state";
  REQUIRE(CreatePrivateDir(dir).ok());
  absl::StatusOr<int> first = ListenInDir(dir);
  REQUIRE(first.ok());
  absl::StatusOr<int> second = ListenInDir(dir);
  CHECK(!second.ok());
  CheckRoundTrip(*first, dir);  // the first one still works
  ::close(*first);
  CHECK(!ListenInDir(tmp / "missing").ok());
}

TEST_CASE("connect in dir works for a directory path longer than sun_path") {
  TempDir tmp;
  const std::string deep = DeepPrivateDir(tmp.path(), 220);
  REQUIRE(deep.size() > sizeof(sockaddr_un{}.sun_path));
  const std::string dir = deep + "/state";
  REQUIRE(CreatePrivateDir(dir).ok());
  absl::StatusOr<int> l = ListenInDir(dir);
  REQUIRE_MESSAGE(l.ok(), l.status().ToString());
  const struct stat st = Lstat(dir + "/" + kSocketName);  // bound where it belongs
  CHECK(S_ISSOCK(st.st_mode));
  CHECK((st.st_mode & 07777) == 0600);
  CheckRoundTrip(*l, dir);
  ::close(*l);
}

TEST_CASE("listen and connect work for every directory length around the sun_path limit") {
  char tmpl[] = "/tmp/tsXXXXXX";  // short root: the lengths below are exact
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string root = tmpl;
  constexpr std::size_t kSunPath = sizeof(sockaddr_un{}.sun_path);
  for (std::size_t len = kSunPath - 12; len <= kSunPath + 4; ++len) {
    CAPTURE(len);
    const std::string dir = PrivateDirOfLength(root, len);
    absl::StatusOr<int> l = ListenInDir(dir);
    REQUIRE_MESSAGE(l.ok(), l.status().ToString());
    CHECK(S_ISSOCK(Lstat(dir + "/" + kSocketName).st_mode));
    CheckRoundTrip(*l, dir);
    ::close(*l);
    RemovePrivateDir(dir);
    CHECK(!PathExists(dir));
  }
  CHECK(::rmdir(root.c_str()) == 0);
}

TEST_CASE("connect in dir fails cleanly when nobody listens") {
  TempDir tmp;
  const std::string dir = tmp / "state";
  REQUIRE(CreatePrivateDir(dir).ok());
  SUBCASE("no socket") {
    absl::StatusOr<int> c = ConnectInDir(dir);
    CHECK(absl::IsNotFound(c.status()));
  }
  SUBCASE("a socket whose listener is gone") {
    absl::StatusOr<int> l = ListenInDir(dir);
    REQUIRE(l.ok());
    ::close(*l);
    absl::StatusOr<int> c = ConnectInDir(dir);
    CHECK(absl::IsNotFound(c.status()));
  }
  SUBCASE("a missing directory") { CHECK(absl::IsNotFound(ConnectInDir(tmp / "missing").status())); }
}

TEST_CASE("connect in dir refuses a directory that is not private") {
  TempDir tmp;
  const std::string dir = tmp / "state";
  REQUIRE(CreatePrivateDir(dir).ok());
  absl::StatusOr<int> l = ListenInDir(dir);
  REQUIRE(l.ok());
  REQUIRE(::chmod(dir.c_str(), 0755) == 0);
  absl::StatusOr<int> c = ConnectInDir(dir);
  CHECK(absl::IsFailedPrecondition(c.status()));
  REQUIRE(::chmod(dir.c_str(), 0700) == 0);
  CheckRoundTrip(*l, dir);
  ::close(*l);
}

TEST_CASE("remove private dir removes the socket and the directory") {
  TempDir tmp;
  const std::string dir = tmp / "state";
  REQUIRE(CreatePrivateDir(dir).ok());
  absl::StatusOr<int> l = ListenInDir(dir);
  REQUIRE(l.ok());
  ::close(*l);
  RemovePrivateDir(dir);
  CHECK(!PathExists(dir + "/" + kSocketName));
  CHECK(!PathExists(dir));
  CHECK(PathExists(tmp.path()));  // the parent stays
  RemovePrivateDir(dir);          // twice is harmless

  // Without a socket (an early failure) the directory still goes.
  REQUIRE(CreatePrivateDir(dir).ok());
  RemovePrivateDir(dir);
  CHECK(!PathExists(dir));

  // With the daemon's mark too.
  REQUIRE(CreatePrivateDir(dir).ok());
  REQUIRE(LeaveDaemonMark(dir).ok());
  CHECK(HasDaemonMark(dir));
  RemovePrivateDir(dir);
  CHECK(!PathExists(dir));
}

TEST_CASE("a directory's lock is held by one holder at a time, and freed when its holder closes or dies") {
  TempDir tmp;
  const std::string dir = tmp / "state";
  REQUIRE(CreatePrivateDir(dir).ok());
  absl::StatusOr<int> first = TryLockDir(dir);
  REQUIRE(first.ok());
  absl::StatusOr<int> second = TryLockDir(dir);
  CHECK(absl::IsUnavailable(second.status()));
  // A forked holder keeps it held after we close ours (the daemon inherits
  // the launch call's lock), until it exits.
  const pid_t holder = ::fork();
  REQUIRE(holder >= 0);
  if (holder == 0) {
    ::pause();
    ::_exit(0);
  }
  ::close(*first);
  CHECK(absl::IsUnavailable(TryLockDir(dir).status()));
  ::kill(holder, SIGKILL);
  testing::WaitPid(holder);
  absl::StatusOr<int> after = TryLockDir(dir);
  REQUIRE(after.ok());
  CHECK((::fcntl(*after, F_GETFD) & FD_CLOEXEC) != 0);  // a child exec'd never holds it
  ::close(*after);
  // Never through a link, never a directory that is not private.
  REQUIRE(::symlink(dir.c_str(), (tmp / "link").c_str()) == 0);
  CHECK_FALSE(TryLockDir(tmp / "link").ok());
  CHECK(absl::IsNotFound(TryLockDir(tmp / "missing").status()));
  // The mark: once, never through a link.
  CHECK_FALSE(HasDaemonMark(dir));
  REQUIRE(LeaveDaemonMark(dir).ok());
  CHECK(HasDaemonMark(dir));
  CHECK_FALSE(LeaveDaemonMark(dir).ok());
  RemovePrivateDir(dir);
}

}  // namespace
}  // namespace tether::supervisor

namespace tether::supervisor {
namespace {

TEST_CASE("stale cancellation markers are removed; fresh ones, links and other files stay") {
  testing::TempDir root;
  const std::string dir = root.path();
  const auto touch = [&](const std::string& name, std::int64_t age_seconds) {
    const std::string path = dir + "/" + name;
    FILE* f = std::fopen(path.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fclose(f);
    const struct timespec t[2] = {{::time(nullptr) - age_seconds, 0}, {::time(nullptr) - age_seconds, 0}};
    REQUIRE(::utimensat(AT_FDCWD, path.c_str(), t, 0) == 0);
  };
  touch("aaaa.cancel", 2 * kStaleMarkerSeconds);  // a launch that never came
  touch("bbbb.cancel", 10);                       // may still stop a delayed launch
  touch("cccc", 2 * kStaleMarkerSeconds);         // not a marker
  REQUIRE(::symlink("/etc/passwd", (dir + "/dddd.cancel").c_str()) == 0);
  CHECK(RemoveStaleCancelMarkers(dir, kStaleMarkerSeconds) == 1);
  CHECK_FALSE(PathExists(dir + "/aaaa.cancel"));
  CHECK(PathExists(dir + "/bbbb.cancel"));
  CHECK(PathExists(dir + "/cccc"));
  struct stat st {};
  CHECK(::lstat((dir + "/dddd.cancel").c_str(), &st) == 0);
  CHECK(RemoveStaleCancelMarkers(dir + "/missing", kStaleMarkerSeconds) == 0);
}

}  // namespace
}  // namespace tether::supervisor

namespace tether::supervisor {
namespace {

TEST_CASE("a state directory whose daemon was killed is removed; a live or young one stays") {
  testing::TempDir root;
  const std::string dir = root.path();
  ::chmod(dir.c_str(), 0700);
  const auto make = [&](const std::string& name) {
    REQUIRE(CreatePrivateDir(dir + "/" + name).ok());
    absl::StatusOr<int> fd = ListenInDir(dir + "/" + name);
    REQUIRE(fd.ok());
    return *fd;
  };
  const auto age = [&](const std::string& name) {
    const std::string sock = dir + "/" + name + "/" + kSocketName;
    const struct timespec t[2] = {{::time(nullptr) - 3600, 0}, {::time(nullptr) - 3600, 0}};
    REQUIRE(::utimensat(AT_FDCWD, sock.c_str(), t, AT_SYMLINK_NOFOLLOW) == 0);
  };
  ::close(make("dead"));  // bound, nobody listens: what kill -9 leaves
  REQUIRE(LeaveDaemonMark(dir + "/dead").ok());  // (its daemon had begun)
  age("dead");
  const int live = make("live");
  age("live");
  ::close(make("young"));  // dead too, but bound just now: maybe a launch in progress
  REQUIRE(CreatePrivateDir(dir + "/nosocket").ok());
  CHECK(RemoveDeadStateDirs(dir, 256) == 1);
  CHECK_FALSE(PathExists(dir + "/dead"));
  CHECK(PathExists(dir + "/live/" + kSocketName));
  CHECK(PathExists(dir + "/young/" + kSocketName));
  // A bounded share per call (a launch among thousands of live daemons must
  // not probe them all): one probe at most, yet every dead one goes in time.
  for (int i = 0; i < 12; ++i) {
    ::close(make("d" + std::to_string(i)));
    age("d" + std::to_string(i));
  }
  CHECK(RemoveDeadStateDirs(dir, 1) <= 1);
  for (int call = 0; call < 500; ++call) (void)RemoveDeadStateDirs(dir, 1);
  for (int i = 0; i < 12; ++i) CHECK_FALSE(PathExists(dir + "/d" + std::to_string(i)));
  CHECK(PathExists(dir + "/live/" + kSocketName));
  CHECK(PathExists(dir + "/nosocket"));
  ::close(live);
}

}  // namespace
}  // namespace tether::supervisor
