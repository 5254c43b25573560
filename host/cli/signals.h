// The CLI's job signals (SIGINT, SIGTERM, SIGHUP) and terminal size changes
// on its event loop: during setup they cancel the start, afterwards they are
// forwarded to the child's process group.
#pragma once

#include <signal.h>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/signal_set.hpp>
#include <deque>

#include "host/support/condition.h"
#include "tether/process.h"

namespace tether::cli {

inline constexpr std::size_t kMaxPendingSignals = 64;  // queued for the child; more are coalesced

// SIGINT, SIGTERM and SIGHUP.
sigset_t JobSignals();
// Our own terminal's size (cols, rows), if stdin, stdout or stderr is one.
std::optional<std::pair<unsigned, unsigned>> OwnTerminalSize();

// The CLI's signals, installed before the transport exists and kept until
// the event loop ends, so SIGINT, SIGTERM and SIGHUP never take their
// default action (which would kill tether and leave a child nobody can
// reach). During setup a signal cancels the start (a cancellation marker
// stops a delayed launch); afterwards signals are queued and one forwarder
// coroutine, joined before the process handle goes away, sends them to the
// child's process group. Handlers never hold a reference to a Process.
class CliSignals {
 public:
  explicit CliSignals(const boost::asio::any_io_executor& ex)
      : set_(ex, SIGINT, SIGTERM, SIGHUP), winch_(ex, SIGWINCH), cond_(ex) {
    Arm();
    ArmWinch();
  }

  // Bind to the setup call: a signal during setup cancels it.
  boost::asio::cancellation_slot setup_slot() { return setup_cancel_.slot(); }
  // Setup is over: later signals are for the child. One that raced with the
  // end of setup is queued for it.
  void EndSetup() {
    if (!in_setup_) return;
    in_setup_ = false;
    if (setup_signal_ != 0) Push(setup_signal_);
  }
  int setup_signal() const { return setup_signal_; }

  // Sends queued signals (and, with a pty, our terminal size changes) to `p`
  // until Stop... is requested; returns once it has stopped.
  boost::asio::awaitable<void> Forward(Process& p) {
    while (!forward_stop_) {
      if (!pending_.empty()) {
        const int sig = pending_.front();
        pending_.pop_front();
        co_await p.Signal(sig);
        continue;
      }
      if (winched_) {
        winched_ = false;
        if (p.has_pty()) {
          if (auto size = OwnTerminalSize()) co_await p.Resize(size->first, size->second);
        }
        continue;
      }
      co_await cond_.Wait();
    }
    forward_stop_ = false;
  }
  void StopForwarding() {
    forward_stop_ = true;
    cond_.NotifyAll();
  }
  // The loop is done: stop listening (io_context::run can then return).
  void Stop() {
    stopped_ = true;
    boost::system::error_code ec;
    set_.cancel(ec);
    winch_.cancel(ec);
    cond_.NotifyAll();
  }

 private:
  void Arm() {
    set_.async_wait([this](boost::system::error_code ec, int sig) {
      if (ec || stopped_) return;
      if (in_setup_) {
        if (setup_signal_ == 0) setup_signal_ = sig;
        setup_cancel_.emit(boost::asio::cancellation_type::terminal);
      } else {
        Push(sig);
      }
      Arm();
    });
  }
  void ArmWinch() {
    winch_.async_wait([this](boost::system::error_code ec, int) {
      if (ec || stopped_) return;
      winched_ = true;
      cond_.NotifyAll();
      ArmWinch();
    });
  }
  void Push(int sig) {
    // A burst of the same signal is one signal, as the kernel's own pending
    // set would make it; the queue stays bounded.
    if (!pending_.empty() && pending_.back() == sig) return;
    if (pending_.size() >= kMaxPendingSignals) return;
    pending_.push_back(sig);
    cond_.NotifyAll();
  }

  boost::asio::signal_set set_;
  boost::asio::signal_set winch_;
  internal::Condition cond_;
  boost::asio::cancellation_signal setup_cancel_;
  std::deque<int> pending_;
  bool in_setup_ = true;
  int setup_signal_ = 0;
  bool winched_ = false;
  bool forward_stop_ = false;
  bool stopped_ = false;
};

}  // namespace tether::cli
