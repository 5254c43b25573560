#include "supervisor/daemon.h"

#include <signal.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "supervisor/admission.h"
#include "supervisor/async.h"
#include "supervisor/attachment.h"
#include "supervisor/cancel_watch.h"
#include "supervisor/child.h"
#include "supervisor/child_io.h"
#include "supervisor/launcher.h"
#include "supervisor/reaper.h"
#include "supervisor/state_dir.h"
#include "supervisor/supervised.h"

namespace tether::supervisor {
namespace {

using asio::awaitable;
using asio::local::stream_protocol;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr unsigned kAbandonGraceMs = 2000;  // SIGTERM -> SIGKILL for an abandoned run
// SIGTERM -> SIGKILL for a run whose start the host gave up on (its
// cancellation marker came after the child started): within the 2 s a
// cancelled start promises (docs/process-api.md "Aborting a start").
constexpr unsigned kCancelGraceMs = 1000;

// kTicketKeyBytes from the kernel's random source.
std::string NewTicketKey() {
  std::string key(kTicketKeyBytes, '\0');
  std::size_t got = 0;
  while (got < key.size()) {
    const ssize_t n = ::getrandom(key.data() + got, key.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) std::abort();  // no randomness: no key can be made
    got += static_cast<std::size_t>(n);
  }
  return key;
}

// The daemon: the child (started, pumped, reaped), the accept loop and its
// admission policy, and the timers of a process's life: the attachment's
// hold on output after a lost connection, abandonment (end_with_host),
// terminate's grace, the drain after the exit, and the linger of the exit
// record. Attachments speak the protocol (attachment.h); this performs what
// they ask.
class Daemon final : public AttachmentOwner, public ChildIoListener {
 public:
  explicit Daemon(DaemonConfig config);
  int Run();

  // AttachmentOwner
  void Perform(const Action& action, Attachment& from) override;
  void Detached(const Attachment* a, bool lost) override;
  // ChildIoListener
  bool MayEvict() const override {
    // Detached after a first attachment (before it, the launch's own Hello
    // is on its way), and no lost attachment's hold.
    return p_.generation > 0 && attachment_.expired() && !hold_output_;
  }
  void OutputArrived() override { WakeAttachment(); }
  void StreamEnded(int) override { OnExitKnown(); }
  void StdinMoved() override {
    if (auto a = attachment_.lock()) a->QueueStdinAck();
  }

 private:
  void Start();
  void Fail(wire::ErrorCode code, const absl::Status& why);
  void Attached(Attachment& a);
  void Terminate(unsigned grace_ms);
  void RecordExit(int status, const struct rusage& ru);
  void ArmDrain();
  void OnExitKnown();
  void WakeAttachment() {
    if (auto a = attachment_.lock()) a->Wake();
  }
  void ArmLinger();
  void ArmAbandon();
  void StartAbandoned();
  void Swept() {
    if (shut_down_) io_.stop();
  }
  void Shutdown();

  // Connections (admission.h): every open one, so that the owner always gets in.
  awaitable<void> AcceptLoop();
  void PruneConnections();
  bool MakeRoom();
  void ArmHelloPressure();
  struct Connection {
    std::weak_ptr<Attachment> attachment;
    int fd = -1;  // its socket, for FIONREAD; open while the attachment is
    steady_clock::time_point accepted;
    bool pressed = false;  // open under pressure: kPressuredHelloMs to authenticate
  };

  DaemonConfig config_;
  Supervised p_;
  asio::io_context io_{1};
  stream_protocol::acceptor acceptor_;
  ChildIo child_io_;
  Reaper reaper_;
  std::optional<int> raw_status_;  // wait status seen before all output drained
  struct rusage rusage_ {};
  std::weak_ptr<Attachment> attachment_;  // the output attachment, if any
  std::vector<Connection> connections_;
  asio::steady_timer pressure_timer_;
  bool pressure_armed_ = false;
  asio::steady_timer linger_;
  asio::steady_timer hold_timer_;  // ends hold_output_
  bool hold_output_ = false;       // a lost attachment's backpressure lasts a lease
  asio::steady_timer abandon_timer_;  // end_with_host: no attachment for a lease
  bool abandoned_ = false;            // end_with_host and its host is gone for good
  pid_t last_peer_pid_ = 0;           // of the newest output attachment
  asio::steady_timer kill_timer_;
  asio::steady_timer drain_timer_;
  // Per stream, the ring offset that holds everything the child wrote
  // before its exit (what its pipe held then, read).
  std::array<std::uint64_t, kNumStreams> drain_target_{};
  bool output_cut_ = false;
  bool terminating_ = false;
  bool cancelled_ = false;  // a cancellation marker was found before the child started
  CancelWatch cancel_watch_;  // ... or after (StartAbandoned)
  bool shut_down_ = false;
};

Daemon::Daemon(DaemonConfig config)
    : config_(std::move(config)),
      p_(std::move(config_.launch), NewTicketKey()),
      acceptor_(io_, stream_protocol(), config_.listen_fd),
      child_io_(io_, p_, *this),
      reaper_(
          io_, [this](int status, const struct rusage& ru) { RecordExit(status, ru); }, [this] { Swept(); }),
      pressure_timer_(io_),
      linger_(io_),
      hold_timer_(io_),
      abandon_timer_(io_),
      kill_timer_(io_),
      drain_timer_(io_),
      cancel_watch_(io_, config_.state_dir, [this] { StartAbandoned(); }) {
  p_.supervisor_path = config_.supervisor_path;
  p_.launched_at_s = static_cast<std::int64_t>(::time(nullptr));
}

void Daemon::Perform(const Action& action, Attachment& from) {
  switch (action.kind) {
    case Action::kDisplaced:
      if (auto held = attachment_.lock(); held && held.get() != &from) {
        attachment_.reset();  // (so that its end is not taken for the new holder's)
        held->Close();
      }
      return;
    case Action::kAttached:
      return Attached(from);
    case Action::kReleased:
      return child_io_.Released(action.arg);
    case Action::kStdinReady:
      return child_io_.StdinReady();
    case Action::kSignal:
      if (::kill(-p_.pgid, action.arg) != 0) {
        from.Refused(action, absl::NotFoundError(absl::StrCat("signal: kill: ", std::strerror(errno))));
      }
      return;
    case Action::kResize:
      if (absl::Status st = child_io_.Resize(action.size); !st.ok()) from.Refused(action, st);
      return;
    case Action::kTerminate:
      return Terminate(static_cast<unsigned>(action.arg));
    case Action::kExitAcknowledged:
      // The host recorded the exit: nothing left to keep.
      asio::post(io_, [this] { Shutdown(); });
      return;
  }
}

void Daemon::Attached(Attachment& a) {
  attachment_ = a.weak_from_this();
  linger_.cancel();
  hold_output_ = false;
  hold_timer_.cancel();
  abandon_timer_.cancel();
  last_peer_pid_ = a.peer_pid();
}

void Daemon::Detached(const Attachment* a, bool lost) {
  if (attachment_.lock().get() != a) return;
  attachment_.reset();
  p_.held = false;
  p_.holder_handle.clear();
  // (Not once shut down: a pending timer would keep the daemon alive.)
  hold_output_ = lost && !shut_down_ && !p_.exit;
  if (hold_output_) {
    hold_timer_.expires_after(milliseconds(p_.lease_ms()));
    hold_timer_.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      hold_output_ = false;
      child_io_.WakeOutputPumps();
    });
  }
  child_io_.WakeOutputPumps();  // a pump waiting for space evicts now
  if (p_.exit) ArmLinger();
  ArmAbandon();
}

void Daemon::ArmAbandon() {
  if (!p_.launch.end_with_host() || p_.exit || shut_down_) return;
  // The host that owns the process has a lease to come back (a reconnect);
  // after that nobody can ever reach it (no reference was issued).
  abandon_timer_.expires_after(milliseconds(p_.lease_ms()));
  abandon_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || p_.exit || shut_down_ || !attachment_.expired()) return;
    if (ProcessStopped(config_.launcher_parent) || ProcessStopped(last_peer_pid_)) {
      ArmAbandon();  // the host is stopped (Ctrl-Z), not gone: wait for it
      return;
    }
    abandoned_ = true;
    Terminate(kAbandonGraceMs);
    if (p_.pgid <= 1) Shutdown();  // nothing runs (never started)
  });
}

void Daemon::StartAbandoned() {
  if (shut_down_) return;
  // The host gave up on the start that launched this (cancel_watch.h): no
  // handle exists or ever will, so nobody would read the exit either.
  abandoned_ = true;
  if (auto held = attachment_.lock()) {
    attachment_.reset();  // (the host's own stuck attach, if it still holds)
    held->Close();
  }
  if (p_.exit || p_.pgid <= 1) {
    asio::post(io_, [this] { Shutdown(); });
    return;
  }
  Terminate(kCancelGraceMs);  // its exit then shuts down at once (OnExitKnown)
}

void Daemon::ArmLinger() {
  const unsigned linger = p_.launch.linger_ms() ? p_.launch.linger_ms() : kDefaultLingerMs;
  linger_.expires_after(milliseconds(linger));
  linger_.async_wait([this](boost::system::error_code ec) {
    if (!ec && attachment_.expired()) Shutdown();
  });
}

void Daemon::Terminate(unsigned grace_ms) {
  if (terminating_ || p_.pgid <= 1) return;
  terminating_ = true;
  // Once the exit is recorded the group's id may belong to someone else:
  // only what escaped and is ours (our orphans) is signalled then.
  if (p_.exit) {
    SignalOrphans(SIGTERM);
  } else {
    ::kill(-p_.pgid, SIGTERM);
  }
  kill_timer_.expires_after(milliseconds(grace_ms));
  kill_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || p_.pgid <= 1) return;
    if (!p_.exit) ::kill(-p_.pgid, SIGKILL);
    reaper_.Sweep();
  });
}

void Daemon::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  cancel_watch_.Stop();
  reaper_.Stop();
  hold_timer_.cancel();
  abandon_timer_.cancel();
  // Files first: once the attachment closes, the host may look for them. A
  // resent launch leaves its marker first, so that there is never a moment
  // without either: a copy of the launch still on its way then finds the
  // marker and starts nothing. A marker the host wrote stays too.
  if (p_.resent) LeaveCancelMarker(config_.state_dir);
  RemovePrivateDir(config_.state_dir);
  boost::system::error_code ec;
  acceptor_.close(ec);
  if (auto a = attachment_.lock()) a->Close();
  // After a terminate, what escaped the group is killed and reaped before we
  // leave; the sweep stops the loop when it is done.
  if (terminating_) reaper_.Sweep();
  if (!reaper_.sweeping()) io_.stop();
}

void Daemon::Fail(wire::ErrorCode code, const absl::Status& why) {
  p_.phase = wire::ProcessState::PHASE_FAILED;
  wire::Exit e;
  e.set_failure(code);
  e.set_message(std::string(why.message()));
  e.set_code(absl::IsNotFound(why) ? 127 : 126);  // as a shell reports it
  p_.exit = e;
  p_.eof.fill(true);
  p_.stdin_queue.Close();
  OnExitKnown();
}

void Daemon::Start() {
  const wire::Launch& l = p_.launch;
  absl::StatusOr<std::vector<std::string>> env = std::move(config_.child_env);
  if (!env.ok()) return Fail(wire::ERROR_INVALID_ARGUMENT, env.status());
  ChildSpec spec;
  spec.argv.assign(l.argv().begin(), l.argv().end());
  spec.env = *std::move(env);
  spec.cwd = l.cwd();
  spec.stdin_pipe = l.stdin_mode() == wire::STDIN_PIPE;
  spec.pty = l.has_pty();
  if (spec.pty) {
    spec.cols = static_cast<unsigned short>(l.pty().cols());
    spec.rows = static_cast<unsigned short>(l.pty().rows());
  }
  absl::StatusOr<std::string> path = ResolveExecutable(spec.argv[0], spec.env, spec.cwd, l.resolve_relative());
  if (!path.ok()) {
    return Fail(absl::IsInvalidArgument(path.status()) ? wire::ERROR_INVALID_ARGUMENT : wire::ERROR_LAUNCH_FAILED,
                path.status());
  }
  spec.path = *std::move(path);
  // The last moment a host's cancellation can stop the launch: nothing has
  // been started yet, and nothing ever will be.
  if (LaunchCancelled(config_.state_dir)) {
    // The host gave up on this launch: nobody will read the record.
    cancelled_ = true;
    return;
  }
  absl::StatusOr<Child> child = SpawnChild(spec);
  if (!child.ok()) {
    return Fail(absl::IsResourceExhausted(child.status()) ? wire::ERROR_RESOURCE_EXHAUSTED : wire::ERROR_LAUNCH_FAILED,
                child.status());
  }
  p_.pid = p_.pgid = child->pid;
  reaper_.set_child(child->pid);
  p_.phase = wire::ProcessState::PHASE_RUNNING;
  child_io_.Start(*child);
}

void Daemon::RecordExit(int status, const struct rusage& ru) {
  raw_status_ = status;
  rusage_ = ru;
  kill_timer_.cancel();
  // Terminate means everything the child started, not only its group.
  if (terminating_) reaper_.Sweep();
  if (!p_.eof[0] || !p_.eof[1]) {
    // Everything the child wrote is in its ring or still in the pipe: that
    // much is read before any cut, however slowly the host takes it.
    for (int i = 0; i < kNumStreams; ++i) drain_target_[i] = p_.rings[i].end() + child_io_.Unread(i);
    ArmDrain();
  }
  OnExitKnown();
}

// The exit waits drain_ms for the output's EOF. Descendants holding the
// output open past that are cut off, but never before the child's own
// bytes were read: a pipe that backpressure keeps full (a host that reads
// slowly, or is reconnecting) is not a descendant holding it open.
void Daemon::ArmDrain() {
  const unsigned drain = p_.launch.drain_ms() ? p_.launch.drain_ms() : kDefaultDrainMs;
  drain_timer_.expires_after(milliseconds(drain));
  drain_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || shut_down_) return;
    for (int i = 0; i < kNumStreams; ++i) {
      if (!p_.eof[i] && p_.rings[i].end() < drain_target_[i]) return ArmDrain();
    }
    // Descendants still hold the output open: stop reading and report the exit.
    if (child_io_.CutOutput()) output_cut_ = true;
  });
}

void Daemon::OnExitKnown() {
  // Exit is ordered after all output: report it only once both streams ended.
  if (!p_.exit && raw_status_ && p_.eof[0] && p_.eof[1]) {
    const int status = *raw_status_;
    wire::Exit e;
    if (WIFSIGNALED(status)) {
      e.set_signal(WTERMSIG(status));
      e.set_core_dumped(WCOREDUMP(status));
    } else {
      e.set_code(WEXITSTATUS(status));
    }
    e.mutable_rusage()->set_user_us(rusage_.ru_utime.tv_sec * 1000000ull + rusage_.ru_utime.tv_usec);
    e.mutable_rusage()->set_system_us(rusage_.ru_stime.tv_sec * 1000000ull + rusage_.ru_stime.tv_usec);
    e.mutable_rusage()->set_max_rss_kib(static_cast<std::uint64_t>(rusage_.ru_maxrss));
    e.set_output_cut(output_cut_);
    p_.exit = e;
    p_.phase = wire::ProcessState::PHASE_EXITED;
    drain_timer_.cancel();
    child_io_.CloseTerminal();  // a pty master kept open until now (see ChildIo::OutputPump)
  }
  if (!p_.exit) return;
  WakeAttachment();
  // An abandoned run's exit has no reader: clean up at once.
  if (abandoned_ && attachment_.expired()) {
    asio::post(io_, [this] { Shutdown(); });
    return;
  }
  if (attachment_.expired()) ArmLinger();
}

awaitable<void> Daemon::AcceptLoop() {
  while (!shut_down_) {
    auto [ec, sock] = co_await acceptor_.async_accept(kNoThrow);
    if (ec == asio::error::operation_aborted || shut_down_) break;
    if (ec) continue;
    struct ucred cred {};
    socklen_t len = sizeof(cred);
    if (::getsockopt(sock.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
        cred.uid != ::geteuid() || !MakeRoom()) {
      boost::system::error_code ignored;
      sock.close(ignored);  // another uid, or all taken by authenticated ones: no bytes, no state
      continue;
    }
    const int fd = sock.native_handle();
    auto a = std::make_shared<Attachment>(*this, p_, std::move(sock), cred.pid);
    connections_.push_back({a, fd, steady_clock::now()});
    asio::co_spawn(io_, [a]() -> awaitable<void> { co_await a->Run(); }, RethrowOnError);
    ArmHelloPressure();
  }
}

void Daemon::PruneConnections() {
  std::erase_if(connections_, [](const Connection& c) {
    auto a = c.attachment.lock();
    return !a || a->closed();
  });
}

bool Daemon::MakeRoom() {
  PruneConnections();
  if (connections_.size() < kMaxConnections) return true;
  std::vector<ConnectionView> views;
  for (const Connection& c : connections_) {
    int waiting = 0;
    views.push_back({c.attachment.lock()->authenticated(), ::ioctl(c.fd, FIONREAD, &waiting) == 0 && waiting > 0,
                     c.accepted});
  }
  const std::optional<std::size_t> victim = PickEviction(views);
  if (!victim) return false;
  connections_[*victim].attachment.lock()->Close();
  connections_.erase(connections_.begin() + static_cast<std::ptrdiff_t>(*victim));
  return true;
}

void Daemon::ArmHelloPressure() {
  // A connection open while kPressureConnections unauthenticated ones are
  // has kPressuredHelloMs to authenticate; the timer fires at the first
  // such deadline.
  if (shut_down_) return;
  PruneConnections();
  std::size_t unauthenticated = 0;
  for (const Connection& c : connections_) unauthenticated += !c.attachment.lock()->authenticated();
  std::optional<steady_clock::time_point> next;
  for (Connection& c : connections_) {
    if (c.attachment.lock()->authenticated()) continue;
    c.pressed = c.pressed || unauthenticated >= kPressureConnections;
    if (c.pressed && (!next || c.accepted + kPressuredHelloMs < *next)) next = c.accepted + kPressuredHelloMs;
  }
  if (!next || (pressure_armed_ && pressure_timer_.expiry() <= *next)) return;
  pressure_armed_ = true;
  pressure_timer_.expires_at(*next);  // cancels a wait for a later deadline
  pressure_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec == asio::error::operation_aborted) return;  // moved to an earlier deadline
    pressure_armed_ = false;
    if (ec || shut_down_) return;
    const auto now = steady_clock::now();
    PruneConnections();
    std::vector<std::shared_ptr<Attachment>> late;
    for (const Connection& c : connections_) {
      auto a = c.attachment.lock();
      if (c.pressed && !a->authenticated() && now - c.accepted >= kPressuredHelloMs) late.push_back(a);
    }
    for (auto& a : late) a->Close();
    ArmHelloPressure();
  });
}

int Daemon::Run() {
  asio::co_spawn(io_, reaper_.Run(), RethrowOnError);
  // Armed first: Start() looks for the marker once before the child
  // starts, the watch for one written any time after.
  cancel_watch_.Start();
  // The mark before anything can start: from now on a copy of the launch
  // that finds this directory without a daemon (killed) starts nothing.
  if (absl::Status st = LeaveDaemonMark(config_.state_dir); !st.ok()) {
    Fail(absl::IsResourceExhausted(st) ? wire::ERROR_RESOURCE_EXHAUSTED : wire::ERROR_INTERNAL, st);
  } else {
    Start();
  }
  if (cancelled_) {
    Shutdown();
    return 0;
  }
  asio::co_spawn(io_, AcceptLoop(), RethrowOnError);
  if (p_.exit) OnExitKnown();
  ArmAbandon();  // the host that launched it has a lease to attach
  io_.run();
  return 0;
}

}  // namespace

int RunDaemon(DaemonConfig config) {
  Daemon d(std::move(config));
  return d.Run();
}

}  // namespace tether::supervisor
