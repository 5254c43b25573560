// Process::Status() against a supervisor that never answers: its 30 s
// deadline (kStatusTimeout in host/process/process.cc) must expire harmlessly even
// when the call has already finished. The deadline timer's handler once
// captured the coroutine's locals by reference; a handler queued at expiry
// that ran after the call had returned wrote into its freed frame. Under
// AddressSanitizer (the asan preset) that was a heap-use-after-free in this
// test; elsewhere it passes either way. It takes the deadline's 30 s.
#include "tether/process.h"

#include <doctest.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>

#include "tether/errors.h"
#include "tests/host/faults/lying_supervisor.h"

namespace tether {
namespace {

namespace asio = boost::asio;
using std::chrono::milliseconds;
using testing::FrameOf;
using testing::LyingTransport;
using testing::WelcomeFor;

constexpr auto kStatusDeadline = std::chrono::seconds(30);  // kStatusTimeout

TEST_CASE("a status call aborted while its deadline expires leaves the expired handler nothing to touch") {
  asio::io_context io;
  auto transport = std::make_shared<LyingTransport>(
      io.get_executor(), [](std::uint64_t hello_id) { return FrameOf(WelcomeFor(hello_id)); },
      LyingTransport::kStall);  // welcomed, then silent: no status reply ever
  asio::cancellation_signal abort;
  std::optional<absl::Status> status_result;
  bool finished = false;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    StartOptions o;
    o.argv.push_back("sleep");
    absl::StatusOr<std::unique_ptr<Process>> p = co_await Process::Start(*transport, o);
    REQUIRE_MESSAGE(p.ok(), p.status().ToString());
    const auto sent = std::chrono::steady_clock::now();
    asio::co_spawn(io, (*p)->Status(),
                   asio::bind_cancellation_slot(abort.slot(), [&](std::exception_ptr e, absl::StatusOr<ProcessStatus> st) {
                     if (e) std::rethrow_exception(e);
                     status_result = st.status();
                   }));
    asio::steady_timer t(io, kStatusDeadline - milliseconds(500));
    co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
    REQUIRE_FALSE(status_result.has_value());  // still waiting for the reply
    // Hold the loop past the deadline, then abort the call: its wake-up is
    // queued ahead of the expired deadline's handler, so the call returns
    // (its frame freed) before that handler runs.
    std::this_thread::sleep_until(sent + kStatusDeadline + milliseconds(500));
    abort.emit(asio::cancellation_type::terminal);
    t.expires_after(milliseconds(100));
    co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
    REQUIRE(status_result.has_value());
    CHECK_MESSAGE(ErrorCodeOf(*status_result) == ErrorCode::kWaitAborted, status_result->ToString());
    CHECK((co_await (*p)->Disconnect()).ok());
    finished = true;
  }, [](std::exception_ptr e) { if (e) std::rethrow_exception(e); });
  io.run();
  CHECK(finished);
}

}  // namespace
}  // namespace tether
