#include "host/conformance/cases.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <csignal>
#include <memory>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "host/conformance/harness.h"
#include "tether/errors.h"
#include "tether/process.h"
#include "host/reference.h"
#include "host/internal/forwarding_transport.h"

namespace tether::conformance {

namespace asio = boost::asio;
using asio::awaitable;
using std::chrono::milliseconds;

namespace {

// A transport whose channels deliver our writes `delay` late: a slow native
// channel (for setup timeouts and cancellation).
class DelayedTransport final : public internal::ForwardingTransport {
 public:
  DelayedTransport(Transport& inner, milliseconds delay) : ForwardingTransport(inner), delay_(delay) {}
  awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(std::vector<std::string> argv) override {
    if (!inner().capabilities().streaming) {
      // One-shot commands: this one runs late, and its answer is lost.
      asio::co_spawn(co_await asio::this_coro::executor, RunLate(inner(), std::move(argv), delay_), asio::detached);
      co_return std::unique_ptr<Channel>(new Silent());
    }
    auto ch = co_await inner().Exec(std::move(argv));
    if (!ch.ok()) co_return ch.status();
    co_return std::unique_ptr<Channel>(new Delayed(*std::move(ch), delay_));
  }

 private:
  static awaitable<void> RunLate(Transport& inner, std::vector<std::string> argv, milliseconds delay) {
    co_await Sleep(delay);
    auto ch = co_await inner.Exec(std::move(argv));
    if (!ch.ok()) co_return;
    (*ch)->CloseWrite();
    char buf[4096];
    while (true) {
      auto n = co_await (*ch)->ReadSome({buf, sizeof buf});
      if (!n.ok() || *n == 0) break;
    }
  }
  class Silent final : public Channel {
   public:
    awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char>) override { co_return std::size_t{0}; }
    awaitable<absl::Status> Write(std::string_view) override { co_return absl::OkStatus(); }
    void CloseWrite() override {}
    void Close() override {}
    std::string Diagnostics() const override { return {}; }
  };

  class Delayed final : public Channel {
   public:
    Delayed(std::unique_ptr<Channel> inner, milliseconds delay) : inner_(std::move(inner)), delay_(delay) {}
    awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf) override {
      co_return co_await inner_->ReadSome(buf);
    }
    // Accepted now, delivered later even if the host gave up meanwhile;
    // after the last delivery the far end's answer is drained so it can end.
    awaitable<absl::Status> Write(std::string_view bytes) override {
      asio::co_spawn(co_await asio::this_coro::executor, DeliverLate(inner_, std::string(bytes), delay_),
                     asio::detached);
      co_return absl::OkStatus();
    }
    void CloseWrite() override {}
    void Close() override {}
    std::string Diagnostics() const override { return inner_->Diagnostics(); }

   private:
    // (parameters, not lambda captures: a coroutine lambda's captures die
    // with the lambda object, before the coroutine runs)
    static awaitable<void> DeliverLate(std::shared_ptr<Channel> inner, std::string bytes, milliseconds delay) {
      co_await Sleep(delay);
      co_await inner->Write(bytes);
      inner->CloseWrite();
      char buf[4096];
      while (true) {
        auto n = co_await inner->ReadSome({buf, sizeof buf});
        if (!n.ok() || *n == 0) break;
      }
      inner->Close();
    }

    std::shared_ptr<Channel> inner_;
    milliseconds delay_;
  };

  milliseconds delay_;
};

}  // namespace

awaitable<absl::Status> SignalGroup(Transport& t) {
  absl::StatusOr<std::unique_ptr<Process>> p = co_await Process::Start(
      t, Opts(V("sh", "-c", "trap 'echo got; exit 3' USR1; echo ready; while :; do sleep 0.05; done")));
  CONF_EXPECT(p.ok(), p.status().ToString());
  auto first = co_await (*p)->Read();
  CONF_EXPECT(first.ok() && *first && (*first)->bytes == "ready\n", "no ready line");
  CONF_EXPECT((co_await (*p)->Signal("USR1")).ok(), "signal");
  Ran r;
  co_await ReadAll(**p, &r);
  CONF_EXPECT(r.out == "got\n", Show(r.out));
  auto e = co_await (*p)->Wait();
  CONF_EXPECT(e.ok() && e->code == 3, "exit");
  CONF_EXPECT(ErrorCodeOf(co_await (*p)->Signal(SIGUSR1)) == ErrorCode::kNotFound, "signal after exit");
  co_return absl::OkStatus();
}

awaitable<absl::Status> TerminateIgnoringTerm(Transport& t) {
  absl::StatusOr<std::unique_ptr<Process>> p =
      co_await Process::Start(t, Opts(V("sh", "-c", "trap '' TERM; echo ready; while :; do sleep 0.05; done")));
  CONF_EXPECT(p.ok(), p.status().ToString());
  auto first = co_await (*p)->Read();
  CONF_EXPECT(first.ok() && *first, "no ready line");
  const auto t0 = std::chrono::steady_clock::now();
  CONF_EXPECT((co_await (*p)->Terminate(300)).ok(), "terminate");
  Ran r;
  co_await ReadAll(**p, &r);
  auto e = co_await (*p)->Wait();
  CONF_EXPECT(e.ok() && e->signal == SIGKILL, "not killed after the grace");
  CONF_EXPECT(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10), "took too long");
  co_return absl::OkStatus();
}

awaitable<absl::Status> TerminateSetsidGrandchild(Transport& t) {
  Ran probe = co_await RunArgv(t, V("sh", "-c", "command -v setsid"));
  if (!probe.exit || probe.exit->code != 0) co_return Unsupported("the sandbox has no setsid");
  // The supervisor finds what escaped the group because orphans are
  // reparented to it (PR_SET_CHILD_SUBREAPER). User-mode emulators such as
  // qemu-user do not pass that on: orphans go to init there.
  probe = co_await RunArgv(
      t, V("sh", "-c",
           "(setsid sleep 2 >/dev/null 2>&1 & echo $! > \"${TMPDIR:-/tmp}/.tether-conf-$$\"); sleep 0.3; "
           "p=$(cat \"${TMPDIR:-/tmp}/.tether-conf-$$\"); rm -f \"${TMPDIR:-/tmp}/.tether-conf-$$\"; "
           "pp=$(cut -d' ' -f4 /proc/$p/stat); kill $p; [ \"$pp\" = \"$PPID\" ]"));
  if (!probe.exit || probe.exit->code != 0) {
    co_return Unsupported("orphans are not reparented to the supervisor here (no child subreaper, e.g. qemu-user)");
  }
  absl::StatusOr<std::unique_ptr<Process>> p =
      co_await Process::Start(t, Opts(V("sh", "-c", "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!; wait")));
  CONF_EXPECT(p.ok(), p.status().ToString());
  auto first = co_await (*p)->Read();
  CONF_EXPECT(first.ok() && *first, "no pid");
  const std::string pid(absl::StripAsciiWhitespace((*first)->bytes));
  CONF_EXPECT((co_await (*p)->Terminate(200)).ok(), "terminate");
  Ran r;
  co_await ReadAll(**p, &r);
  CONF_EXPECT((co_await (*p)->Wait()).ok(), "wait");
  bool gone = false;
  for (int i = 0; i < 30 && !gone; ++i) {
    Ran check = co_await RunArgv(t, V("sh", "-c", absl::StrCat("kill -0 ", pid, " 2>/dev/null")));
    gone = check.exit && check.exit->code != 0;
    if (!gone) co_await Sleep(milliseconds(100));
  }
  CONF_EXPECT(gone, "the setsid grandchild ", pid, " survived");
  co_return absl::OkStatus();
}

awaitable<absl::Status> PtySizeAndResize(Transport& t) {
  StartOptions o = Opts(V("sh", "-c", "stty size; read x; stty size"));
  o.pty = StartOptions::PtySize{100, 30};
  absl::StatusOr<std::unique_ptr<Process>> p = co_await Process::Start(t, o);
  CONF_EXPECT(p.ok(), p.status().ToString());
  std::string out;
  while (!absl::StrContains(out, "30 100")) {
    auto c = co_await (*p)->Read();
    CONF_EXPECT(c.ok() && *c, "no size: ", Show(out));
    out += (*c)->bytes;
  }
  CONF_EXPECT((co_await (*p)->Resize(132, 43)).ok(), "resize");
  CONF_EXPECT((co_await (*p)->Write("go\n")).ok(), "write");
  Ran r;
  co_await ReadAll(**p, &r);
  CONF_EXPECT(absl::StrContains(r.out, "43 132"), Show(r.out));
  auto e = co_await (*p)->Wait();
  CONF_EXPECT(e.ok() && e->code == 0, "exit");
  co_return absl::OkStatus();
}

awaitable<absl::Status> PtyEof(Transport& t) {
  StartOptions o = Opts(V("sh", "-c", "cat >/dev/null; echo eof-seen"));
  o.pty = StartOptions::PtySize{80, 24};
  absl::StatusOr<std::unique_ptr<Process>> p = co_await Process::Start(t, o);
  CONF_EXPECT(p.ok(), p.status().ToString());
  CONF_EXPECT((co_await (*p)->Write("abc\n")).ok(), "write");
  CONF_EXPECT((co_await (*p)->CloseStdin()).ok(), "close");
  Ran r;
  co_await ReadAll(**p, &r);
  CONF_EXPECT(absl::StrContains(r.out, "eof-seen"), Show(r.out));
  co_return absl::OkStatus();
}

awaitable<absl::Status> DisconnectReopen(Transport& t) {
  StartOptions o = Opts(V("sh", "-c", "seq 1 20000; read x; echo \"in:$x\"; seq 20001 40000; exit 9"));
  o.stdin_pipe = true;
  absl::StatusOr<std::unique_ptr<Process>> p = co_await Process::Start(t, o);
  CONF_EXPECT(p.ok(), p.status().ToString());
  absl::StatusOr<std::string> got = co_await ReadAtLeast(**p, 30000);
  CONF_EXPECT(got.ok(), got.status().ToString());
  absl::StatusOr<std::string> ref = (*p)->Reference();
  CONF_EXPECT(ref.ok(), ref.status().ToString());
  CONF_EXPECT((co_await (*p)->Disconnect()).ok(), "disconnect");
  CONF_EXPECT(ErrorCodeOf(co_await (*p)->Write("x")) == ErrorCode::kInputClosed, "old handle took input");
  p->reset();
  absl::StatusOr<std::unique_ptr<Process>> q = co_await Process::Reopen(t, *ref);
  CONF_EXPECT(q.ok(), q.status().ToString());
  CONF_EXPECT(!(*q)->output_gap(), "gap");
  CONF_EXPECT((co_await WriteAll(**q, "hello\n")).ok(), "write");
  Ran r;
  co_await ReadAll(**q, &r);
  const std::string all = Seq(20000) + "in:hello\n" + Seq(40000).substr(Seq(20000).size());
  CONF_EXPECT(*got + r.out == all, "lost or repeated output");
  auto e = co_await (*q)->Wait();
  CONF_EXPECT(e.ok() && e->code == 9, "exit");
  co_return absl::OkStatus();
}

awaitable<absl::Status> ReopenAfterCut(Transport& t) {
  absl::StatusOr<std::unique_ptr<Process>> p = co_await Process::Start(t, Opts(V("seq", "1", "150000")));
  CONF_EXPECT(p.ok(), p.status().ToString());
  absl::StatusOr<std::string> got = co_await ReadAtLeast(**p, 400000);
  CONF_EXPECT(got.ok(), got.status().ToString());
  absl::StatusOr<std::string> ref = (*p)->Reference();
  CONF_EXPECT(ref.ok(), ref.status().ToString());
  p->reset();  // no disconnect: the channel just dies
  absl::StatusOr<std::unique_ptr<Process>> q = absl::UnavailableError("");
  for (int i = 0; i < 100; ++i) {
    q = co_await Process::Reopen(t, *ref);
    if (ErrorCodeOf(q.status()) != ErrorCode::kBusy && !absl::IsUnavailable(q.status())) break;
    co_await Sleep(milliseconds(50));
  }
  CONF_EXPECT(q.ok(), q.status().ToString());
  Ran r;
  co_await ReadAll(**q, &r);
  CONF_EXPECT(*got + r.out == Seq(150000), "lost or repeated output after the cut");
  co_return absl::OkStatus();
}

awaitable<absl::Status> OneAttachment(Transport& t) {
  StartOptions o = Opts(V("sh", "-c", "read x; echo done"));
  o.stdin_pipe = true;
  absl::StatusOr<std::unique_ptr<Process>> p = co_await Process::Start(t, o);
  CONF_EXPECT(p.ok(), p.status().ToString());
  absl::StatusOr<std::string> ref = (*p)->Reference();
  CONF_EXPECT(ref.ok(), ref.status().ToString());
  absl::StatusOr<std::unique_ptr<Process>> second = co_await Process::Reopen(t, *ref);
  CONF_EXPECT(!second.ok() && ErrorCodeOf(second.status()) == ErrorCode::kBusy, second.status().ToString());
  absl::StatusOr<ProcessStatus> st = co_await (*p)->Status();
  CONF_EXPECT(st.ok() && st->state == ProcessStatus::State::kRunning, "status");
  Ran r;
  CONF_EXPECT((co_await WriteAll(**p, "x\n")).ok(), "write");
  co_await ReadAll(**p, &r);
  CONF_EXPECT(r.out == "done\n", Show(r.out));
  co_return absl::OkStatus();
}

constexpr const char* kBadReferences[] = {"", "{}", "not json", "{\"tether_process\":1}"};

awaitable<absl::Status> BadReferences(Transport& t) {
  for (const char* bad : kBadReferences) {
    auto q = co_await Process::Reopen(t, bad);
    CONF_EXPECT(ErrorCodeOf(q.status()) == ErrorCode::kInvalidArgument, q.status().ToString());
  }
  co_return absl::OkStatus();
}

awaitable<absl::Status> CancelledSetup(Transport& t) {
  absl::StatusOr<SandboxInfo> info = co_await t.Probe();
  CONF_EXPECT(info.ok(), info.status().ToString());
  const std::string flag = absl::StrCat(info->state_root, "/../conformance-", absl::BytesToHexString(Random(8)));
  // The launch arrives 5 s late; the marker (written through the plain
  // channel when setup gives up at 0.3 s) must land first. A margin of 1.2 s
  // was too short for ssh on a loaded machine (ASan build plus a soak), and
  // 2.7 s too (four builds on two cores: the marker took over 3 s).
  auto slow_owner = std::make_shared<DelayedTransport>(t, milliseconds(5000));
  DelayedTransport& slow = *slow_owner;
  StartOptions o = Opts(V("sh", "-c", absl::StrCat("echo ran > '", flag, "'")));
  o.setup_timeout_ms = 300;
  absl::StatusOr<std::unique_ptr<Process>> p = co_await Process::Start(slow, o);
  CONF_EXPECT(ErrorCodeOf(p.status()) == ErrorCode::kOutcomeUnknown, p.status().ToString());
  co_await Sleep(milliseconds(6500));  // the delayed launch arrives, finds the marker
  // The check is a probe of the sandbox, not the subject: on a target with
  // injected faults its own start may be cut (OUTCOME_UNKNOWN) and is
  // asked again; `test -e` changes nothing.
  Ran check;
  for (int attempt = 0; attempt < 3 && !check.exit; ++attempt) {
    check = co_await RunArgv(t, V("sh", "-c", absl::StrCat("test -e '", flag, "'")));
  }
  CONF_EXPECT(check.exit, absl::StrCat("checking for the flag file failed: ", check.status.ToString()));
  // Only a marker that was written binds the launch; one the channel lost
  // (a fault) is reported as such in the error, and then either outcome is
  // honest.
  const bool marker_written =
      absl::StrContains(p.status().message(), "a cancellation marker stops a delayed launch");
  CONF_EXPECT(!marker_written || check.exit->code == 1, "the cancelled launch started its child");
  co_return absl::OkStatus();
}

awaitable<absl::Status> AbortedWait(Transport& t) {
  absl::StatusOr<std::unique_ptr<Process>> p = co_await Process::Start(t, Opts(V("sleep", "30")));
  CONF_EXPECT(p.ok(), p.status().ToString());
  {
    using namespace asio::experimental::awaitable_operators;
    asio::steady_timer timer(co_await asio::this_coro::executor, milliseconds(100));
    auto raced = co_await ((*p)->Wait() || timer.async_wait(asio::use_awaitable));
    CONF_EXPECT(raced.index() == 1, "wait returned before its abort");
  }
  CONF_EXPECT((co_await (*p)->Terminate(100)).ok(), "terminate");
  Ran r;
  co_await ReadAll(**p, &r);
  auto e = co_await (*p)->Wait();
  CONF_EXPECT(e.ok() && e->signal == SIGTERM, "exit after terminate");
  co_return absl::OkStatus();
}

awaitable<absl::Status> DetachLeavesItRunning(Transport& t) {
  StartOptions o = Opts(V("sh", "-c", "seq 1 50000; read x; echo \"in:$x\""));
  o.stdin_pipe = true;
  absl::StatusOr<std::unique_ptr<Process>> p = co_await Process::Start(t, o);
  CONF_EXPECT(p.ok(), p.status().ToString());
  absl::StatusOr<std::string> ref = (*p)->Reference();
  CONF_EXPECT(ref.ok(), ref.status().ToString());
  co_await Sleep(milliseconds(200));
  CONF_EXPECT((co_await (*p)->Detach()).ok(), "detach");
  CONF_EXPECT((co_await (*p)->Detach()).ok(), "a second detach");
  auto c = co_await (*p)->Read();
  CONF_EXPECT(c.ok() && !*c, "output after detach");
  CONF_EXPECT(ErrorCodeOf(co_await (*p)->Write("x")) == ErrorCode::kInputClosed, "input after detach");
  p->reset();
  // Not killed: another handle finds it running and finishes it.
  absl::StatusOr<std::unique_ptr<Process>> q = co_await Process::Reopen(t, *ref);
  CONF_EXPECT(q.ok(), q.status().ToString());
  absl::StatusOr<ProcessStatus> st = co_await (*q)->Status();
  CONF_EXPECT(st.ok() && st->state == ProcessStatus::State::kRunning, "not running after detach");
  CONF_EXPECT((co_await WriteAll(**q, "bye\n")).ok(), "write");
  Ran r;
  co_await ReadAll(**q, &r);
  CONF_EXPECT(absl::EndsWith(r.out, "in:bye\n"), Show(r.out));
  auto e = co_await (*q)->Wait();
  CONF_EXPECT(e.ok() && e->code == 0, "exit");
  co_return absl::OkStatus();
}

}  // namespace tether::conformance
