// Measures how long an event loop goes without running handlers: a timer
// re-armed every kTick records the largest gap between its wake-ups. Used
// by tests that a call never blocks the loop (the bound they check is
// generous: what they guard against is a stall of the blocking call's whole
// duration, not scheduling noise).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>

namespace tether::testing {

class LoopLatency {
 public:
  static constexpr std::chrono::milliseconds kTick{5};

  explicit LoopLatency(const boost::asio::any_io_executor& ex) : timer_(std::make_shared<State>(ex)) { Arm(timer_); }
  ~LoopLatency() { Stop(); }
  // Stops ticking (the loop can then run out of work).
  void Stop() {
    if (timer_->stopped) return;
    Record(*timer_);  // (a stall right before Stop() counts too)
    timer_->stopped = true;
    timer_->timer.cancel();
  }
  // The largest gap between two ticks beyond kTick so far.
  std::chrono::steady_clock::duration max_stall() const { return timer_->max_stall; }

 private:
  struct State {
    explicit State(const boost::asio::any_io_executor& ex) : timer(ex) {}
    boost::asio::steady_timer timer;
    std::chrono::steady_clock::time_point last = std::chrono::steady_clock::now();
    std::chrono::steady_clock::duration max_stall{};
    bool stopped = false;
  };
  static void Record(State& s) {
    const auto now = std::chrono::steady_clock::now();
    if (now - s.last - kTick > s.max_stall) s.max_stall = now - s.last - kTick;
    s.last = now;
  }
  static void Arm(std::shared_ptr<State> s) {
    s->timer.expires_after(kTick);
    s->timer.async_wait([s](boost::system::error_code ec) {
      if (ec || s->stopped) return;
      Record(*s);
      Arm(s);
    });
  }
  std::shared_ptr<State> timer_;
};

}  // namespace tether::testing
