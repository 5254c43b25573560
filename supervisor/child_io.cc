#include "supervisor/child_io.h"

#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <cerrno>

namespace tether::supervisor {

using asio::awaitable;
using asio::posix::stream_descriptor;

ChildIo::ChildIo(asio::io_context& io, Supervised& process, ChildIoListener& listener)
    : io_(io), p_(process), listener_(listener), stdin_fd_(io), stdin_ready_(io.get_executor()) {
  for (auto& s : streams_) s = std::make_unique<Stream>(io);
}

void ChildIo::Start(const Child& child) {
  streams_[0]->fd.assign(child.stdout_fd);
  if (child.stderr_fd >= 0) {
    streams_[1]->fd.assign(child.stderr_fd);
  } else {
    p_.eof[1] = true;  // a terminal combines everything into stream 0
  }
  if (child.stdin_fd >= 0) {
    stdin_fd_.assign(child.stdin_fd);
  } else {
    p_.stdin_queue.Close();
  }
  for (int i = 0; i < kNumStreams; ++i) {
    if (!p_.eof[i]) asio::co_spawn(io_, OutputPump(i), RethrowOnError);
  }
  if (!p_.stdin_queue.closed()) asio::co_spawn(io_, StdinPump(), RethrowOnError);
}

absl::Status ChildIo::Resize(const wire::PtySize& size) {
  if (!streams_[0]->fd.is_open()) return absl::OkStatus();  // the terminal is gone with the child
  return ResizePty(streams_[0]->fd.native_handle(), size.cols(), size.rows());
}

std::size_t ChildIo::Unread(int i) {
  Stream& s = *streams_[i];
  int n = 0;
  if (!s.fd.is_open() || ::ioctl(s.fd.native_handle(), FIONREAD, &n) != 0 || n < 0) return 0;
  return static_cast<std::size_t>(n);
}

bool ChildIo::CutOutput() {
  bool cut = false;
  for (int i = 0; i < kNumStreams; ++i) {
    if (p_.eof[i]) continue;
    cut = true;
    boost::system::error_code ignored;
    streams_[i]->fd.close(ignored);
    streams_[i]->space.Notify();
  }
  return cut;
}

void ChildIo::CloseTerminal() {
  boost::system::error_code ec;
  streams_[0]->fd.close(ec);
}

awaitable<void> ChildIo::OutputPump(int i) {
  Stream& s = *streams_[i];
  OutputRing& ring = p_.rings[i];
  while (true) {
    std::span<char> space = ring.WritableSpan();
    if (space.empty()) {
      if (listener_.MayEvict()) {
        // Keep the newest bytes, a page at a time; a reattaching host is
        // told of the evicted range as an OutputGap.
        ring.Evict(std::min(ring.size(), kMinRingBytes));
        continue;
      }
      co_await s.space.Wait();  // backpressure: the child blocks on its full pipe
      continue;
    }
    const ssize_t n = ::read(s.fd.native_handle(), space.data(), space.size());
    if (n > 0) {
      ring.Commit(static_cast<std::size_t>(n));
      listener_.OutputArrived();
      // Less than offered from a pipe: it is empty. Wait for more instead
      // of a read that would fail with EAGAIN (one system call fewer per
      // wake; the reactor re-arms the descriptor for a wait, so bytes that
      // came in meanwhile still wake it). A terminal returns short reads
      // with more waiting: it reads on.
      if (static_cast<std::size_t>(n) == space.size() || (p_.pty() && i == 0)) continue;
      auto [ec] = co_await s.fd.async_wait(stream_descriptor::wait_read, kNoThrow);
      if (!ec) continue;
      break;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      auto [ec] = co_await s.fd.async_wait(stream_descriptor::wait_read, kNoThrow);
      if (!ec) continue;
    }
    break;  // EOF or a read error: either way nothing more comes
  }
  // A terminal's master stays open until the child is reaped: its last close
  // hangs the terminal up, and a SIGHUP must not reach a child still exiting.
  if (!(p_.pty() && i == 0)) {
    boost::system::error_code ec;
    s.fd.close(ec);
  }
  p_.eof[i] = true;
  listener_.OutputArrived();
  listener_.StreamEnded(i);
}

awaitable<void> ChildIo::StdinPump() {
  StdinQueue& q = p_.stdin_queue;
  while (true) {
    if (q.pending().empty()) {
      if (q.eof_due()) {
        // A terminal has no pipe to close: EOF is its EOF character, which
        // the line discipline turns into a zero-length read.
        if (p_.pty()) co_await WriteTerminalEof();
        break;
      }
      co_await stdin_ready_.Wait();
      continue;
    }
    const ssize_t n = ::write(stdin_fd_.native_handle(), q.pending().data(), q.pending().size());
    if (n > 0) {
      q.Written(static_cast<std::size_t>(n));
      listener_.StdinMoved();
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      auto [ec] = co_await stdin_fd_.async_wait(stream_descriptor::wait_write, kNoThrow);
      if (!ec) continue;
    }
    // EPIPE: the child closed its stdin. Later bytes are acknowledged and dropped.
    q.ChildClosed();
    break;
  }
  boost::system::error_code ec;
  stdin_fd_.close(ec);
  q.Close();
  listener_.StdinMoved();
}

awaitable<void> ChildIo::WriteTerminalEof() {
  struct termios t {};
  char veof = 4;  // ^D unless the terminal says otherwise
  if (::tcgetattr(stdin_fd_.native_handle(), &t) == 0 && t.c_cc[VEOF] != 0) veof = static_cast<char>(t.c_cc[VEOF]);
  while (true) {
    const ssize_t n = ::write(stdin_fd_.native_handle(), &veof, 1);
    if (n == 1 || (n < 0 && errno != EAGAIN && errno != EINTR)) co_return;
    if (n < 0 && errno == EAGAIN) {
      auto [ec] = co_await stdin_fd_.async_wait(stream_descriptor::wait_write, kNoThrow);
      if (ec) co_return;
    }
  }
}

}  // namespace tether::supervisor
