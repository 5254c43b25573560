// A pause in a coroutine (a backoff between attempts, a poll's interval).
// Per-operation cancellation ends it early, without an exception: the
// caller checks its own state after it, as after any wait.
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>

namespace tether::internal {

inline boost::asio::awaitable<void> Sleep(std::chrono::milliseconds d) {
  boost::asio::steady_timer t(co_await boost::asio::this_coro::executor, d);
  co_await t.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
}

}  // namespace tether::internal
