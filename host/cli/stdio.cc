#include "host/cli/stdio.h"

#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tether::cli {

namespace asio = boost::asio;

AsyncFd::AsyncFd(const asio::any_io_executor& ex, int fd) : fd_(fd), waiter_(ex) {
  saved_flags_ = ::fcntl(fd_, F_GETFL);
  if (saved_flags_ < 0) return;  // not open
  ::fcntl(fd_, F_SETFL, saved_flags_ | O_NONBLOCK);
  const int dup = ::fcntl(fd_, F_DUPFD_CLOEXEC, 3);
  if (dup >= 0) waiter_.assign(dup);
}

AsyncFd::~AsyncFd() {
  boost::system::error_code ec;
  waiter_.close(ec);
  if (saved_flags_ >= 0) ::fcntl(fd_, F_SETFL, saved_flags_);
}

void AsyncFd::Cancel() {
  boost::system::error_code ec;
  waiter_.cancel(ec);
}

asio::awaitable<absl::StatusOr<std::size_t>> AsyncFd::ReadSome(std::span<char> buf) {
  if (saved_flags_ < 0) co_return std::size_t{0};
  while (true) {
    const ssize_t n = ::read(fd_, buf.data(), buf.size());
    if (n >= 0) co_return static_cast<std::size_t>(n);
    if (errno == EINTR) continue;
    if (errno != EAGAIN) {
      error_ = errno;
      co_return absl::UnavailableError(absl::StrCat("read: ", std::strerror(errno)));
    }
    auto [ec] = co_await waiter_.async_wait(asio::posix::stream_descriptor::wait_read,
                                            asio::as_tuple(asio::use_awaitable));
    if (ec) co_return absl::CancelledError("read cancelled");
  }
}

asio::awaitable<absl::Status> AsyncFd::WriteAll(std::string_view bytes) {
  if (saved_flags_ < 0) {
    error_ = EBADF;
    co_return absl::UnavailableError("output is not open");
  }
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n >= 0) {
      bytes.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN) {
      error_ = errno;
      co_return absl::UnavailableError(std::strerror(errno));
    }
    auto [ec] = co_await waiter_.async_wait(asio::posix::stream_descriptor::wait_write,
                                            asio::as_tuple(asio::use_awaitable));
    if (ec) co_return absl::CancelledError("write cancelled");
  }
  co_return absl::OkStatus();
}

}  // namespace tether::cli
