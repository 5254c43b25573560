#include "supervisor/state_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tether::supervisor {
namespace {

absl::Status Errno(const char* what, const std::string& path, int err) {
  if (err == ENOSPC || err == EDQUOT) {
    // A file system without free blocks or free inodes (both are ENOSPC;
    // `df -i` shows the inodes): the sandbox's limits, not a bad request.
    return absl::ResourceExhaustedError(absl::StrCat(what, " ", path, ": ", std::strerror(err),
                                                     " (no free space or no free inodes)"));
  }
  return absl::Status(err == EEXIST ? absl::StatusCode::kAlreadyExists
                      : err == ENOENT ? absl::StatusCode::kNotFound
                                      : absl::StatusCode::kFailedPrecondition,
                      absl::StrCat(what, " ", path, ": ", std::strerror(err)));
}

std::string Parent(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  if (slash == std::string::npos || slash == 0) return "/";
  return path.substr(0, slash);
}

// sockaddr for a path relative to an open directory, via /proc/self/fd, which
// keeps sun_path short whatever the directory's length.
struct DirSocket {
  int dirfd = -1;
  sockaddr_un addr{};
  ~DirSocket() {
    if (dirfd >= 0) ::close(dirfd);
  }
};

absl::Status OpenDirSocket(const std::string& dir, DirSocket* ds) {
  ds->dirfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (ds->dirfd < 0) return Errno("open", dir, errno);
  ds->addr.sun_family = AF_UNIX;
  std::string p = absl::StrCat("/proc/self/fd/", ds->dirfd, "/", kSocketName);
  if (dir.size() + 1 + sizeof(kSocketName) < sizeof(ds->addr.sun_path)) {
    p = absl::StrCat(dir, "/", kSocketName);  // no /proc needed (and none in some sandboxes)
  }
  std::memcpy(ds->addr.sun_path, p.c_str(), p.size() + 1);
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckPrivateDir(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return Errno("lstat", path, errno);
  if (S_ISLNK(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is a symlink; refusing to follow it"));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a directory"));
  }
  if (st.st_uid != ::geteuid()) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is owned by uid ", st.st_uid, ", not by us (", ::geteuid(), ")"));
  }
  if ((st.st_mode & 0777) != 0700) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " has mode 0", absl::Hex(st.st_mode & 0777), ", want 0700"));
  }
  return absl::OkStatus();
}

absl::Status CreatePrivateDir(const std::string& path) {
  if (path.empty() || path[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat("state directory must be absolute: '", path, "'"));
  }
  const mode_t old = ::umask(077);
  const std::string parent = Parent(path);
  if (::mkdir(parent.c_str(), 0700) != 0 && errno != EEXIST) {
    ::umask(old);
    return Errno("mkdir", parent, errno);
  }
  if (parent != "/") {
    if (absl::Status st = CheckPrivateDir(parent); !st.ok()) {
      ::umask(old);
      return st;
    }
  }
  const int rc = ::mkdir(path.c_str(), 0700);
  const int err = errno;
  ::umask(old);
  if (rc != 0) return Errno("mkdir", path, err);
  return CheckPrivateDir(path);
}

absl::StatusOr<int> ListenInDir(const std::string& dir) {
  DirSocket ds;
  if (absl::Status st = OpenDirSocket(dir, &ds); !st.ok()) return st;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket for", dir, errno);
  const mode_t old = ::umask(0177);  // the socket file is created 0600
  const int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&ds.addr), sizeof(ds.addr));
  const int err = errno;
  ::umask(old);
  if (rc != 0 || ::listen(fd, 8) != 0) {
    ::close(fd);
    return Errno("bind/listen in", dir, rc != 0 ? err : errno);
  }
  struct stat st;
  if (::fstatat(ds.dirfd, kSocketName, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISSOCK(st.st_mode) ||
      (st.st_mode & 0777) != 0600) {
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat("socket in ", dir, " is not a 0600 socket"));
  }
  return fd;
}

absl::StatusOr<int> ConnectInDir(const std::string& dir) {
  if (absl::Status st = CheckPrivateDir(dir); !st.ok()) return st;
  DirSocket ds;
  if (absl::Status st = OpenDirSocket(dir, &ds); !st.ok()) return st;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket for", dir, errno);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&ds.addr), sizeof(ds.addr)) != 0) {
    const int err = errno;
    ::close(fd);
    return Errno("connect to supervisor in", dir, err == ECONNREFUSED ? ENOENT : err);
  }
  return fd;
}

void RemovePrivateDir(const std::string& dir) {
  ::unlink(absl::StrCat(dir, "/", kSocketName).c_str());
  ::unlink(absl::StrCat(dir, "/", kDaemonMarkName).c_str());
  ::rmdir(dir.c_str());
}

absl::StatusOr<int> TryLockDir(const std::string& dir) {
  if (absl::Status st = CheckPrivateDir(dir); !st.ok()) return st;
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Errno("open", dir, errno);
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EINTR) continue;
    ::close(fd);
    if (err == EWOULDBLOCK) return absl::UnavailableError(absl::StrCat(dir, " is locked by a launch or its daemon"));
    return Errno("flock", dir, err);
  }
  return fd;
}

absl::Status LeaveDaemonMark(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", kDaemonMarkName);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("create", path, errno);
  const std::string pid = absl::StrCat(::getpid(), "\n");  // (for whoever looks)
  const bool wrote = ::write(fd, pid.data(), pid.size()) == static_cast<ssize_t>(pid.size());
  const int err = errno;
  ::close(fd);
  if (!wrote) return Errno("write", path, err);
  return absl::OkStatus();
}

bool HasDaemonMark(const std::string& dir) {
  struct stat st;
  return ::lstat(absl::StrCat(dir, "/", kDaemonMarkName).c_str(), &st) == 0;
}

int RemoveDeadStateDirs(const std::string& root, int max_probes) {
  DIR* d = ::opendir(root.c_str());
  if (d == nullptr) return 0;
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    const std::string_view name(e->d_name);
    if (name == "." || name == "..") continue;
    names.emplace_back(name);
  }
  ::closedir(d);
  int removed = 0, probes = 0;
  // A bounded share per call, from a different place each time: with
  // thousands of live daemons a launch must not stat every directory and
  // wake up to max_probes of them (that made starts grow with N); over
  // many launches every directory still gets its turn.
  const std::size_t examine = std::min(names.size(), static_cast<std::size_t>(max_probes) * 4);
  static unsigned calls = 0;  // (the daemon is one thread)
  const std::size_t first =
      names.empty() ? 0
                    : static_cast<std::size_t>(static_cast<unsigned>(::getpid() ^ ::time(nullptr)) + 7919u * calls++) %
                          names.size();
  for (std::size_t k = 0; k < examine; ++k) {
    const std::string& name = names[(first + k) % names.size()];
    if (probes >= max_probes) break;
    const std::string dir = absl::StrCat(root, "/", name);
    if (!CheckPrivateDir(dir).ok()) continue;  // ours, 0700, never a link
    DirSocket ds;
    if (!OpenDirSocket(dir, &ds).ok()) continue;
    struct stat st {};
    if (::fstatat(ds.dirfd, kSocketName, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISSOCK(st.st_mode)) continue;
    // A socket bound this last minute may be between bind and listen in a
    // launch running right now (connect is refused then too): not proof.
    if (static_cast<std::int64_t>(::time(nullptr)) - static_cast<std::int64_t>(st.st_mtime) < kMinDeadSocketAgeSeconds) {
      continue;
    }
    ++probes;
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) break;
    const int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&ds.addr), sizeof(ds.addr));
    const int err = errno;
    ::close(fd);
    // Only "nobody listens on a socket that was bound" is proof: the
    // daemon bound and listened before it ever ran, so it has died (kill -9).
    // A live one accepts (it sees a connection that ends at once) or has a
    // full backlog (EAGAIN); both are left alone.
    if (rc != 0 && err == ECONNREFUSED) {
      ::unlinkat(ds.dirfd, kSocketName, 0);
      ::unlinkat(ds.dirfd, kDaemonMarkName, 0);
      if (::rmdir(dir.c_str()) == 0) ++removed;
    }
  }
  return removed;
}

int RemoveStaleCancelMarkers(const std::string& root, std::int64_t max_age_seconds) {
  DIR* d = ::opendir(root.c_str());
  if (d == nullptr) return 0;
  const int dfd = ::dirfd(d);
  const std::int64_t now = static_cast<std::int64_t>(::time(nullptr));
  int removed = 0;
  while (dirent* e = ::readdir(d)) {
    const std::string_view name(e->d_name);
    constexpr std::string_view kSuffix = ".cancel";
    if (name.size() <= kSuffix.size() || name.substr(name.size() - kSuffix.size()) != kSuffix) continue;
    struct stat st {};
    // Only our own regular files, never through a link.
    if (::fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
        st.st_uid != ::geteuid()) {
      continue;
    }
    if (now - static_cast<std::int64_t>(st.st_mtime) < max_age_seconds) continue;
    if (::unlinkat(dfd, e->d_name, 0) == 0) ++removed;
  }
  ::closedir(d);
  return removed;
}

}  // namespace tether::supervisor
