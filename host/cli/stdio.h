// The CLI's own stdin/stdout/stderr as async byte streams on the event loop,
// without ever changing the flags of their open file descriptions: those are
// shared with the parent shell and siblings (`tether run ... | other`), and
// O_NONBLOCK set there would make them see EAGAIN.
//
// Regular files and block devices never block for long, so they are read or
// written directly. Anything else (pipes, terminals, sockets, character
// devices) is served by one helper thread per descriptor, which waits with
// poll() and then does a plain blocking read or write (sockets: with
// MSG_DONTWAIT); the event loop only awaits its completion.
//
//   AsyncFd out(ex, 1);
//   absl::Status st = co_await out.WriteAll(bytes);  // the loop keeps running
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tether::cli {

class AsyncFd {
 public:
  AsyncFd(const boost::asio::any_io_executor& ex, int fd);
  ~AsyncFd();
  AsyncFd(const AsyncFd&) = delete;
  AsyncFd& operator=(const AsyncFd&) = delete;

  // 0 at EOF (also when the fd is not open). One call at a time.
  boost::asio::awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf);
  // Writes everything; kUnavailable when the reader has gone (EPIPE) or the
  // write failed (ENOSPC, EIO, ...): error() tells which. One call at a time.
  boost::asio::awaitable<absl::Status> WriteAll(std::string_view bytes);
  // The errno of the last failed read or write (0 if none).
  int error() const { return error_; }
  // Ends the descriptor's use: a pending call returns at once (a read as at
  // EOF, having consumed nothing unless its bytes were already being read),
  // and later calls behave as at EOF / failed.
  void Cancel();

  struct Worker;  // the helper thread's side (stdio.cc)

 private:
  enum class Kind { kClosed, kDirect, kThreaded };
  // Starts the helper thread on first use; false (error_ set) if it cannot.
  bool EnsureWorker();
  void StopWorker();
  // Hands one operation to the helper and waits for it; false if cancelled.
  boost::asio::awaitable<bool> Submit(int op, std::size_t want, std::string data);

  int fd_;
  Kind kind_ = Kind::kClosed;
  bool socket_ = false;
  int error_ = 0;
  bool cancelled_ = false;
  boost::asio::steady_timer done_;  // cancelled when the helper finishes an operation
  std::shared_ptr<Worker> worker_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // for posts that outlive us
};

}  // namespace tether::cli
