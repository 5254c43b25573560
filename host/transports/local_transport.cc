#include "tether/local_transport.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "host/support/off_loop.h"
#include "host/transports/spawn.h"

namespace tether {
namespace {

namespace asio = boost::asio;
using internal::ErrnoStatus;

absl::Status EnsurePrivateDir(const std::string& path) {
  // No umask change: it is process-wide, and the application's other
  // threads create files too. mkdir gives at most 0700; a umask that took
  // our own bits is repaired with chmod on what we just created.
  const int rc = ::mkdir(path.c_str(), 0700);
  const int err = errno;
  if (rc != 0 && err != EEXIST) return ErrnoStatus(absl::StrCat("mkdir ", path), err);
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return ErrnoStatus(absl::StrCat("lstat ", path), errno);
  if (rc == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::geteuid() && (st.st_mode & 0777) != 0700) {
    if (::chmod(path.c_str(), 0700) != 0) return ErrnoStatus(absl::StrCat("chmod ", path), errno);
    st.st_mode = (st.st_mode & ~0777) | 0700;
  }
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "local sandbox ", path, " must be a directory owned by us with no group/other access"));
  }
  return absl::OkStatus();
}

class LocalTransport final : public Transport, public DirectConnector {
 public:
  LocalTransport(asio::any_io_executor ex, std::string root, std::string default_cwd)
      : ex_(std::move(ex)), root_(std::move(root)), default_cwd_(std::move(default_cwd)) {}

  std::string_view name() const override { return "local"; }
  std::string sandbox_id() const override { return root_; }
  asio::any_io_executor executor() const override { return ex_; }

  asio::awaitable<absl::StatusOr<SandboxInfo>> Probe() override {
    struct utsname u;
    if (::uname(&u) != 0) co_return ErrnoStatus("uname", errno);
    SandboxInfo info;
    info.arch = u.machine;
    info.state_root = root_ + "/run";
    info.bin_dir = root_ + "/bin";
    if (absl::Status st = EnsurePrivateDir(info.bin_dir); !st.ok()) co_return st;
    if (absl::Status st = EnsurePrivateDir(info.state_root); !st.ok()) co_return st;
    co_return info;
  }

  asio::awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(std::vector<std::string> argv) override {
    // The launcher gives a child without a cwd its own directory.
    co_return internal::SpawnChannel(ex_, argv, DefaultCwd());
  }

  ChannelCapabilities capabilities() const override { return CapabilitiesOf(TunnelMode::kDirect); }
  // Decorators (tests, the CLI's supervisor policy) run starts through Exec
  // and a start script: in this sandbox's own directory.
  ScriptOverrides script_overrides() const override {
    ScriptOverrides o;
    o.private_root = root_;
    return o;
  }
  asio::awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Connect(std::string state_dir) override {
    co_return internal::ConnectChannel(ex_, state_dir);
  }

  asio::awaitable<absl::Status> PutFile(std::string path, std::string_view bytes, int mode) override {
    // Comparing and writing a supervisor binary (megabytes) is file I/O:
    // done on a helper thread, never on the loop. (`bytes` stays valid: the
    // caller awaits us.)
    std::function<absl::Status()> put = [path = std::move(path), bytes, mode] { return Put(path, bytes, mode); };
    co_return co_await internal::RunOffLoop<absl::Status>(std::move(put));
  }

 private:
  // A regular file (not a link) of exactly `bytes`: compared by size first,
  // then in one read.
  static bool SameContent(const std::string& path, std::string_view bytes) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return false;
    struct stat st {};
    bool same = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && static_cast<std::size_t>(st.st_size) == bytes.size();
    if (same) {
      std::string have(bytes.size(), '\0');
      std::size_t off = 0;
      while (off < have.size()) {
        const ssize_t n = ::read(fd, have.data() + off, have.size() - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        off += static_cast<std::size_t>(n);
      }
      same = off == have.size() && have == bytes;
    }
    ::close(fd);
    return same;
  }

  static absl::Status Put(const std::string& path, std::string_view bytes, int mode) {
    if (SameContent(path, bytes)) return absl::OkStatus();
    const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0) return ErrnoStatus(absl::StrCat("create ", tmp), errno);
    std::size_t off = 0;
    while (off < bytes.size()) {
      const ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const int e = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        return ErrnoStatus(absl::StrCat("write ", tmp), e);
      }
      off += static_cast<std::size_t>(n);
    }
    ::fchmod(fd, static_cast<mode_t>(mode));
    ::close(fd);
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      const int e = errno;
      ::unlink(tmp.c_str());
      return ErrnoStatus(absl::StrCat("rename to ", path), e);
    }
    return absl::OkStatus();
  }

  std::string DefaultCwd() const {
    if (!default_cwd_.empty()) return default_cwd_;
    char buf[4096];
    if (::getcwd(buf, sizeof buf) != nullptr && buf[0] == '/') return buf;
    return "/";
  }

  asio::any_io_executor ex_;
  std::string root_;
  std::string default_cwd_;
};

std::string DefaultRoot() {
  if (const char* r = std::getenv("TETHER_LOCAL_ROOT"); r && *r) return r;
  if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x && *x == '/') return absl::StrCat(x, "/tether-local");
  // A relative TMPDIR would put the sandbox in whatever directory we are in.
  if (const char* t = std::getenv("TMPDIR"); t && *t == '/') {
    std::string dir(t);
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    return absl::StrCat(dir, "/tether-local-", ::geteuid());
  }
  return absl::StrCat("/tmp/tether-local-", ::geteuid());
}

}  // namespace

absl::StatusOr<std::shared_ptr<Transport>> MakeLocalTransport(asio::any_io_executor ex,
                                                              LocalOptions options) {
  std::string root = options.root.empty() ? DefaultRoot() : options.root;
  if (root.empty() || root[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat("local root must be absolute: '", root, "'"));
  }
  if (absl::Status st = EnsurePrivateDir(root); !st.ok()) return st;
  if (!options.default_cwd.empty() && options.default_cwd[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat("default_cwd must be absolute: '", options.default_cwd, "'"));
  }
  return std::shared_ptr<Transport>(new LocalTransport(std::move(ex), std::move(root), std::move(options.default_cwd)));
}

absl::StatusOr<std::shared_ptr<Transport>> MakeLocalTransport(asio::any_io_executor ex) {
  return MakeLocalTransport(std::move(ex), LocalOptions{});
}

}  // namespace tether
