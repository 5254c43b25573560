// Reaping on the daemon's loop: the child's exit status and every orphan
// reparented to the daemon (its subreaper), and terminate's sweep of what
// escaped the child's process group.
//
// Owns the SIGCHLD wait and the sweep's timer. Never blocks: wait4 is
// WNOHANG, and the sweep's pauses are timer waits on the loop (once a
// usleep loop of up to 1 s). Never decides when to terminate: the daemon
// calls Sweep() and hears of the child's exit through `on_exit`.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>

#include "supervisor/async.h"

namespace tether::supervisor {

// Terminate's sweep of what escaped the child's group: it goes on killing
// and reaping until nothing of ours is left, giving up only after
// kOrphanSweepMs in which no process died (one that cannot die, stuck in
// the kernel), or after kOrphanSweepMaxMs in all (a tree that keeps
// growing); the pauses between its rounds double from the first.
inline constexpr std::chrono::milliseconds kOrphanSweepMs{3000};
inline constexpr std::chrono::milliseconds kOrphanSweepMaxMs{30000};
inline constexpr std::chrono::milliseconds kOrphanSweepFirstPause{5};
inline constexpr std::chrono::milliseconds kOrphanSweepMaxPause{100};

// Sends `sig` to every process whose parent is us: descendants that left the
// child's process group (setsid) and were reparented to us, the subreaper,
// when their parent died. Returns how many there were, zombies included
// (they are ours until reaped).
std::size_t SignalOrphans(int sig);
// Sends `sig` to every descendant of ours (DescendantsOf): orphans, and
// what they started, which would be reparented to us only once its own
// parent died. Returns how many there were, zombies included.
std::size_t SignalDescendants(int sig);

class Reaper {
 public:
  // `on_exit(status, rusage)`: the child `pid` (set_child) was reaped.
  // `on_swept`: a sweep ended (none left, or its time is up).
  Reaper(asio::io_context& io, std::function<void(int, const struct rusage&)> on_exit,
         std::function<void()> on_swept);

  void set_child(pid_t pid) { child_ = pid; }
  // Reaps on every SIGCHLD until Stop().
  asio::awaitable<void> Run();
  void Stop() { stopped_ = true; }
  // Reaps whatever has exited, now.
  void Reap();
  // Kills and reaps everything reparented to us, in rounds until none is
  // left or kOrphanSweepMs passed. A sweep in progress goes on.
  void Sweep();
  bool sweeping() const { return sweeping_; }

 private:
  void Round();
  void Done();

  asio::signal_set sigchld_;
  asio::steady_timer timer_;
  std::function<void(int, const struct rusage&)> on_exit_;
  std::function<void()> on_swept_;
  pid_t child_ = -1;
  bool stopped_ = false;
  bool sweeping_ = false;
  std::chrono::steady_clock::time_point deadline_;  // kOrphanSweepMs after the last death
  std::chrono::steady_clock::time_point end_;       // kOrphanSweepMaxMs after the start
  std::size_t left_ = 0;                            // descendants the last round found
  std::chrono::milliseconds pause_ = kOrphanSweepFirstPause;
};

}  // namespace tether::supervisor
