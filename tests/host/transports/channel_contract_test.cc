// The Channel contract (include/tether/transport.h): what Process relies on when a
// native channel cannot cancel an operation, exit statuses where the native
// channel reports them, and the asynchronous close's default.
#include "tether/transport.h"

#include <doctest.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <memory>

#include "host/transports/spawn.h"
#include "tests/host/process/process_fixture.h"

namespace tether::testing {
namespace {

using std::chrono::milliseconds;
constexpr milliseconds kIgnoredFor{20000};  // how long a read outlives its cancellation

// A channel whose ReadSome ignores per-operation cancellation: it delivers
// nothing and returns only when Close() is called (or after kIgnoredFor),
// like a native SDK call that cannot be interrupted. Writes are swallowed,
// so the launch never reaches the supervisor.
class DeafChannel final : public Channel {
 public:
  DeafChannel(asio::any_io_executor ex, std::unique_ptr<Channel> inner)
      : inner_(std::move(inner)), closed_(std::make_shared<asio::steady_timer>(ex, kIgnoredFor)) {}
  awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char>) override {
    co_await asio::this_coro::reset_cancellation_state(
        [](asio::cancellation_type) { return asio::cancellation_type::none; });
    std::shared_ptr<asio::steady_timer> closed = closed_;
    co_await closed->async_wait(asio::as_tuple(asio::use_awaitable));
    co_return absl::UnavailableError("deaf channel: closed");
  }
  awaitable<absl::Status> Write(std::string_view) override { co_return absl::OkStatus(); }
  void CloseWrite() override {}
  void Close() override {
    closed_->cancel();
    inner_->Close();
  }
  std::string Diagnostics() const override { return {}; }

 private:
  std::unique_ptr<Channel> inner_;
  std::shared_ptr<asio::steady_timer> closed_;
};

class DeafTransport final : public internal::ForwardingTransport {
 public:
  using ForwardingTransport::ForwardingTransport;
  awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(std::vector<std::string> argv) override {
    auto ch = co_await inner().Exec(std::move(argv));
    if (!ch.ok()) co_return ch.status();
    co_return std::unique_ptr<Channel>(new DeafChannel(executor(), *std::move(ch)));
  }
};

TEST_CASE("a setup timeout cannot hang on a channel that ignores cancellation") {
  // Before: the timeout cancelled the attach and then waited for the read,
  // which ignored it (kIgnoredFor). Now the deadline also closes the
  // channel, which every channel must honour.
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    // The supervisor installed first, so that the timeout falls on the attach.
    absl::StatusOr<std::unique_ptr<Process>> warm = co_await Start(t, V("true"));
    REQUIRE(warm.ok());
    CHECK((co_await (*warm)->Wait()).ok());
    auto deaf_owner = std::make_shared<DeafTransport>(t);
    DeafTransport& deaf = *deaf_owner;
    StartOptions o = Opts();
    o.argv = V("true");
    o.setup_timeout_ms = 2000;
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<std::unique_ptr<Process>> p = co_await Process::Start(deaf, o);
    const auto took = std::chrono::steady_clock::now() - t0;
    REQUIRE(!p.ok());
    CAPTURE(p.status().ToString());
    CHECK(ErrorCodeOf(p.status()) == ErrorCode::kOutcomeUnknown);
    CHECK(std::string(p.status().message()).find("did not finish within 2000 ms") != std::string::npos);
    CAPTURE(std::chrono::duration_cast<milliseconds>(took).count());
    CHECK(took < kIgnoredFor / 2);
  });
}

TEST_CASE("a reopen's time limit cannot hang on a channel that ignores cancellation") {
  // Before: Reopen's deadline only cancelled the attach, whose read ignored
  // it (kIgnoredFor); now it closes the session as Start's does.
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    StartOptions o = Opts();
    o.argv = V("sleep", "30");
    absl::StatusOr<std::unique_ptr<Process>> p = co_await Process::Start(t, o);
    REQUIRE(p.ok());
    absl::StatusOr<std::string> ref = (*p)->Reference();
    REQUIRE(ref.ok());
    CHECK((co_await (*p)->Disconnect()).ok());
    p->reset();
    auto deaf_owner = std::make_shared<DeafTransport>(t);
    ReopenOptions ro;
    ro.timeout_ms = 2000;
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<std::unique_ptr<Process>> q = co_await Process::Reopen(*deaf_owner, *ref, ro);
    const auto took = std::chrono::steady_clock::now() - t0;
    REQUIRE(!q.ok());
    CAPTURE(q.status().ToString());
    CHECK(absl::IsUnavailable(q.status()));
    CHECK(std::string(q.status().message()).find("within the time limit") != std::string::npos);
    CAPTURE(std::chrono::duration_cast<milliseconds>(took).count());
    CHECK(took < kIgnoredFor / 2);
    // The process is untouched: a normal reopen still gets it.
    absl::StatusOr<std::unique_ptr<Process>> r = co_await Process::Reopen(t, *ref);
    REQUIRE(r.ok());
    CHECK((co_await (*r)->Terminate(1000)).ok());
  });
}

awaitable<std::unique_ptr<Channel>> SpawnSh(std::string script) {
  std::vector<std::string> argv = V("sh", "-c", std::move(script));
  absl::StatusOr<std::unique_ptr<Channel>> ch =
      internal::SpawnChannel(co_await asio::this_coro::executor, argv, "");
  REQUIRE(ch.ok());
  co_return *std::move(ch);
}

awaitable<std::optional<int>> ExitAfterEof(Channel& ch) {
  char buf[64];
  while (true) {
    absl::StatusOr<std::size_t> n = co_await ch.ReadSome({buf, sizeof buf});
    if (!n.ok() || *n == 0) break;
  }
  asio::steady_timer t(co_await asio::this_coro::executor);
  for (int i = 0; i < 200 && !ch.exit_code(); ++i) {  // (EOF can come just before the exit)
    t.expires_after(milliseconds(10));
    co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
  }
  co_return ch.exit_code();
}

TEST_CASE("a local channel reports its command's exit status after EOF") {
  asio::io_context io;
  asio::co_spawn(io, []() -> awaitable<void> {
    std::unique_ptr<Channel> a = co_await SpawnSh("echo hi; exit 3");
    CHECK(co_await ExitAfterEof(*a) == std::optional<int>(3));
    std::unique_ptr<Channel> b = co_await SpawnSh("kill -TERM $$");
    CHECK(co_await ExitAfterEof(*b) == std::optional<int>(128 + SIGTERM));
    // Reported once known, and unchanged by Close().
    b->Close();
    CHECK(b->exit_code() == std::optional<int>(128 + SIGTERM));
  }, [](std::exception_ptr e) { if (e) std::rethrow_exception(e); });
  io.run();
}

TEST_CASE("a channel closed while its command runs reports no exit status") {
  asio::io_context io;
  asio::co_spawn(io, []() -> awaitable<void> {
    std::unique_ptr<Channel> c = co_await SpawnSh("echo $$; exec sleep 30");
    char buf[64];
    (void)co_await c->ReadSome({buf, sizeof buf});
    CHECK(!c->exit_code());
    c->Close();
    CHECK(!c->exit_code());  // killed by us: no status of its own
  }, [](std::exception_ptr e) { if (e) std::rethrow_exception(e); });
  io.run();
}

// The least a channel implements: the defaults must hold.
class MinimalChannel final : public Channel {
 public:
  awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char>) override { co_return std::size_t{0}; }
  awaitable<absl::Status> Write(std::string_view) override { co_return absl::OkStatus(); }
  void CloseWrite() override {}
  void Close() override { ++closes; }
  std::string Diagnostics() const override { return {}; }
  int closes = 0;
};

TEST_CASE("by default AsyncClose is Close and no exit status is reported") {
  asio::io_context io;
  MinimalChannel ch;
  asio::co_spawn(io, [&]() -> awaitable<void> { co_await ch.AsyncClose(); },
                 [](std::exception_ptr e) { if (e) std::rethrow_exception(e); });
  io.run();
  CHECK(ch.closes == 1);
  CHECK(!ch.exit_code());
}

}  // namespace
}  // namespace tether::testing
