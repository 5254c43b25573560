#include "supervisor/reaper.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "supervisor/proc.h"

namespace tether::supervisor {

using std::chrono::steady_clock;

std::size_t SignalOrphans(int sig) {
  const std::vector<pid_t> orphans = ChildrenOf(::getpid());
  for (pid_t p : orphans) ::kill(p, sig);
  return orphans.size();
}

std::size_t SignalDescendants(int sig) {
  // A descendant's pid cannot be reused between the walk and the kill
  // unless the kernel went round its whole pid space in between: pids are
  // handed out cyclically.
  const std::vector<pid_t> all = DescendantsOf(::getpid());
  for (pid_t p : all) ::kill(p, sig);
  return all.size();
}

Reaper::Reaper(asio::io_context& io, std::function<void(int, const struct rusage&)> on_exit,
               std::function<void()> on_swept)
    : sigchld_(io, SIGCHLD), timer_(io), on_exit_(std::move(on_exit)), on_swept_(std::move(on_swept)) {}

asio::awaitable<void> Reaper::Run() {
  while (!stopped_) {
    Reap();
    auto [ec, sig] = co_await sigchld_.async_wait(kNoThrow);
    if (ec) break;
  }
}

void Reaper::Reap() {
  while (true) {
    int status = 0;
    struct rusage ru {};
    const pid_t p = ::wait4(-1, &status, WNOHANG, &ru);
    if (p <= 0) break;
    if (p == child_) on_exit_(status, ru);
    // Anything else is a descendant reparented to us (we are its subreaper).
  }
}

void Reaper::Sweep() {
  // Terminate means everything the child started, not only its group. What
  // escaped with setsid is reparented to us only when its parent dies, and
  // its own children only after it died in turn (setsid sh -c '...; sleep':
  // the sleep outlives the killed sh). Killing only our children took a
  // round per generation, so a chain of 60 nested escapees outlived a 3 s
  // sweep (half of it was left, for good), and a loaded machine, slower per
  // round, ran out of sweep with far fewer. So each round kills every
  // descendant at once, and rounds go on until none is left (see
  // kOrphanSweepMs for when it gives up). A zombie left to an init that
  // never reaps (a sandbox whose pid 1 is `sleep`) would look alive:
  // everything killed is reaped here too.
  if (sweeping_) return;
  sweeping_ = true;
  const auto now = steady_clock::now();
  deadline_ = now + kOrphanSweepMs;
  end_ = now + kOrphanSweepMaxMs;
  left_ = 0;
  pause_ = kOrphanSweepFirstPause;
  Round();
}

void Reaper::Round() {
  Reap();  // what the last round killed
  const std::size_t left = SignalDescendants(SIGKILL);
  const auto now = steady_clock::now();
  if (left == 0 || now >= end_) return Done();
  if (left < left_) deadline_ = now + kOrphanSweepMs;  // some died: not stuck
  left_ = left;
  if (now >= deadline_) return Done();
  timer_.expires_after(pause_);
  pause_ = std::min(2 * pause_, kOrphanSweepMaxPause);
  timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) return Round();
    Done();
  });
}

void Reaper::Done() {
  sweeping_ = false;
  on_swept_();
}

}  // namespace tether::supervisor
