// Runs a blocking function (file reads, hashing a binary) on its own thread
// and resumes the awaiting coroutine on its executor with the result, so
// the event loop keeps serving everything else meanwhile.
//
//   absl::StatusOr<std::string> bytes =
//       co_await RunOffLoop<absl::StatusOr<std::string>>([path] { return ReadAll(path); });
//
// The io_context counts the call as outstanding work until the result is
// delivered. Not cancellable: use it for work that ends by itself.
#pragma once

#include <signal.h>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <functional>
#include <thread>
#include <utility>

namespace tether::internal {

template <typename T>
boost::asio::awaitable<T> RunOffLoop(std::function<T()> fn) {
  namespace asio = boost::asio;
  auto ex = co_await asio::this_coro::executor;
  // (Named, not temporaries in the co_await operand: g++ 12 mishandles
  // those inside coroutines.)
  auto initiate = [ex](auto handler, std::function<T()> work) {
    auto tracked = asio::prefer(ex, asio::execution::outstanding_work.tracked);
    // All signals blocked on the helper: they are the application's.
    sigset_t all, old;
    sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &old);
    std::thread([handler = std::move(handler), work = std::move(work), tracked]() mutable {
      T result = work();
      asio::post(tracked, [handler = std::move(handler), result = std::move(result)]() mutable {
        std::move(handler)(std::move(result));
      });
    }).detach();
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  };
  auto op = asio::async_initiate<const asio::use_awaitable_t<>&, void(T)>(std::move(initiate), asio::use_awaitable,
                                                                          std::move(fn));
  co_return co_await std::move(op);
}

}  // namespace tether::internal
