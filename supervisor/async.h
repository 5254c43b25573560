// Small Asio helpers shared by the supervisor loop: error-as-value
// completion tokens and a one-waiter wake-up primitive.
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <exception>

namespace tether::supervisor {

namespace asio = boost::asio;
inline constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);

// Wakes one waiting coroutine. A Notify() with nobody waiting is remembered,
// so a wake-up between "check state" and "wait" is never lost.
class Notifier {
 public:
  explicit Notifier(const asio::any_io_executor& ex)
      : timer_(ex, std::chrono::steady_clock::time_point::max()) {}

  void Notify() {
    pending_ = true;
    timer_.cancel();
  }

  asio::awaitable<void> Wait() {
    if (!pending_) co_await timer_.async_wait(kNoThrow);
    pending_ = false;
  }

 private:
  asio::steady_timer timer_;
  bool pending_ = false;
};

// Completion for co_spawn: an exception escaping a coroutine is our bug.
inline void RethrowOnError(std::exception_ptr e) {
  if (e) std::rethrow_exception(e);
}

}  // namespace tether::supervisor
