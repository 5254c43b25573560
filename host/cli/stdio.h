// The CLI's own stdin/stdout/stderr as non-blocking async byte streams.
// Works for pipes, terminals, sockets and regular files (which never report
// EAGAIN, so they are simply read or written directly). The original file
// status flags are restored on destruction: a shared terminal is left as it
// was found.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <span>
#include <string_view>

#include "absl/status/statusor.h"

namespace tether::cli {

class AsyncFd {
 public:
  AsyncFd(const boost::asio::any_io_executor& ex, int fd);
  ~AsyncFd();
  AsyncFd(const AsyncFd&) = delete;
  AsyncFd& operator=(const AsyncFd&) = delete;

  // 0 at EOF (also when the fd is not open).
  boost::asio::awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf);
  // Writes everything; kUnavailable when the reader has gone (EPIPE) or the
  // write failed (ENOSPC, EIO, ...): error() tells which.
  boost::asio::awaitable<absl::Status> WriteAll(std::string_view bytes);
  // The errno of the last failed read or write (0 if none).
  int error() const { return error_; }
  // Stops pending waits (they return as if at EOF / failed).
  void Cancel();

 private:
  int fd_;
  int saved_flags_ = -1;
  int error_ = 0;
  boost::asio::posix::stream_descriptor waiter_;  // a dup of fd_, used only to wait
};

}  // namespace tether::cli
