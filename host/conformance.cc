#include "host/conformance.h"

#include <sys/random.h>

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
#include "host/errors.h"
#include "host/internal/forwarding_transport.h"
#include "host/process.h"
#include "host/reference.h"

namespace tether {

namespace asio = boost::asio;
using asio::awaitable;
using std::chrono::milliseconds;

namespace {

// ---------------------------------------------------------------- helpers

// (g++ 12 mishandles braced lists of strings inside coroutines: build argv
// in ordinary functions.)
template <typename... A>
std::vector<std::string> V(A&&... a) {
  return std::vector<std::string>{std::string(std::forward<A>(a))...};
}

std::string Random(std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t got = 0; got < n;) {
    const ssize_t r = ::getrandom(s.data() + got, n - got, 0);
    if (r > 0) got += static_cast<std::size_t>(r);
  }
  return s;
}

absl::Status Fail(std::string what) { return absl::InternalError(std::move(what)); }
absl::Status Unsupported(std::string what) { return absl::UnimplementedError(std::move(what)); }

std::string Show(std::string_view bytes) {
  std::string s = absl::CHexEscape(std::string(bytes.substr(0, 120)));
  if (bytes.size() > 120) absl::StrAppend(&s, "... (", bytes.size(), " bytes)");
  return s;
}

#define CONF_EXPECT(cond, ...)                                                       \
  do {                                                                               \
    if (!(cond)) co_return Fail(absl::StrCat(#cond, ": ", __VA_ARGS__));             \
  } while (0)

awaitable<void> Sleep(milliseconds d) {
  asio::steady_timer t(co_await asio::this_coro::executor, d);
  co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
}

StartOptions Opts(std::vector<std::string> argv) {
  StartOptions o;
  o.argv = std::move(argv);
  o.output_mode = OutputMode::kStream;
  o.output_format = OutputFormat::kBytes;
  return o;
}

struct Ran {
  std::string out, err;
  std::optional<ExitStatus> exit;
  absl::Status status;  // the first failure, if any
};

awaitable<void> ReadAll(Process& p, Ran* r) {
  while (true) {
    absl::StatusOr<std::optional<OutputChunk>> c = co_await p.Read();
    if (!c.ok()) {
      if (r->status.ok()) r->status = c.status();
      break;
    }
    if (!*c) break;
    ((*c)->stream == StreamId::kStderr ? r->err : r->out) += (*c)->bytes;
  }
}

awaitable<absl::Status> WriteAll(Process& p, std::string_view data) {
  for (std::size_t i = 0; i < data.size(); i += kMaxWriteBytes) {
    if (absl::Status st = co_await p.Write(data.substr(i, kMaxWriteBytes)); !st.ok()) co_return st;
  }
  co_return co_await p.CloseStdin();
}

// Starts `o`, feeds `input` (then EOF) while reading everything, and waits.
awaitable<Ran> Run(Transport& t, StartOptions o, std::optional<std::string> input) {
  Ran r;
  o.stdin_pipe = o.stdin_pipe || input.has_value();
  absl::StatusOr<std::unique_ptr<Process>> p = co_await Process::Start(t, std::move(o));
  if (!p.ok()) {
    r.status = p.status();
    co_return r;
  }
  Process& proc = **p;
  bool wrote = !input.has_value();
  absl::Status write_status;
  auto ex = co_await asio::this_coro::executor;
  asio::steady_timer joined(ex, asio::steady_timer::time_point::max());
  if (input) {
    asio::co_spawn(ex, WriteAll(proc, *input), [&](std::exception_ptr, absl::Status st) {
      write_status = st;
      wrote = true;
      joined.cancel();
    });
  }
  co_await ReadAll(proc, &r);
  absl::StatusOr<ExitStatus> e = co_await proc.Wait();
  if (e.ok()) {
    r.exit = *e;
  } else if (r.status.ok()) {
    r.status = e.status();
  }
  while (!wrote) co_await joined.async_wait(asio::as_tuple(asio::use_awaitable));
  if (r.status.ok() && !write_status.ok()) r.status = write_status;
  co_return r;
}

awaitable<Ran> RunArgv(Transport& t, std::vector<std::string> argv) {
  co_return co_await Run(t, Opts(std::move(argv)), std::nullopt);
}

std::string AllBytes(int repeat) {
  std::string s;
  for (int r = 0; r < repeat; ++r) {
    for (int b = 0; b < 256; ++b) s.push_back(static_cast<char>(b));
  }
  return s;
}

// A printf format (for sh's printf) that prints exactly `bytes`.
std::string PrintfFormat(std::string_view bytes) {
  std::string f;
  for (unsigned char c : bytes) absl::StrAppend(&f, "\\", absl::Dec(c >> 6), absl::Dec(c >> 3 & 7), absl::Dec(c & 7));
  return f;
}

std::string Seq(int n) {
  std::string s;
  for (int i = 1; i <= n; ++i) absl::StrAppend(&s, i, "\n");
  return s;
}

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

// ------------------------------------------------------------------ cases

awaitable<absl::Status> StdoutAllValues(Transport& t) {
  const std::string want = AllBytes(4);
  Ran r = co_await RunArgv(t, V("sh", "-c", absl::StrCat("printf '", PrintfFormat(want), "'; printf 'e\\000\\377' >&2")));
  CONF_EXPECT(r.status.ok(), r.status.ToString());
  CONF_EXPECT(r.out == want, Show(r.out));
  CONF_EXPECT(r.err == std::string("e\0\xff", 3), Show(r.err));
  CONF_EXPECT(r.exit && r.exit->code == 0, "exit");
  co_return absl::OkStatus();
}

awaitable<absl::Status> StdinRoundTrip(Transport& t) {
  const std::string in = AllBytes(64) + Random(200000) + "no newline at the end\xc3";
  Ran r = co_await Run(t, Opts(V("cat")), in);
  CONF_EXPECT(r.status.ok(), r.status.ToString());
  CONF_EXPECT(r.out == in, "got ", r.out.size(), " bytes of ", in.size());
  CONF_EXPECT(r.exit && r.exit->code == 0, "exit");
  co_return absl::OkStatus();
}

awaitable<absl::Status> StdinWcCounts(Transport& t) {
  Ran r = co_await Run(t, Opts(V("wc", "-c")), std::string(256 * 1024, '\0'));
  CONF_EXPECT(r.status.ok(), r.status.ToString());
  CONF_EXPECT(absl::StripAsciiWhitespace(r.out) == "262144", Show(r.out));
  co_return absl::OkStatus();
}

awaitable<absl::Status> StdinClosed(Transport& t) {
  Ran r = co_await RunArgv(t, V("cat"));
  CONF_EXPECT(r.status.ok(), r.status.ToString());
  CONF_EXPECT(r.out.empty() && r.exit && r.exit->code == 0, Show(r.out));
  co_return absl::OkStatus();
}

awaitable<absl::Status> StderrApart(Transport& t) {
  Ran r = co_await RunArgv(t, V("sh", "-c", "for i in 1 2 3 4 5; do echo out$i; echo err$i >&2; done"));
  CONF_EXPECT(r.status.ok(), r.status.ToString());
  CONF_EXPECT(r.out == "out1\nout2\nout3\nout4\nout5\n", Show(r.out));
  CONF_EXPECT(r.err == "err1\nerr2\nerr3\nerr4\nerr5\n", Show(r.err));
  co_return absl::OkStatus();
}

constexpr int kExitCodes[] = {0, 1, 7, 126, 255};

awaitable<absl::Status> ExitCodes(Transport& t) {
  for (int code : kExitCodes) {
    Ran r = co_await RunArgv(t, V("sh", "-c", absl::StrCat("exit ", code)));
    CONF_EXPECT(r.status.ok(), r.status.ToString());
    CONF_EXPECT(r.exit && r.exit->code == code, "exit ", code);
  }
  co_return absl::OkStatus();
}

awaitable<absl::Status> ExitBySignal(Transport& t) {
  Ran r = co_await RunArgv(t, V("sh", "-c", "kill -KILL $$"));
  CONF_EXPECT(r.status.ok(), r.status.ToString());
  CONF_EXPECT(r.exit && r.exit->signal == SIGKILL && !r.exit->code, "not reported as SIGKILL");
  CONF_EXPECT(r.exit->ShellStatus() == 137, r.exit->ShellStatus());
  co_return absl::OkStatus();
}

awaitable<absl::Status> StartErrors(Transport& t) {
  Ran r = co_await RunArgv(t, V("/nonexistent/tether-conformance"));
  CONF_EXPECT(ErrorCodeOf(r.status) == ErrorCode::kNotFound, r.status.ToString());
  StartOptions bad = Opts(V("true"));
  bad.env.emplace_back("A=B", "x");
  r = co_await Run(t, bad, std::nullopt);
  CONF_EXPECT(ErrorCodeOf(r.status) == ErrorCode::kInvalidArgument, r.status.ToString());
  bad = Opts(V("true"));
  bad.cwd = "/nonexistent/tether-conformance";
  r = co_await Run(t, bad, std::nullopt);
  CONF_EXPECT(!r.status.ok() && !r.exit, "a bad cwd started something");
  co_return absl::OkStatus();
}

awaitable<absl::Status> EnvironmentExact(Transport& t) {
  StartOptions o = Opts(V("env"));
  o.inherit_env = false;
  o.env.emplace_back("TETHER_CONF", "a b\tc");
  o.env.emplace_back("EMPTY", "");
  Ran r = co_await Run(t, o, std::nullopt);
  CONF_EXPECT(r.status.ok(), r.status.ToString());
  CONF_EXPECT(r.out == "TETHER_CONF=a b\tc\nEMPTY=\n" || r.out == "EMPTY=\nTETHER_CONF=a b\tc\n", Show(r.out));
  o = Opts(V("pwd"));
  o.cwd = "/";
  r = co_await Run(t, o, std::nullopt);
  CONF_EXPECT(r.out == "/\n", Show(r.out));
  co_return absl::OkStatus();
}

awaitable<absl::Status> LimitsRejected(Transport& t) {
  absl::StatusOr<std::unique_ptr<Process>> p = co_await Process::Start(t, Opts(V("cat")));
  CONF_EXPECT(p.ok(), p.status().ToString());
  CONF_EXPECT(ErrorCodeOf(co_await (*p)->Write(std::string(kMaxWriteBytes + 1, 'x'))) ==
                  ErrorCode::kInvalidArgument,
              "an oversize write was not refused");
  CONF_EXPECT(ErrorCodeOf(co_await (*p)->Write("x")) == ErrorCode::kInputClosed, "stdin was closed");
  Ran r;
  co_await ReadAll(**p, &r);
  StartOptions o = Opts(V("head", "-c", "100000", "/dev/zero"));
  o.output_mode = OutputMode::kFinite;
  o.max_output_bytes = 1000;
  r = co_await Run(t, o, std::nullopt);
  CONF_EXPECT(r.out.size() == 1000, r.out.size());
  CONF_EXPECT(ErrorCodeOf(r.status) == ErrorCode::kOutputCapacity, r.status.ToString());
  co_return absl::OkStatus();
}

awaitable<absl::Status> TextMode(Transport& t) {
  StartOptions o = Opts(V("sh", "-c", "printf 'a\\303'; sleep 0.2; printf '\\251\\377'"));
  o.output_format = OutputFormat::kText;
  Ran r = co_await Run(t, o, std::nullopt);
  CONF_EXPECT(r.status.ok(), r.status.ToString());
  CONF_EXPECT(r.out == "a\xC3\xA9\xEF\xBF\xBD", Show(r.out));
  co_return absl::OkStatus();
}

awaitable<absl::Status> SlowReader(Transport& t) {
  absl::StatusOr<std::unique_ptr<Process>> p =
      co_await Process::Start(t, Opts(V("sh", "-c", "head -c 3000000 /dev/urandom | od -An -v -tx1")));
  CONF_EXPECT(p.ok(), p.status().ToString());
  co_await Sleep(milliseconds(1500));  // far more than every buffer holds
  CONF_EXPECT((*p)->unread_bytes() <= kDefaultOutputWindowBytes, (*p)->unread_bytes());
  Ran r;
  co_await ReadAll(**p, &r);
  CONF_EXPECT(r.status.ok(), r.status.ToString());
  CONF_EXPECT(r.out.size() == 3000000 / 16 * 49, r.out.size());  // 16 bytes a line: " xx" x 16 + "\n"
  auto e = co_await (*p)->Wait();
  CONF_EXPECT(e.ok() && e->code == 0 && e->output_complete, "exit");
  co_return absl::OkStatus();
}

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

// Reads stdout until at least `n` bytes arrived.
awaitable<absl::StatusOr<std::string>> ReadAtLeast(Process& p, std::size_t n) {
  std::string got;
  while (got.size() < n) {
    auto c = co_await p.Read();
    if (!c.ok()) co_return c.status();
    if (!*c) break;
    got += (*c)->bytes;
  }
  co_return got;
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
  // The launch arrives 3 s late; the marker (written through the plain
  // channel when setup gives up at 0.3 s) must land first. A margin of 1.2 s
  // was too short for ssh on a loaded machine (ASan build plus a soak).
  DelayedTransport slow(t, milliseconds(3000));
  StartOptions o = Opts(V("sh", "-c", absl::StrCat("echo ran > '", flag, "'")));
  o.setup_timeout_ms = 300;
  absl::StatusOr<std::unique_ptr<Process>> p = co_await Process::Start(slow, o);
  CONF_EXPECT(ErrorCodeOf(p.status()) == ErrorCode::kOutcomeUnknown, p.status().ToString());
  co_await Sleep(milliseconds(4500));  // the delayed launch arrives, finds the marker
  Ran check = co_await RunArgv(t, V("sh", "-c", absl::StrCat("test -e '", flag, "'")));
  CONF_EXPECT(check.exit && check.exit->code == 1, "the cancelled launch started its child");
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

struct Case {
  const char* name;
  const char* capability;
  awaitable<absl::Status> (*run)(Transport&);
};

constexpr Case kCases[] = {
    {"bytes.stdout_all_values", "core", StdoutAllValues},
    {"bytes.stdin_round_trip", "core", StdinRoundTrip},
    {"bytes.stderr_apart", "core", StderrApart},
    {"bytes.text_mode", "core", TextMode},
    {"eof.wc_counts_256k", "core", StdinWcCounts},
    {"eof.closed_stdin", "core", StdinClosed},
    {"exit.codes", "core", ExitCodes},
    {"exit.signal", "core", ExitBySignal},
    {"start.errors", "core", StartErrors},
    {"start.environment_exact", "core", EnvironmentExact},
    {"limits.rejected", "core", LimitsRejected},
    {"flow.slow_reader", "core", SlowReader},
    {"signal.group", "core", SignalGroup},
    {"terminate.ignores_sigterm", "core", TerminateIgnoringTerm},
    {"terminate.setsid_grandchild", "subreaper", TerminateSetsidGrandchild},
    {"pty.size_and_resize", "pty", PtySizeAndResize},
    {"pty.eof", "pty", PtyEof},
    {"wait.aborted", "core", AbortedWait},
    {"reopen.disconnect", "reopen", DisconnectReopen},
    {"reopen.after_detach", "reopen", DetachLeavesItRunning},
    {"reopen.after_cut", "reopen", ReopenAfterCut},
    {"reopen.one_attachment", "reopen", OneAttachment},
    {"reopen.bad_references", "core", BadReferences},
    {"cancel.setup_timeout", "cancel", CancelledSetup},
};

awaitable<ConformanceResult> RunCase(Transport& t, const Case& c) {
  ConformanceResult r;
  r.name = c.name;
  r.capability = c.capability;
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status st;
  try {
    using namespace asio::experimental::awaitable_operators;
    asio::steady_timer limit(co_await asio::this_coro::executor, std::chrono::seconds(90));
    auto raced = co_await (c.run(t) || limit.async_wait(asio::use_awaitable));
    st = raced.index() == 0 ? std::get<0>(raced) : absl::DeadlineExceededError("no result within 90 s");
  } catch (const std::exception& e) {
    st = absl::InternalError(absl::StrCat("exception: ", e.what()));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (st.ok()) {
    r.outcome = ConformanceResult::Outcome::kPass;
  } else if (absl::IsUnimplemented(st)) {
    r.outcome = ConformanceResult::Outcome::kUnsupported;
    r.detail = std::string(st.message());
  } else {
    r.detail = st.ToString();
  }
  co_return r;
}

}  // namespace

std::vector<std::string> ConformanceCaseNames() {
  std::vector<std::string> names;
  for (const Case& c : kCases) names.push_back(c.name);
  return names;
}

awaitable<std::vector<ConformanceResult>> RunConformance(Transport& transport, ConformanceOptions options) {
  std::vector<ConformanceResult> results;
  for (const Case& c : kCases) {
    if (!options.only.empty() && !absl::StrContains(c.name, options.only)) continue;
    ConformanceResult r = co_await RunCase(transport, c);
    if (options.on_result) options.on_result(r);
    results.push_back(std::move(r));
  }
  co_return results;
}

}  // namespace tether
