#include "host/internal/spawn.h"

#include <doctest.h>
#include <signal.h>
#include <sys/wait.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cerrno>
#include <chrono>
#include <string>

#include "tests/host/loop_latency.h"

namespace tether {
namespace {

namespace asio = boost::asio;
using std::chrono::milliseconds;

// Spawns `script` (which first prints its pid), closes the channel while the
// command still runs, and checks that the loop kept running and that the
// command is reaped afterwards, not by Close().
void CloseWhileRunning(const std::string& script) {
  asio::io_context io;
  testing::LoopLatency latency(io.get_executor());
  pid_t pid = -1;
  std::chrono::steady_clock::duration close_took{};
  bool reaped = false;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    std::vector<std::string> argv;  // (named: g++ 12 and braced lists in coroutines)
    argv.push_back("sh");
    argv.push_back("-c");
    argv.push_back(script);
    absl::StatusOr<std::unique_ptr<Channel>> ch = internal::SpawnChannel(io.get_executor(), argv, "");
    REQUIRE(ch.ok());
    std::string got;
    char buf[64];
    while (got.find('\n') == std::string::npos) {
      absl::StatusOr<std::size_t> n = co_await (*ch)->ReadSome({buf, sizeof buf});
      REQUIRE(n.ok());
      REQUIRE(*n > 0);
      got.append(buf, *n);
    }
    pid = std::stoi(got);
    asio::steady_timer t(io, milliseconds(100));  // (let it reach its stop or trap)
    co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
    const auto t0 = std::chrono::steady_clock::now();
    (*ch)->Close();
    close_took = std::chrono::steady_clock::now() - t0;
    // Reaped in the background: the pid disappears (no zombie stays).
    for (int i = 0; i < 500 && !reaped; ++i) {
      reaped = ::kill(pid, 0) != 0 && errno == ESRCH;
      t.expires_after(milliseconds(10));
      co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
    }
    latency.Stop();
  }, [](std::exception_ptr e) { if (e) std::rethrow_exception(e); });
  io.run();
  CHECK(pid > 0);
  CHECK(reaped);
  CAPTURE(std::chrono::duration_cast<milliseconds>(close_took).count());
  CAPTURE(std::chrono::duration_cast<milliseconds>(latency.max_stall()).count());
  CHECK(close_took < milliseconds(500));
  CHECK(latency.max_stall() < milliseconds(1000));
}

TEST_CASE("closing a channel whose command ignores SIGTERM neither waits nor leaves a zombie") {
  CloseWhileRunning("trap '' TERM; echo $$; while :; do sleep 1; done");
}

TEST_CASE("closing a channel whose command is stopped neither waits nor leaves a zombie") {
  CloseWhileRunning("echo $$; kill -STOP $$; sleep 30");
}

TEST_CASE("closing a channel whose command already exited reaps it at once") {
  asio::io_context io;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    std::vector<std::string> argv;
    argv.push_back("true");
    absl::StatusOr<std::unique_ptr<Channel>> ch = internal::SpawnChannel(io.get_executor(), argv, "");
    REQUIRE(ch.ok());
    char buf[16];
    absl::StatusOr<std::size_t> n = co_await (*ch)->ReadSome({buf, sizeof buf});
    CHECK((n.ok() && *n == 0));
    asio::steady_timer t(io, milliseconds(200));
    co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
    (*ch)->Close();
  }, [](std::exception_ptr e) { if (e) std::rethrow_exception(e); });
  io.run();
  int st;
  CHECK(::waitpid(-1, &st, WNOHANG) <= 0);  // nothing of ours left to reap
}

}  // namespace
}  // namespace tether
