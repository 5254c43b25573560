#include "host/transports/spawn.h"

#include <doctest.h>
#include <poll.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cerrno>
#include <chrono>
#include <functional>
#include <memory>
#include <string>


namespace tether {
namespace {

namespace asio = boost::asio;
using std::chrono::milliseconds;

// Spawns `script` (which first prints its pid), closes the channel while the
// command still runs, and checks that Close() returned, that the command is
// reaped afterwards (no zombie stays) and, through `after_close`, whatever
// the case knows about the moment Close() returned. `before_close` gets the
// pid. (No wall-clock bound: a loaded CI core or ASan can make any call
// slow; what is checked is the order of events.)
void CloseWhileRunning(const std::string& script, const std::function<void(pid_t)>& before_close = {},
                       const std::function<void(pid_t)>& after_close = {}) {
  asio::io_context io;
  pid_t pid = -1;
  bool closed = false;
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
    // The command reaches its trap or its stop: the script does that right
    // after the echo, and Close() must cope either way, so this pause only
    // makes the interesting case the likely one.
    asio::steady_timer t(io, milliseconds(100));
    co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
    if (before_close) before_close(pid);
    (*ch)->Close();
    closed = true;
    if (after_close) after_close(pid);
    // Reaped in the background: the pid disappears (no zombie stays). 60 s
    // is only how long a broken reaper is waited for.
    for (int i = 0; i < 6000 && !reaped; ++i) {
      reaped = ::kill(pid, 0) != 0 && errno == ESRCH;
      t.expires_after(milliseconds(10));
      co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
    }
  }, [](std::exception_ptr e) { if (e) std::rethrow_exception(e); });
  io.run();
  CHECK(pid > 0);
  CHECK(closed);
  CHECK(reaped);
}

TEST_CASE("closing a channel whose command ignores SIGTERM neither waits nor leaves a zombie") {
  CloseWhileRunning("trap '' TERM; echo $$; while :; do sleep 1; done");
}

TEST_CASE("closing a channel whose command is stopped neither waits nor leaves a zombie") {
  CloseWhileRunning("echo $$; kill -STOP $$; sleep 30");
}

// A new process that holds `pid` as its tracer until Release() (or, if the
// test never gets there, kSafetyHold). A traced process that dies is a
// zombie only its tracer can see (waitpid(2) in the real parent reports it
// once the tracer lets go), so while held the command cannot be reaped
// however fast SIGKILL ends it: what a process the kernel is slow to tear
// down does to a blocking waitpid. `tracer` is -1 when ptrace is refused.
struct Tracer {
  // Only how long a Close() that wrongly waits for the reap blocks before
  // the check below reports it.
  static constexpr milliseconds kSafetyHold{60000};
  pid_t tracer = -1;
  int release = -1;  // closing it lets the tracer exit

  explicit Tracer(pid_t pid) {
    int ready[2], go[2];
    REQUIRE(::pipe(ready) == 0);
    REQUIRE(::pipe(go) == 0);
    tracer = ::fork();
    REQUIRE(tracer >= 0);
    if (tracer == 0) {
      ::close(go[1]);
      const char ok = ::ptrace(PTRACE_SEIZE, pid, nullptr, nullptr) == 0 ? 'y' : 'n';
      (void)!::write(ready[1], &ok, 1);
      pollfd p{go[0], POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(kSafetyHold.count()));
      ::_exit(0);
    }
    ::close(ready[1]);
    ::close(go[0]);
    release = go[1];
    char ok = 'n';
    const bool got = ::read(ready[0], &ok, 1) == 1;
    ::close(ready[0]);
    if (!got || ok != 'y') Release();
  }
  ~Tracer() { Release(); }
  // True while the tracer still holds the command.
  bool holding() const { return tracer > 0 && ::waitpid(tracer, nullptr, WNOHANG) == 0; }
  void Release() {
    if (release >= 0) ::close(release);
    release = -1;
    if (tracer > 0) ::waitpid(tracer, nullptr, 0);
    tracer = -1;
  }
};

TEST_CASE("closing a channel whose killed command cannot be reaped yet does not block the loop") {
  std::unique_ptr<Tracer> tracer;
  bool traced = false;
  bool held_after_close = false;
  CloseWhileRunning(
      "trap '' TERM; echo $$; while :; do sleep 1; done",
      [&](pid_t pid) {
        tracer = std::make_unique<Tracer>(pid);
        traced = tracer->tracer > 0;
        // (Yama's ptrace_scope >= 1 refuses a sibling tracer: then the case
        // says so and checks only what the others do.)
        if (tracer->tracer < 0) MESSAGE("ptrace(PTRACE_SEIZE) is refused here: no tracer held the command");
      },
      [&](pid_t) {
        // Close() returned while the command could not be reaped yet: it did
        // not wait for the reap. (One that waits returns only once the
        // tracer gives up, kSafetyHold later, and then this is false.)
        held_after_close = tracer->holding();
        tracer->Release();  // now the background reaper can finish
      });
  if (traced) CHECK(held_after_close);
}

// A channel whose command (`true`) exits at once without writing.
absl::StatusOr<std::unique_ptr<Channel>> SpawnTrue(asio::io_context& io) {
  std::vector<std::string> argv;
  argv.push_back("true");
  return internal::SpawnChannel(io.get_executor(), argv, "");
}

TEST_CASE("closing a channel whose command already exited reaps it at once") {
  asio::io_context io;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<std::unique_ptr<Channel>> ch = SpawnTrue(io);
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

TEST_CASE("a read after the channel's EOF is EOF again, at once") {
  // Asio's reactor is edge-triggered: after a short read it waits for the
  // socket's next edge, and a peer that is gone makes none. A second read
  // (the start script's need-line reader did one) then waited until the
  // reopen's 30 s deadline; crash_test --trial 95 hung so about 1 run in 12.
  asio::io_context io;
  bool done = false;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<std::unique_ptr<Channel>> ch = SpawnTrue(io);
    REQUIRE(ch.ok());
    char buf[16];
    for (int i = 0; i < 3; ++i) {
      absl::StatusOr<std::size_t> n = co_await (*ch)->ReadSome({buf, sizeof buf});
      CHECK((n.ok() && *n == 0));
    }
    done = true;
    (*ch)->Close();
  }, [](std::exception_ptr e) { if (e) std::rethrow_exception(e); });
  asio::steady_timer limit(io, milliseconds(5000));
  limit.async_wait([&](boost::system::error_code ec) {
    if (!ec) io.stop();
  });
  while (!done && !io.stopped()) io.run_one();
  CHECK(done);
}

}  // namespace
}  // namespace tether
