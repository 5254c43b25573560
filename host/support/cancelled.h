// Whether the calling coroutine was cancelled (a deadline, the caller).
//
// A cancellation that arrives while no operation is pending, between two
// awaits or during one that cannot be cancelled (RunOffLoop), reaches no
// operation: the coroutine's cancellation state only records it. Every step
// that starts a new native call after such a point asks here first, or a
// transport that honours cancellation only while an operation is pending
// would run on past a deadline.
//
//   if (co_await internal::Cancelled()) co_return absl::CancelledError(...);
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_state.hpp>
#include <boost/asio/this_coro.hpp>

namespace tether::internal {

inline boost::asio::awaitable<bool> Cancelled() {
  boost::asio::cancellation_state cs = co_await boost::asio::this_coro::cancellation_state;
  co_return cs.cancelled() != boost::asio::cancellation_type::none;
}

}  // namespace tether::internal
