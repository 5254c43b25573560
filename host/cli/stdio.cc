#include "host/cli/stdio.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"

namespace tether::cli {

namespace asio = boost::asio;

namespace {
constexpr std::size_t kMaxReadBytes = 1 << 20;  // per ReadSome through the helper thread
}  // namespace

// Shared by the loop (AsyncFd) and the helper thread; the thread holds it
// until it returns, which may be after the AsyncFd is gone (a read blocked
// on a terminal nobody types into).
struct AsyncFd::Worker {
  enum class Op { kNone, kRead, kWrite };

  int fd = -1;
  bool socket = false;
  int wake = -1;  // eventfd: wakes the thread's poll() when stopping

  std::mutex mu;
  std::condition_variable cv;
  Op op = Op::kNone;  // the request; kNone once taken
  std::size_t want = 0;
  std::string buf;  // read: the bytes read; write: the bytes to write
  bool done = false;
  ssize_t result = 0;
  int err = 0;
  bool stop = false;
  // Posts "done" to the loop; cleared (under mu) when the AsyncFd goes, so
  // the thread never touches the event loop after that.
  std::function<void()> notify;

  ~Worker() {
    if (wake >= 0) ::close(wake);
  }

  bool Stopping() {
    std::lock_guard<std::mutex> lock(mu);
    return stop;
  }

  // Waits until `fd` is ready for `events` or the thread is stopped (false).
  bool WaitReady(short events) {
    while (true) {
      pollfd p[2] = {{fd, events, 0}, {wake, POLLIN, 0}};
      const int n = ::poll(p, 2, -1);
      if (n < 0 && errno != EINTR) return !Stopping();  // (let the I/O call report it)
      if (Stopping()) return false;
      if (n > 0 && p[0].revents != 0) return true;
      if (n > 0 && (p[1].revents & POLLIN)) {
        std::uint64_t v;
        (void)!::read(wake, &v, sizeof v);
      }
    }
  }

  void DoRead(std::size_t n, std::string* out, ssize_t* res, int* e) {
    out->resize(n);
    while (true) {
      if (!WaitReady(POLLIN)) {
        *res = -1, *e = ECANCELED;
        break;
      }
      const ssize_t r = socket ? ::recv(fd, out->data(), n, MSG_DONTWAIT) : ::read(fd, out->data(), n);
      if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      *res = r, *e = r < 0 ? errno : 0;
      break;
    }
    out->resize(*res > 0 ? static_cast<std::size_t>(*res) : 0);
  }

  void DoWrite(const std::string& data, ssize_t* res, int* e) {
    std::size_t off = 0;
    *e = 0;
    while (off < data.size()) {
      if (!WaitReady(POLLOUT)) {
        *e = ECANCELED;
        break;
      }
      const ssize_t w = socket ? ::send(fd, data.data() + off, data.size() - off, MSG_DONTWAIT | MSG_NOSIGNAL)
                               : ::write(fd, data.data() + off, data.size() - off);
      if (w < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (w < 0) {
        *e = errno;
        break;
      }
      off += static_cast<std::size_t>(w);
    }
    *res = *e != 0 ? -1 : static_cast<ssize_t>(off);
  }

  static void Run(std::shared_ptr<Worker> w) {
    while (true) {
      Op op;
      std::size_t want;
      std::string data;
      {
        std::unique_lock<std::mutex> lock(w->mu);
        w->cv.wait(lock, [&] { return w->op != Op::kNone || w->stop; });
        if (w->op == Op::kNone) return;  // stopped while idle
        op = w->op;
        want = w->want;
        data = std::move(w->buf);
        w->op = Op::kNone;
      }
      ssize_t res = 0;
      int e = 0;
      if (op == Op::kRead) {
        w->DoRead(want, &data, &res, &e);
      } else {
        w->DoWrite(data, &res, &e);
        data.clear();
      }
      std::lock_guard<std::mutex> lock(w->mu);
      w->buf = std::move(data);
      w->result = res;
      w->err = e;
      w->done = true;
      if (w->notify) w->notify();
    }
  }
};

AsyncFd::AsyncFd(const asio::any_io_executor& ex, int fd)
    : fd_(fd), done_(ex, asio::steady_timer::time_point::max()) {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return;  // not open: kClosed
  // Files and block devices: plain calls, as they never wait on a peer.
  kind_ = S_ISREG(st.st_mode) || S_ISBLK(st.st_mode) ? Kind::kDirect : Kind::kThreaded;
  socket_ = S_ISSOCK(st.st_mode);
}

AsyncFd::~AsyncFd() { StopWorker(); }

void AsyncFd::StopWorker() {
  if (!worker_) return;
  {
    std::lock_guard<std::mutex> lock(worker_->mu);
    worker_->stop = true;
    worker_->notify = nullptr;  // the thread never posts to the loop again
  }
  worker_->cv.notify_one();
  const std::uint64_t one = 1;
  (void)!::write(worker_->wake, &one, sizeof one);
  worker_.reset();  // the thread keeps its own reference until it returns
}

void AsyncFd::Cancel() {
  cancelled_ = true;
  StopWorker();
  done_.cancel();
}

bool AsyncFd::EnsureWorker() {
  if (worker_) return true;
  auto w = std::make_shared<Worker>();
  w->fd = fd_;
  w->socket = socket_;
  w->wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (w->wake < 0) {
    error_ = errno;
    return false;
  }
  // (The post runs on the loop, where the AsyncFd also dies: a post queued
  // before that finds the token gone and does nothing.)
  w->notify = [ex = done_.get_executor(), this, alive = std::weak_ptr<bool>(alive_)] {
    asio::post(ex, [this, alive] {
      if (alive.lock()) done_.cancel();
    });
  };
  // All signals blocked in the helper: they are the event loop's to handle.
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  bool started = false;
  try {
    std::thread(Worker::Run, w).detach();
    started = true;
  } catch (const std::system_error& e) {
    error_ = e.code().value();
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (started) worker_ = std::move(w);
  return started;
}

asio::awaitable<bool> AsyncFd::Submit(int op, std::size_t want, std::string data) {
  {
    std::lock_guard<std::mutex> lock(worker_->mu);
    worker_->op = static_cast<Worker::Op>(op);
    worker_->want = want;
    worker_->buf = std::move(data);
    worker_->done = false;
  }
  worker_->cv.notify_one();
  while (true) {
    if (cancelled_ || !worker_) co_return false;
    {
      std::lock_guard<std::mutex> lock(worker_->mu);
      if (worker_->done) co_return true;
    }
    co_await done_.async_wait(asio::as_tuple(asio::use_awaitable));
  }
}

asio::awaitable<absl::StatusOr<std::size_t>> AsyncFd::ReadSome(std::span<char> buf) {
  if (kind_ == Kind::kClosed || cancelled_ || buf.empty()) co_return std::size_t{0};
  if (kind_ == Kind::kDirect) {
    while (true) {
      const ssize_t n = ::read(fd_, buf.data(), buf.size());
      if (n >= 0) co_return static_cast<std::size_t>(n);
      if (errno == EINTR) continue;
      error_ = errno;
      co_return absl::UnavailableError(absl::StrCat("read: ", std::strerror(errno)));
    }
  }
  if (!EnsureWorker()) co_return absl::UnavailableError(absl::StrCat("read: ", std::strerror(error_)));
  std::shared_ptr<Worker> w = worker_;
  if (!co_await Submit(static_cast<int>(Worker::Op::kRead), std::min(buf.size(), kMaxReadBytes), {})) {
    co_return std::size_t{0};  // cancelled: as at EOF
  }
  std::lock_guard<std::mutex> lock(w->mu);
  if (w->result < 0) {
    if (w->err == ECANCELED) co_return std::size_t{0};
    error_ = w->err;
    co_return absl::UnavailableError(absl::StrCat("read: ", std::strerror(w->err)));
  }
  std::memcpy(buf.data(), w->buf.data(), w->buf.size());
  co_return w->buf.size();
}

asio::awaitable<absl::Status> AsyncFd::WriteAll(std::string_view bytes) {
  if (kind_ == Kind::kClosed) {
    error_ = EBADF;
    co_return absl::UnavailableError("output is not open");
  }
  if (cancelled_) co_return absl::CancelledError("write cancelled");
  if (kind_ == Kind::kDirect) {
    while (!bytes.empty()) {
      const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
      if (n >= 0) {
        bytes.remove_prefix(static_cast<std::size_t>(n));
        continue;
      }
      if (errno == EINTR) continue;
      error_ = errno;
      co_return absl::UnavailableError(std::strerror(errno));
    }
    co_return absl::OkStatus();
  }
  if (bytes.empty()) co_return absl::OkStatus();
  if (!EnsureWorker()) co_return absl::UnavailableError(std::strerror(error_));
  std::shared_ptr<Worker> w = worker_;
  if (!co_await Submit(static_cast<int>(Worker::Op::kWrite), 0, std::string(bytes))) {
    co_return absl::CancelledError("write cancelled");
  }
  std::lock_guard<std::mutex> lock(w->mu);
  if (w->result < 0) {
    if (w->err == ECANCELED) co_return absl::CancelledError("write cancelled");
    error_ = w->err;
    co_return absl::UnavailableError(std::strerror(w->err));
  }
  co_return absl::OkStatus();
}

}  // namespace tether::cli
