// A condition for coroutines on one executor: waiters re-check their state
// after every NotifyAll(). Single-threaded by design (one io_context thread
// drives a Process), so check-then-wait cannot miss a notification.
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>

namespace tether::internal {

class Condition {
 public:
  explicit Condition(const boost::asio::any_io_executor& ex)
      : timer_(ex, std::chrono::steady_clock::time_point::max()) {}

  void NotifyAll() { timer_.cancel(); }

  boost::asio::awaitable<void> Wait() {
    co_await timer_.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
  }

 private:
  boost::asio::steady_timer timer_;
};

}  // namespace tether::internal
