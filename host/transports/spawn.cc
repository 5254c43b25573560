#include "host/transports/spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace tether::internal {
namespace {

namespace asio = boost::asio;
constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);
constexpr std::size_t kDiagnosticsBytes = 4096;

// One helper thread waits for the commands whose channels were closed while
// they still ran (after their SIGKILL), so that Close() never blocks and no
// zombie is left. Its state is never destroyed (it may outlive main()).
struct Reaper {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<pid_t> pids;
  bool started = false;
};

void ReapInBackground(pid_t pid) {
  static Reaper* const r = new Reaper;
  std::lock_guard<std::mutex> lock(r->mu);
  r->pids.push_back(pid);
  r->cv.notify_one();
  if (r->started) return;
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);  // signals are the application's
  try {
    std::thread([] {
      while (true) {
        pid_t next;
        {
          std::unique_lock<std::mutex> l(r->mu);
          r->cv.wait(l, [] { return !r->pids.empty(); });
          next = r->pids.front();
          r->pids.pop_front();
        }
        int st;
        while (::waitpid(next, &st, 0) < 0 && errno == EINTR) {
        }
      }
    }).detach();
    r->started = true;
  } catch (const std::system_error&) {
    // No thread: the next close tries again; until then it stays a zombie.
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

class LocalChannel final : public Channel {
 public:
  // `stdio` is our end of a socketpair that is the command's stdin and
  // stdout: a socket, so that writing after the command died is an error
  // (MSG_NOSIGNAL), never a SIGPIPE in the embedding application.
  // err < 0: no command, only a socket (ConnectChannel).
  LocalChannel(asio::any_io_executor ex, pid_t pid, int stdio, int err)
      : pid_(pid), io_(ex, asio::local::stream_protocol(), stdio),
        err_(std::make_shared<Stderr>(ex, err)) {
    if (err >= 0) asio::co_spawn(ex, DrainStderr(err_), asio::detached);
  }
  ~LocalChannel() override { Close(); }

  asio::awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf) override {
    if (!io_.is_open()) co_return absl::UnavailableError("channel closed");
    // EOF stays EOF. (Not asked of the reactor again: after a read that
    // came back short it waits for the socket's next edge, and a closed
    // peer makes none, so a second read would wait forever.)
    if (eof_) co_return std::size_t{0};
    auto [ec, n] = co_await io_.async_read_some(asio::buffer(buf.data(), buf.size()), kNoThrow);
    if (ec == asio::error::eof) {
      eof_ = true;
      co_return std::size_t{0};
    }
    if (ec) co_return absl::UnavailableError(absl::StrCat("local channel read: ", ec.message()));
    co_return n;
  }

  // (A read that returned less than it was offered drained the socket, so
  // the next bytes make a new edge for the reactor: the wait cannot miss them.)
  bool waits_readable() const override { return true; }
  asio::awaitable<absl::Status> WaitReadable() override {
    if (!io_.is_open()) co_return absl::UnavailableError("channel closed");
    auto [ec] = co_await io_.async_wait(asio::local::stream_protocol::socket::wait_read, kNoThrow);
    if (ec) co_return absl::UnavailableError(absl::StrCat("local channel wait: ", ec.message()));
    co_return absl::OkStatus();
  }

  asio::awaitable<absl::Status> Write(std::string_view bytes) override {
    if (!io_.is_open() || write_closed_) co_return absl::UnavailableError("channel input closed");
    auto [ec, n] = co_await asio::async_write(io_, asio::buffer(bytes.data(), bytes.size()), kNoThrow);
    if (ec) co_return absl::UnavailableError(absl::StrCat("local channel write: ", ec.message()));
    co_return absl::OkStatus();
  }

  void CloseWrite() override {
    boost::system::error_code ec;
    io_.shutdown(asio::local::stream_protocol::socket::shutdown_send, ec);
    write_closed_ = true;
  }

  void Close() override {
    boost::system::error_code ec;
    io_.close(ec);
    err_->fd.close(ec);
    if (pid_ > 0 && !TryReap()) {
      // The bridge holds no state; the daemon it relays for is unaffected.
      // Never waited for here: a process the kernel is slow to tear down
      // (or one stuck in an uninterruptible call) must not stall the loop.
      ::kill(pid_, SIGKILL);
      ReapInBackground(pid_);
      pid_ = -1;
    }
  }

  std::string Diagnostics() const override { return err_->diag; }

  std::optional<int> exit_code() const override {
    if (!exit_code_ && pid_ > 0) TryReap();
    return exit_code_;
  }

 private:
  // Shared with the draining coroutine, which may outlive the channel.
  struct Stderr {
    Stderr(asio::any_io_executor ex, int fd) : fd(std::move(ex)) {
      if (fd >= 0) this->fd.assign(fd);
    }
    asio::posix::stream_descriptor fd;
    std::string diag;  // the last kDiagnosticsBytes
  };

  static asio::awaitable<void> DrainStderr(std::shared_ptr<Stderr> s) {
    char buf[1024];
    while (s->fd.is_open()) {
      auto [ec, n] = co_await s->fd.async_read_some(asio::buffer(buf), kNoThrow);
      if (ec) break;
      s->diag.append(buf, n);
      if (s->diag.size() > kDiagnosticsBytes) s->diag.erase(0, s->diag.size() - kDiagnosticsBytes);
    }
  }

  // Reaps the command if it has exited (never waits) and records its
  // status; false while it runs. (Reaped by someone else: gone, no status.)
  bool TryReap() const {
    int st = 0;
    const pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == 0) return false;
    if (r == pid_) exit_code_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    pid_ = -1;
    return true;
  }

  mutable pid_t pid_;  // -1 once reaped (or for a connection)
  mutable std::optional<int> exit_code_;
  asio::local::stream_protocol::socket io_;
  bool write_closed_ = false;
  bool eof_ = false;
  std::shared_ptr<Stderr> err_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Channel>> ConnectChannel(const asio::any_io_executor& ex,
                                                        const std::string& state_dir) {
  // Opened without following a link, then checked through the descriptor.
  const int dirfd = ::open(state_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dirfd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("the process is gone: no ", state_dir));
    return ErrnoStatus(absl::StrCat("open ", state_dir, " (a directory, not a link)"), errno);
  }
  struct stat st {};
  if (::fstat(dirfd, &st) != 0 || st.st_uid != ::geteuid() || (st.st_mode & 0777) != 0700) {
    ::close(dirfd);
    return absl::FailedPreconditionError(absl::StrCat(state_dir, " is not a 0700 directory of ours"));
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string path = state_dir + "/sock";
  if (path.size() >= sizeof(addr.sun_path)) path = absl::StrCat("/proc/self/fd/", dirfd, "/sock");
  std::memcpy(addr.sun_path, path.c_str(), std::min(path.size() + 1, sizeof(addr.sun_path) - 1));
  // Non-blocking: a wedged daemon with a full backlog must not stall the
  // event loop (a Unix socket then refuses at once with EAGAIN).
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    ::close(dirfd);
    return ErrnoStatus("socket", errno);
  }
  const int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  const int e = errno;
  ::close(dirfd);
  if (rc != 0) {
    ::close(fd);
    if (e == ENOENT || e == ECONNREFUSED) return absl::NotFoundError(absl::StrCat("the process is gone: ", path));
    if (e == EAGAIN) return absl::UnavailableError(absl::StrCat("the supervisor at ", path, " accepts no connection now"));
    return ErrnoStatus(absl::StrCat("connect ", path), e);
  }
  ucred peer{};
  socklen_t len = sizeof peer;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0 || peer.uid != ::geteuid()) {
    ::close(fd);
    return absl::PermissionDeniedError(absl::StrCat(path, " is served by another user"));
  }
  return std::unique_ptr<Channel>(new LocalChannel(ex, -1, fd, -1));
}

absl::Status ErrnoStatus(const std::string& what, int err) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(err)));
}

absl::StatusOr<std::unique_ptr<Channel>> SpawnChannel(const asio::any_io_executor& ex,
                                                    const std::vector<std::string>& argv,
                                                    const std::string& cwd) {
  if (argv.empty()) return absl::InvalidArgumentError("exec: empty argv");
  int io[2], err[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, io) != 0) return ErrnoStatus("socketpair", errno);
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(io[0]), ::close(io[1]);
    return ErrnoStatus("pipe", errno);
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, io[1], 0);
  posix_spawn_file_actions_adddup2(&fa, io[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  // Its own process group: a terminal's Ctrl-C (a signal to our whole
  // group) is for us to forward to the child, not for the channel.
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, args[0], &fa, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(io[1]);
  ::close(err[1]);
  if (rc != 0) {
    ::close(io[0]), ::close(err[0]);
    return ErrnoStatus(absl::StrCat("exec ", argv[0]), rc);
  }
  return std::make_unique<LocalChannel>(ex, pid, io[0], err[0]);
}

}  // namespace tether::internal
