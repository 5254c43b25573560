// A condition for coroutines on one executor: waiters re-check their state
// after every NotifyAll(). Single-threaded by design (one io_context thread
// drives a Process), so check-then-wait cannot miss a notification.
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/system/system_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>

namespace tether::internal {

class Condition {
 public:
  explicit Condition(const boost::asio::any_io_executor& ex)
      : timer_(ex, std::chrono::steady_clock::time_point::max()) {}

  void NotifyAll() { timer_.cancel(); }

  // False when the calling coroutine was cancelled (per-operation
  // cancellation, e.g. the losing side of `||`): the caller returns
  // WAIT_ABORTED. After a cancellation Asio makes every further co_await of
  // an operation throw; that is caught here too.
  boost::asio::awaitable<bool> Wait() {
    try {
      co_await timer_.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
    } catch (const boost::system::system_error&) {
      co_return false;
    }
    boost::asio::cancellation_state cs = co_await boost::asio::this_coro::cancellation_state;
    co_return cs.cancelled() == boost::asio::cancellation_type::none;
  }

 private:
  boost::asio::steady_timer timer_;
};

}  // namespace tether::internal
