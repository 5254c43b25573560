// Integration tests of the process API: the local provider, the real
// supervisor binary ($TETHER_SUPERVISOR_DIR), real child processes.
#include "tether/process.h"

#include <doctest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>

#include "tether/errors.h"
#include "tether/local_transport.h"
#include "host/process/reference.h"
#include "protocol/frame.h"
#include "tether/protocol/tether.pb.h"
#include "tests/host/process/process_fixture.h"

namespace tether {
namespace {


namespace asio = boost::asio;
using namespace tether::testing;

TEST_CASE("stdout carries every byte value, NUL and invalid UTF-8 exactly, and the exit code") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    auto p = co_await Start(t, V("sh", "-c", "printf '\\000\\377\\300\\200abc'; printf 'err\\n' >&2; exit 7"));
    REQUIRE(p.ok());
    Output o = co_await ReadAll(**p);
    CHECK(o.status.ok());
    CHECK(o.out == std::string("\0\xff\xc0\x80" "abc", 7));
    CHECK(o.err == "err\n");
    absl::StatusOr<ExitStatus> e = co_await (*p)->Wait();
    REQUIRE(e.ok());
    CHECK(e->code == 7);
    CHECK(!e->signal);
  });
  CHECK(sb.LeftoverStateDirs() == 0);
}

TEST_CASE("stdin bytes of every value round-trip through cat, and EOF ends it") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    auto p = co_await Start(t, V("cat"), true);
    REQUIRE(p.ok());
    const std::string in = AllByteValues(64) + RandomBytes(300000, 1);
    auto ex = co_await asio::this_coro::executor;
    // Write and read concurrently: flow control in both directions.
    asio::co_spawn(ex, [&]() -> awaitable<void> { CHECK((co_await WriteAll(**p, in)).ok()); },
                   asio::detached);
    Output o = co_await ReadAll(**p);
    CHECK(o.status.ok());
    CHECK(o.out.size() == in.size());
    CHECK(o.out == in);
    CHECK(o.err.empty());
    auto e = co_await (*p)->Wait();
    REQUIRE(e.ok());
    CHECK(e->code == 0);
  });
  CHECK(sb.LeftoverStateDirs() == 0);
}

TEST_CASE("stderr is kept apart from stdout, each in order") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    auto p = co_await Start(t, V("sh", "-c", "for i in $(seq 1 2000); do echo out$i; echo err$i >&2; done"));
    REQUIRE(p.ok());
    Output o = co_await ReadAll(**p);
    std::string want_out, want_err;
    for (int i = 1; i <= 2000; ++i) {
      want_out += "out" + std::to_string(i) + "\n";
      want_err += "err" + std::to_string(i) + "\n";
    }
    CHECK(o.out == want_out);
    CHECK(o.err == want_err);
    CHECK((co_await (*p)->Wait())->code == 0);
  });
}

TEST_CASE("wc -c counts 256 KiB of stdin exactly") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    auto p = co_await Start(t, V("wc", "-c"), true);
    REQUIRE(p.ok());
    CHECK((co_await WriteAll(**p, RandomBytes(256 * 1024, 2))).ok());
    Output o = co_await ReadAll(**p);
    CHECK(o.out == "262144\n");
  });
}

TEST_CASE("a closed stdin reads as EOF at once") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    auto p = co_await Start(t, V("wc", "-c"), false);
    REQUIRE(p.ok());
    CHECK(absl::IsFailedPrecondition(co_await (*p)->Write("x")));
    Output o = co_await ReadAll(**p);
    CHECK(o.out == "0\n");
  });
}

TEST_CASE("a signal that ends the child is reported as the signal, not a code") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    auto p = co_await Start(t, V("sh", "-c", "kill -KILL $$"));
    REQUIRE(p.ok());
    co_await ReadAll(**p);
    auto e = co_await (*p)->Wait();
    REQUIRE(e.ok());
    CHECK(!e->code);
    CHECK(e->signal == 9);
    CHECK(e->ShellStatus() == 137);
  });
}

constexpr int kCodes[] = {0, 1, 2, 126, 127, 128, 200, 255};

TEST_CASE("exit codes 0 through 255 pass through") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    for (int code : kCodes) {
      auto p = co_await Start(t, V("sh", "-c", "exit " + std::to_string(code)));
      REQUIRE(p.ok());
      co_await ReadAll(**p);
      auto e = co_await (*p)->Wait();
      REQUIRE(e.ok());
      CHECK(e->code == code);
    }
  });
  CHECK(sb.LeftoverStateDirs() == 0);
}

TEST_CASE("a slow reader gets every byte: the child waits instead of losing output") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    // 4 MiB is four times the supervisor's ring and the host's window.
    auto p = co_await Start(t, V("sh", "-c", "head -c 4194304 /dev/zero | tr '\\0' 'z'"));
    REQUIRE(p.ok());
    asio::steady_timer timer(co_await asio::this_coro::executor);
    std::size_t got = 0, reads = 0;
    bool all_z = true;
    while (true) {
      auto c = co_await (*p)->Read();
      REQUIRE(c.ok());
      if (!*c) break;
      got += (*c)->bytes.size();
      all_z = all_z && (*c)->bytes.find_first_not_of('z') == std::string::npos;
      if (++reads % 8 == 0) {
        timer.expires_after(std::chrono::milliseconds(20));
        co_await timer.async_wait(asio::use_awaitable);
      }
    }
    CHECK(got == 4194304);
    CHECK(all_z);
    CHECK((co_await (*p)->Wait())->code == 0);
  });
}

// With a window larger than the socket's buffer, the supervisor's writer
// fills the socket: a batch goes partly by its immediate write and the rest
// by async_write when the socket drains. Every byte arrives, in order.
TEST_CASE("a window larger than the socket buffer: batches split across writes stay exact") {
  Sandbox sb;
  const std::string file = sb.root() + "/random.bin";
  const std::string data = RandomBytes(6 << 20, 18);
  {
    std::ofstream f(file, std::ios::binary);
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
    REQUIRE(f.good());
  }
  sb.Run([&file, &data](Transport& t) -> awaitable<void> {
    StartOptions o = Opts();
    o.argv = V("cat", file);
    o.output_window_bytes = 4 << 20;
    auto p = co_await Process::Start(t, o);
    REQUIRE(p.ok());
    asio::steady_timer timer(co_await asio::this_coro::executor);
    std::string got;
    std::size_t reads = 0;
    while (true) {
      auto c = co_await (*p)->Read();
      REQUIRE(c.ok());
      if (!*c) break;
      got += (*c)->bytes;
      if (++reads % 16 == 0) {  // a slow reader: the socket fills meanwhile
        timer.expires_after(std::chrono::milliseconds(10));
        co_await timer.async_wait(asio::use_awaitable);
      }
    }
    CHECK(got.size() == data.size());
    CHECK(got == data);
    CHECK((co_await (*p)->Wait())->code == 0);
  });
}

TEST_CASE("what the child left in its pipe at exit is read in full, however late the host reads") {
  // The ring (64 KiB here) fills, then the pipe; the child exits with 32 KiB
  // still in its pipe while the host reads nothing for longer than the
  // supervisor's drain time (2 s). That is backpressure, not a descendant
  // holding the output open: nothing may be cut. (Before, the drain timer
  // closed the pipe and the last 32 KiB were lost, marked as a cut; the
  // e2b-faults conformance run lost up to 61 KiB of a slow reader's output
  // so, its acks delayed by the emulator's stalls.)
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    StartOptions o = Opts();
    o.argv = V("head", "-c", "98304", "/dev/zero");
    o.ring_bytes = 65536;
    auto p = co_await Process::Start(t, std::move(o));
    REQUIRE(p.ok());
    asio::steady_timer timer(co_await asio::this_coro::executor, std::chrono::milliseconds(3000));
    co_await timer.async_wait(asio::use_awaitable);
    Output out = co_await ReadAll(**p);
    auto e = co_await (*p)->Wait();
    REQUIRE(e.ok());
    CHECK(out.status.ok());
    CHECK(out.out == std::string(98304, '\0'));
    CHECK(e->code == 0);
    CHECK_FALSE(e->output_cut);
    CHECK(e->output_complete);
  });
}

TEST_CASE("bad requests are rejected before anything starts") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    CHECK(absl::IsInvalidArgument((co_await Start(t, V())).status()));
    CHECK(absl::IsInvalidArgument((co_await Start(t, V(""))).status()));
    CHECK(absl::IsInvalidArgument((co_await Start(t, V(std::string("a\0b", 3)))).status()));
    StartOptions o = Opts();
    o.argv = V("true");
    o.env = E("A=B", "x");
    CHECK(absl::IsInvalidArgument((co_await Process::Start(t, o)).status()));
    o.env = E("", "x");
    CHECK(absl::IsInvalidArgument((co_await Process::Start(t, o)).status()));
    o.env = E("A", std::string("x\0y", 3));
    CHECK(absl::IsInvalidArgument((co_await Process::Start(t, o)).status()));
  });
}

TEST_CASE("an executable that cannot be run gives a clear error and leaves nothing behind") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    absl::Status st = (co_await Start(t, V("tether-no-such-command"))).status();
    CHECK(absl::IsNotFound(st));
    CHECK(std::string(st.message()).find("tether-no-such-command") != std::string::npos);
    CHECK(absl::IsNotFound((co_await Start(t, V("/nonexistent/bin/x"))).status()));
    CHECK(absl::IsPermissionDenied((co_await Start(t, V("/etc/passwd"))).status()));
    // A relative path with a slash is never resolved against an implicit cwd.
    CHECK(absl::IsInvalidArgument((co_await Start(t, V("./x"))).status()));
    StartOptions o = Opts();
    o.argv = V("true");
    o.cwd = "/nonexistent-dir";
    CHECK(absl::IsNotFound((co_await Process::Start(t, o)).status()));
  });
  CHECK(sb.LeftoverStateDirs() == 0);
}

TEST_CASE("the child gets exactly the requested argv, cwd and environment") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    ::setenv("TETHER_TEST_API_KEY", "leak", 1);
    ::setenv("TETHER_TEST_PLAIN", "plain", 1);
    ::setenv("SOME_TOKEN", "leak", 1);
    StartOptions o = Opts();
    o.argv = V("sh", "-c", "printf '%s|' \"$@\"; pwd; echo \"${SOME_TOKEN-unset} ${MY_SECRET-unset} ${PLAIN-unset}\"",
               "sh", "a b", "", "\xff\x01");
    o.cwd = "/tmp";
    o.env = E("MY_SECRET", "passed");
    o.env.emplace_back("PLAIN", "p=q");
    auto p = co_await Process::Start(t, o);
    REQUIRE(p.ok());
    Output out = co_await ReadAll(**p);
    CHECK(out.out == "a b||\xff\x01|/tmp\nunset passed p=q\n");
    ::unsetenv("TETHER_TEST_API_KEY");
    ::unsetenv("SOME_TOKEN");
  });
}

TEST_CASE("writes are bounded and end at close_stdin") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    auto p = co_await Start(t, V("cat"), true);
    REQUIRE(p.ok());
    CHECK(absl::IsInvalidArgument(co_await (*p)->Write(std::string(kMaxWriteBytes + 1, 'x'))));
    CHECK((co_await (*p)->Write("")).ok());  // checks input is still allowed
    CHECK((co_await (*p)->Write("ab")).ok());
    CHECK((co_await (*p)->CloseStdin()).ok());
    CHECK((co_await (*p)->CloseStdin()).ok());  // idempotent
    CHECK(ErrorCodeOf(co_await (*p)->Write("c")) == ErrorCode::kInputClosed);
    Output o = co_await ReadAll(**p);
    CHECK(o.out == "ab");
  });
}

// Found by @tether/node's reopen test in CI: the child read its one line
// and exited before the EOF went out, and "write, close stdin, wait" failed
// with INPUT_CLOSED at the close.
TEST_CASE("close_stdin after the child exited on its own succeeds and sends nothing; writes still refuse") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    auto p = co_await Start(t, V("sh", "-c", "read x; echo \"got:$x\""), true);
    REQUIRE(p.ok());
    CHECK((co_await (*p)->Write("one\n")).ok());
    Output o = co_await ReadAll(**p);
    CHECK(o.out == "got:one\n");
    auto e = co_await (*p)->Wait();  // the exit is known before the close
    REQUIRE(e.ok());
    CHECK(e->code == 0);
    CHECK((co_await (*p)->CloseStdin()).ok());
    CHECK(ErrorCodeOf(co_await (*p)->Write("late")) == ErrorCode::kInputClosed);
  });
}

TEST_CASE("terminate kills a child that ignores SIGTERM after the grace period") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    auto p = co_await Start(t, V("sh", "-c", "trap '' TERM; echo ready; while :; do sleep 1; done"));
    REQUIRE(p.ok());
    auto first = co_await (*p)->Read();
    REQUIRE(first.ok());
    REQUIRE(first->has_value());
    CHECK((*first)->bytes == "ready\n");
    CHECK((co_await (*p)->Terminate(200)).ok());
    co_await ReadAll(**p, (*first)->bytes.size());
    auto e = co_await (*p)->Wait();
    REQUIRE(e.ok());
    CHECK(e->signal == 9);
  });
  CHECK(sb.LeftoverStateDirs() == 0);
}

TEST_CASE("a quiet process keeps its attachment past the lease: the host pings") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    StartOptions o = Opts();
    o.argv = V("sh", "-c", "sleep 2; echo done");
    o.lease_ms = 600;
    auto p = co_await Process::Start(t, o);
    REQUIRE(p.ok());
    Output out = co_await ReadAll(**p);
    CHECK(out.status.ok());
    CHECK(out.out == "done\n");
    CHECK((co_await (*p)->Wait())->code == 0);
  });
}

TEST_CASE("signal reaches the child's process group") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    auto p = co_await Start(t, V("sh", "-c", "trap 'echo got-usr1; exit 3' USR1; echo ready; while :; do sleep 0.05; done"));
    REQUIRE(p.ok());
    auto first = co_await (*p)->Read();
    REQUIRE(first.ok());
    REQUIRE(first->has_value());
    CHECK(ErrorCodeOf(co_await (*p)->Signal("SIGNOPE")) == ErrorCode::kInvalidArgument);
    CHECK((co_await (*p)->Signal("SIGUSR1")).ok());  // by name
    Output o = co_await ReadAll(**p, (*first)->bytes.size());
    CHECK(o.out == "got-usr1\n");
    CHECK((co_await (*p)->Wait())->code == 3);
    CHECK(absl::IsInvalidArgument(co_await (*p)->Signal(0)));
  });
}


TEST_CASE("disconnect and reopen resume output exactly where the holder stopped") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    auto p = co_await Start(t, V("sh", "-c", "seq 1 20000; read x; echo \"in:$x\"; seq 20001 40000; exit 9"), true);
    REQUIRE(p.ok());
    // Read only part of the output, then leave.
    std::string got;
    while (got.size() < 30000) {
      auto c = co_await (*p)->Read();
      REQUIRE(c.ok());
      REQUIRE(c->has_value());
      got += (*c)->bytes;
    }
    absl::StatusOr<std::string> ref = (*p)->Reference();
    REQUIRE(ref.ok());
    CHECK(ref->find("\"secret\"") != std::string::npos);
    CHECK((co_await (*p)->Disconnect()).ok());
    CHECK(absl::IsFailedPrecondition(co_await (*p)->Write("x")));
    p->reset();

    auto q = co_await Process::Reopen(t, *ref);
    REQUIRE(q.ok());
    CHECK(!(*q)->output_gap());
    CHECK((co_await WriteAll(**q, "hello\n")).ok());
    Output rest = co_await ReadAll(**q, got.size());
    CHECK(rest.status.ok());
    CHECK(got + rest.out == Seq(20000) + "in:hello\n" + Seq(40000).substr(Seq(20000).size()));
    auto e = co_await (*q)->Wait();
    REQUIRE(e.ok());
    CHECK(e->code == 9);
  });
  CHECK(sb.LeftoverStateDirs() == 0);
}

TEST_CASE("a channel killed mid-stream loses nothing that was still in the ring") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    // ~1 MB in all: what is left after the kill fits the 1 MiB ring, so
    // nothing may be evicted while detached.
    auto p = co_await Start(t, V("seq", "1", "150000"));
    REQUIRE(p.ok());
    std::string got;
    while (got.size() < 400000) {
      auto c = co_await (*p)->Read();
      REQUIRE(c.ok());
      REQUIRE(c->has_value());
      got += (*c)->bytes;
    }
    absl::StatusOr<std::string> ref = (*p)->Reference();
    REQUIRE(ref.ok());
    p->reset();  // no disconnect: the channel (and its bridge, if any) just dies
    // The supervisor notices the dead bridge at once; reopen may still race
    // it, so retry briefly while it reports BUSY.
    absl::StatusOr<std::unique_ptr<Process>> q = absl::UnavailableError("");
    asio::steady_timer timer(co_await asio::this_coro::executor);
    for (int i = 0; i < 50; ++i) {
      q = co_await Process::Reopen(t, *ref);
      if (!absl::IsUnavailable(q.status())) break;
      timer.expires_after(std::chrono::milliseconds(20));
      co_await timer.async_wait(asio::use_awaitable);
    }
    REQUIRE(q.ok());
    CHECK(!(*q)->output_gap());
    Output rest = co_await ReadAll(**q, got.size());
    CHECK(got + rest.out == Seq(150000));
    CHECK((co_await (*q)->Wait())->code == 0);
  });
  CHECK(sb.LeftoverStateDirs() == 0);
}

TEST_CASE("output beyond the ring while detached is reported as a gap, the newest bytes kept") {
  Sandbox sb;
  const std::string done = sb.root() + "/seq-done";
  sb.Run([&done](Transport& t) -> awaitable<void> {
    // 2.7 MB of numbered lines while nobody is attached; the ring keeps 1
    // MiB. The child marks when it has written them all (all but a pipe's
    // worth are then in the ring, which has overflowed).
    auto p = co_await Start(t, V("sh", "-c", "read x; seq 1 400000; echo end; : > \"$0\"", done), true);
    REQUIRE(p.ok());
    CHECK((co_await WriteAll(**p, "go\n")).ok());
    // Wait for the EOF acknowledgement before taking the reference.
    absl::StatusOr<std::string> ref = (*p)->Reference();
    asio::steady_timer timer(co_await asio::this_coro::executor);
    while (!ref.ok()) {
      timer.expires_after(std::chrono::milliseconds(5));
      co_await timer.async_wait(asio::use_awaitable);
      ref = (*p)->Reference();
    }
    CHECK((co_await (*p)->Disconnect()).ok());
    p->reset();
    // Not a fixed sleep: under load (ctest -j2 beside the chaos suite) the
    // child took longer than 1.5 s, the reopen came first and no gap formed.
    // Well within a lease (30 s): a Disconnect sends a Detach, so the
    // supervisor drops old output at once. (Had the Detach been lost, it
    // would hold the child back for a lease, as for a lost host.)
    const bool finished = co_await AwaitFile(done, std::chrono::seconds(10));
    REQUIRE(finished);

    auto q = co_await Process::Reopen(t, *ref);
    REQUIRE(q.ok());
    Output rest;
    std::uint64_t first_offset = 0;
    bool first = true;
    while (true) {
      auto c = co_await (*q)->Read();
      REQUIRE(c.ok());
      if (!*c) break;
      if (first) first_offset = (*c)->offset;
      first = false;
      rest.out += (*c)->bytes;
    }
    CHECK((*q)->output_gap());
    const std::string all = Seq(400000) + "end\n";
    CHECK(first_offset > 0);
    CHECK(first_offset + rest.out.size() == all.size());
    CHECK(all.substr(first_offset) == rest.out);  // exactly the newest bytes
    CHECK(rest.out.size() >= 1000000);
    CHECK((co_await (*q)->Wait())->code == 0);
  });
}

TEST_CASE("a second reopen while attached is refused as busy, and status tells running") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    auto p = co_await Start(t, V("sh", "-c", "read x; echo done"), true);
    REQUIRE(p.ok());
    ProcessStatus st = (co_await (*p)->Status()).value();
    CHECK(st.state == ProcessStatus::State::kRunning);
    absl::StatusOr<std::string> ref = (*p)->Reference();
    REQUIRE(ref.ok());
    auto q = co_await Process::Reopen(t, *ref);
    CHECK(absl::IsUnavailable(q.status()));
    CHECK(ErrorCodeOf(q.status()) == ErrorCode::kBusy);
    CHECK(std::string(q.status().message()).find("busy") != std::string::npos);
    CHECK((co_await WriteAll(**p, "x\n")).ok());
    Output o = co_await ReadAll(**p);
    CHECK(o.out == "done\n");
    CHECK((co_await (*p)->Wait())->code == 0);
    st = (co_await (*p)->Status()).value();
    CHECK(st.state == ProcessStatus::State::kExited);
    CHECK(st.exit->code == 0);
    // After exit and cleanup the reference finds nothing.
    (*p).reset();
  });
}

TEST_CASE("bad references are refused before anything is touched") {
  Sandbox sb;
  sb.Run([&sb](Transport& t) -> awaitable<void> {
    CHECK(absl::IsInvalidArgument((co_await Process::Reopen(t, "not json")).status()));
    CHECK(absl::IsInvalidArgument((co_await Process::Reopen(t, "{}")).status()));
    auto p = co_await Start(t, V("sh", "-c", "read x"), true);
    REQUIRE(p.ok());
    absl::StatusOr<std::string> ref = (*p)->Reference();
    REQUIRE(ref.ok());
    std::string other = *ref;
    other.replace(other.find(sb.root()), sb.root().size(), "/somewhere/else");
    CHECK(absl::IsInvalidArgument((co_await Process::Reopen(t, other)).status()));
    const auto with_expiry = [&](const std::string& value) {
      std::string r = *ref;
      const std::size_t at = r.find("\"expires_at\":") + 13;
      r.replace(at, r.find_first_of(",}", at) - at, value);
      return r;
    };
    CHECK(ErrorCodeOf((co_await Process::Reopen(t, with_expiry("1000"))).status()) == ErrorCode::kExpired);
    // Extending a reference's life: its ticket no longer matches, and the
    // supervisor refuses it (the holder cannot extend it).
    const std::size_t at = ref->find("\"expires_at\":") + 13;
    const std::int64_t expires = std::stoll(ref->substr(at, ref->find_first_of(",}", at) - at));
    auto extended = co_await Process::Reopen(t, with_expiry(std::to_string(expires + 3600)));
    CHECK(ErrorCodeOf(extended.status()) == ErrorCode::kExpired);
    CHECK(extended.status().message().find("altered") != std::string::npos);
    std::string forged = *ref;
    const std::size_t tk = forged.find("\"ticket\":\"") + 10;
    forged[tk] = forged[tk] == '0' ? '1' : '0';
    CHECK(ErrorCodeOf((co_await Process::Reopen(t, forged)).status()) == ErrorCode::kExpired);
    CHECK((co_await (*p)->CloseStdin()).ok());
    co_await ReadAll(**p);
  });
}


awaitable<absl::StatusOr<std::unique_ptr<Process>>> StartPty(Transport& t, std::vector<std::string> argv,
                                                             unsigned cols, unsigned rows) {
  StartOptions o = Opts();
  o.argv = std::move(argv);
  o.pty = StartOptions::PtySize{cols, rows};
  co_return co_await Process::Start(t, std::move(o));
}

// Reads and drops the rest of the output.
awaitable<void> Drain(Process& p) {
  while (true) {
    auto c = co_await p.Read();
    if (!c.ok() || !*c) break;
  }
}

// Reads terminal output until it contains `want` (or the output ends).
awaitable<std::string> ReadUntil(Process& p, std::string_view want) {
  std::string got;
  while (got.find(want) == std::string::npos) {
    auto c = co_await p.Read();
    if (!c.ok() || !*c) break;
    CHECK((*c)->stream == StreamId::kPty);
    got += (*c)->bytes;
  }
  co_return got;
}

TEST_CASE("a pty child has a terminal of the requested size on all three stdio fds") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    auto p = co_await StartPty(t, V("sh", "-c", "test -t 0 && test -t 1 && test -t 2 && echo tty; stty size"), 80, 24);
    REQUIRE(p.ok());
    std::string out = co_await ReadUntil(**p, "\n24 80\r\n");
    co_await Drain(**p);
    CHECK(out.find("tty\r\n24 80\r\n") != std::string::npos);
    CHECK((co_await (*p)->Wait())->code == 0);
  });
  CHECK(sb.LeftoverStateDirs() == 0);
}

TEST_CASE("resize reaches the pty child, which sees the new size") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    auto p = co_await StartPty(t, V("sh", "-c", "stty size; read x; stty size"), 80, 24);
    REQUIRE(p.ok());
    CHECK((co_await ReadUntil(**p, "24 80\r\n")).find("24 80") != std::string::npos);
    CHECK((co_await (*p)->Resize(132, 43)).ok());
    CHECK((co_await (*p)->Write("\n")).ok());
    CHECK((co_await ReadUntil(**p, "43 132\r\n")).find("43 132") != std::string::npos);
    co_await Drain(**p);
    CHECK((co_await (*p)->Wait())->code == 0);
    CHECK(absl::IsInvalidArgument(co_await (*p)->Resize(0, 10)));
  });
}

TEST_CASE("close_stdin on a pty sends the terminal's EOF character") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    auto p = co_await StartPty(t, V("wc", "-c"), 80, 24);
    REQUIRE(p.ok());
    CHECK((co_await (*p)->Write(std::string("ab\0c\n", 5))).ok());
    CHECK((co_await (*p)->CloseStdin()).ok());
    std::string out = co_await ReadUntil(**p, "5\r\n");
    CHECK(out.find("5\r\n") != std::string::npos);
    co_await Drain(**p);
    CHECK((co_await (*p)->Wait())->code == 0);
  });
}

TEST_CASE("resize without a pty is unsupported, and bad terminal sizes are refused") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    CHECK(absl::IsInvalidArgument((co_await StartPty(t, V("true"), 0, 24)).status()));
    CHECK(absl::IsInvalidArgument((co_await StartPty(t, V("true"), 80, 10001)).status()));
    auto p = co_await Start(t, V("true"));
    REQUIRE(p.ok());
    CHECK(ErrorCodeOf(co_await (*p)->Resize(80, 24)) == ErrorCode::kUnsupported);
    co_await ReadAll(**p);
  });
}


TEST_CASE("a setup that times out after dispatch is OUTCOME_UNKNOWN and the late launch never starts") {
  Sandbox sb;
  sb.Run([&sb](Transport& t) -> awaitable<void> {
    co_await WarmUp(t);  // the late launch is the supervisor's, which finds the marker
    auto slow_owner = std::make_shared<SlowTransport>(t, std::chrono::milliseconds(1000));
    SlowTransport& slow = *slow_owner;
    const std::string flag = sb.root() + "/child-ran";
    StartOptions o = Opts();
    o.argv = V("sh", "-c", "echo ran > " + flag);
    o.setup_timeout_ms = 200;
    absl::Status st = (co_await Process::Start(slow, o)).status();
    CHECK(absl::IsUnknown(st));
    CHECK(ErrorCodeOf(st) == ErrorCode::kOutcomeUnknown);
    CHECK(ErrorCodeName(ErrorCodeOf(st)) == "OUTCOME_UNKNOWN");
    CHECK(std::string(st.message()).find("OUTCOME_UNKNOWN") != std::string::npos);
    CHECK(std::string(st.message()).find("cancellation marker") != std::string::npos);
    // The launch arrives late, finds the marker and starts nothing.
    CHECK(slow.landed() == 0);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (slow.landed() == 0 && std::chrono::steady_clock::now() < deadline) {
      asio::steady_timer timer(co_await asio::this_coro::executor, std::chrono::milliseconds(50));
      co_await timer.async_wait(asio::use_awaitable);
    }
    REQUIRE(slow.landed() == 1);
    CHECK(!std::filesystem::exists(flag));
  });
  CHECK(sb.LeftoverStateDirs() == 0);
  CHECK(sb.Markers() == 1);  // it stays, for any other copy of the launch
}


TEST_CASE("a background descendant holding stdout does not hold back the exit") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    // The descendant's pid goes to stderr: the exit must arrive while it
    // still runs (held back, it would come only when the sleep ended).
    auto p = co_await Start(t, V("sh", "-c", "sleep 30 & echo $! >&2; echo hi; exit 4"));
    REQUIRE(p.ok());
    Output o = co_await ReadAll(**p);
    auto e = co_await (*p)->Wait();
    REQUIRE(e.ok());
    CHECK(o.out == "hi\n");
    CHECK(e->code == 4);
    CHECK(e->output_cut);
    const pid_t descendant = std::atoi(o.err.c_str());
    REQUIRE(descendant > 0);
    CHECK(::kill(descendant, 0) == 0);  // the exit came first
    ::kill(descendant, SIGKILL);
  });
}

TEST_CASE("an ordinary exit collects all output and is not marked cut") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    auto p = co_await Start(t, V("sh", "-c", "echo a; (sleep 0.3; echo b) & wait"));
    REQUIRE(p.ok());
    Output o = co_await ReadAll(**p);
    auto e = co_await (*p)->Wait();
    REQUIRE(e.ok());
    CHECK(o.out == "a\nb\n");
    CHECK_FALSE(e->output_cut);
  });
}


TEST_CASE("a large paste into a pty nobody reads does not stall the supervisor") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    auto p = co_await StartPty(t, V("cat"), 80, 24);
    REQUIRE(p.ok());
    Process& proc = **p;
    // 1 MiB of input, echoed and copied by cat into output nobody reads: the
    // terminal and the ring fill, cat blocks, and the paste stalls.
    bool writer_done = false;
    asio::co_spawn(
        co_await asio::this_coro::executor,
        [&proc, &writer_done]() -> awaitable<void> {
          const std::string line = std::string(1023, 'x') + "\n";
          std::string block;
          while (block.size() < kMaxWriteBytes) block += line;
          block.resize(kMaxWriteBytes);
          for (int i = 0; i < 16; ++i) {
            if (!(co_await proc.Write(block)).ok()) break;
          }
          writer_done = true;
        },
        asio::detached);
    asio::steady_timer timer(co_await asio::this_coro::executor, std::chrono::milliseconds(1500));
    co_await timer.async_wait(asio::use_awaitable);
    // The supervisor still answers (Status() gives up after its own 30 s
    // otherwise), and does so while the paste is still stuck: no wall-clock
    // bound, the order of the two is what shows it was not stalled.
    absl::StatusOr<ProcessStatus> st = co_await proc.Status();
    CHECK_FALSE(writer_done);
    REQUIRE(st.ok());
    CHECK(st->state == ProcessStatus::State::kRunning);
    CHECK((co_await proc.Terminate(100)).ok());
    co_await Drain(proc);
    auto e = co_await proc.Wait();
    REQUIRE(e.ok());
    CHECK(e->signal.has_value());
    // The blocked writer gives up once the process is gone.
    for (int i = 0; i < 100 && !writer_done; ++i) {
      timer.expires_after(std::chrono::milliseconds(20));
      co_await timer.async_wait(asio::use_awaitable);
    }
    CHECK(writer_done);
  });
}


TEST_CASE("terminate also ends a grandchild that left the group with setsid") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    auto p = co_await Start(
        t, V("sh", "-c", "setsid sh -c 'echo gc=$$; trap \"\" TERM; exec sleep 100' & sleep 100"));
    REQUIRE(p.ok());
    std::string got;
    while (got.find('\n') == std::string::npos) {
      auto c = co_await (*p)->Read();
      REQUIRE(c.ok());
      REQUIRE(c->has_value());
      got += (*c)->bytes;
    }
    REQUIRE(got.rfind("gc=", 0) == 0);
    const pid_t grandchild = std::stoi(got.substr(3));
    CHECK(::kill(grandchild, 0) == 0);
    CHECK((co_await (*p)->Terminate(200)).ok());
    co_await Drain(**p);
    auto e = co_await (*p)->Wait();
    REQUIRE(e.ok());
    asio::steady_timer timer(co_await asio::this_coro::executor);
    bool gone = false;
    for (int i = 0; i < 100 && !gone; ++i) {
      // Gone, or a zombie (reaped by the daemon's reaper a moment later).
      std::ifstream stat("/proc/" + std::to_string(grandchild) + "/stat");
      std::string line;
      gone = !stat || !std::getline(stat, line) || line.find(") Z") != std::string::npos;
      timer.expires_after(std::chrono::milliseconds(20));
      co_await timer.async_wait(asio::use_awaitable);
    }
    CHECK(gone);
  });
}


TEST_CASE("wait says output_complete only once all output was read without a gap") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    auto p = co_await Start(t, V("sh", "-c", "echo one; echo two >&2"));
    REQUIRE(p.ok());
    // Wait before reading: the exit can only be observed after the output
    // arrived, but it has not been consumed yet.
    auto early = co_await (*p)->Wait();
    REQUIRE(early.ok());
    CHECK_FALSE(early->output_complete);
    Output o = co_await ReadAll(**p);
    CHECK(o.out == "one\n");
    CHECK(o.err == "two\n");
    auto late = co_await (*p)->Wait();
    REQUIRE(late.ok());
    CHECK(late->output_complete);
    CHECK(late->code == 0);
  });
}


TEST_CASE("concurrent terminate callers share one acknowledged request") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    auto p = co_await Start(t, V("sh", "-c", "trap '' TERM; echo ready; while :; do sleep 1; done"));
    REQUIRE(p.ok());
    auto first = co_await (*p)->Read();
    REQUIRE(first.ok());
    Process& proc = **p;
    int acknowledged = 0;
    auto ex = co_await asio::this_coro::executor;
    for (int i = 0; i < 3; ++i) {
      asio::co_spawn(
          ex,
          [&proc, &acknowledged]() -> awaitable<void> {
            if ((co_await proc.Terminate(300)).ok()) ++acknowledged;
          },
          asio::detached);
    }
    CHECK((co_await proc.Terminate(300)).ok());
    co_await Drain(proc);
    auto e = co_await proc.Wait();
    REQUIRE(e.ok());
    CHECK(e->signal == 9);
    CHECK(acknowledged == 3);
    CHECK((co_await proc.Terminate(300)).ok());  // after the exit: nothing to do
  });
}



TEST_CASE("a terminate whose acknowledgement is lost is OUTCOME_UNKNOWN, saved and not resent") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    auto lossy_owner = std::make_shared<LossyTransport>(t);
    LossyTransport& lossy = *lossy_owner;
    StartOptions o = Opts();
    o.argv = V("sleep", "100");
    auto p = co_await Process::Start(lossy, o);
    REQUIRE(p.ok());
    const pid_t pid = (*p)->pid();
    lossy.StartDropping();
    asio::steady_timer cut(co_await asio::this_coro::executor, std::chrono::milliseconds(300));
    cut.async_wait([&lossy](boost::system::error_code ec) {
      if (!ec) lossy.Cut();
    });
    absl::Status st = co_await (*p)->Terminate(100);
    CHECK(ErrorCodeOf(st) == ErrorCode::kOutcomeUnknown);
    absl::Status again = co_await (*p)->Terminate(100);
    CHECK(ErrorCodeOf(again) == ErrorCode::kOutcomeUnknown);
    CHECK(again.message() == st.message());  // the saved result, no new request
    CHECK(::kill(pid, 0) == 0);               // it never reached the supervisor
    auto e = co_await (*p)->Wait();
    CHECK(ErrorCodeOf(e.status()) == ErrorCode::kUnavailable);  // no guessed exit
    KillStray(pid);  // clean up by hand what this test cut off
  });
}

// Output read until stdout holds `want` (or the output ends). (Not
// unread_bytes(): a reattach replays what was not acknowledged, which
// Read() drops by offset but the count includes.)
awaitable<Output> ReadStdoutUntil(Process& p, std::string_view want) {
  Output o;
  while (o.out.find(want) == std::string::npos) {
    auto c = co_await p.Read();
    if (!c.ok() || !*c) break;
    std::string& to = (*c)->stream == StreamId::kStderr ? o.err : o.out;
    CHECK((*c)->offset == to.size());
    to += (*c)->bytes;
  }
  co_return o;
}

// Found under fault injection (conformance.daytona-faults, signal.group):
// Signal returned OK once its frame was queued, and a channel that broke
// before delivering it lost it for good. The supervisor does not deduplicate
// requests, so a Signal that may have left this host is never resent.
TEST_CASE("a signal the channel swallows before a reattach is OUTCOME_UNKNOWN, never OK, and not sent again") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    auto lossy_owner = std::make_shared<LossyTransport>(t);
    LossyTransport& lossy = *lossy_owner;
    StartOptions o = Opts();
    o.argv = V("sh", "-c", "trap 'echo got' USR1; trap 'echo two' USR2; echo ready; while :; do sleep 0.05; done");
    o.reconnect = true;
    auto p = co_await Process::Start(lossy, o);
    REQUIRE(p.ok());
    // The trap is set once "ready" is here (left unread: ReadAll takes it).
    for (int i = 0; i < 3000 && (*p)->unread_bytes() < 6; ++i) co_await Sleep(std::chrono::milliseconds(5));
    REQUIRE((*p)->unread_bytes() >= 6);
    lossy.StartDropping();  // the Signal frame goes into a black hole
    asio::steady_timer cut(co_await asio::this_coro::executor, std::chrono::milliseconds(300));
    cut.async_wait([&lossy](boost::system::error_code ec) {
      if (!ec) {
        lossy.StopDropping();
        lossy.Cut();  // the tunnel reattaches on a new channel
      }
    });
    absl::Status st = co_await (*p)->Signal(SIGUSR1);
    CHECK(ErrorCodeOf(st) == ErrorCode::kOutcomeUnknown);
    for (int i = 0; i < 300 && (*p)->reconnects() == 0; ++i) co_await Sleep(std::chrono::milliseconds(10));
    CHECK((*p)->reconnects() >= 1);
    // An anchor instead of a pause: USR2 goes after any resent USR1 on the
    // same ordered channel, and the shell runs pending traps in signal
    // order, so a resent USR1 would print "got" before "two".
    CHECK((co_await (*p)->Signal(SIGUSR2)).ok());
    const Output seen = co_await ReadStdoutUntil(**p, "two\n");
    CHECK((co_await (*p)->Terminate(100)).ok());
    Output rest = co_await ReadAll(**p, seen.out.size(), seen.err.size());
    CHECK(seen.out + rest.out == "ready\ntwo\n");  // swallowed, and not sent again
    auto e = co_await (*p)->Wait();
    REQUIRE(e.ok());
    CHECK(e->signal == SIGTERM);
  });
}

TEST_CASE("a signal sent as the channel breaks reaches the child exactly once through the next attachment") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    auto lossy_owner = std::make_shared<LossyTransport>(t);
    LossyTransport& lossy = *lossy_owner;
    StartOptions o = Opts();
    o.argv = V("sh", "-c", "trap 'echo got' USR1; trap 'echo two' USR2; echo ready; while :; do sleep 0.05; done");
    o.reconnect = true;
    auto p = co_await Process::Start(lossy, o);
    REQUIRE(p.ok());
    // The trap is set once "ready" is here (left unread: ReadAll takes it).
    for (int i = 0; i < 3000 && (*p)->unread_bytes() < 6; ++i) co_await Sleep(std::chrono::milliseconds(5));
    REQUIRE((*p)->unread_bytes() >= 6);
    // Cut while the frame is only queued: the session closes before its
    // writer hands it to the channel, so it provably never left this host.
    lossy.Cut();
    absl::Status st = co_await (*p)->Signal(SIGUSR1);
    CHECK(st.ok());
    CHECK((*p)->reconnects() >= 1);
    // The anchor as above: a second USR1 would print "got" again before "two"
    // (one that lands while the first is still pending merges with it:
    // signals do not queue; this catches any later one).
    CHECK((co_await (*p)->Signal(SIGUSR2)).ok());
    const Output seen = co_await ReadStdoutUntil(**p, "two\n");
    CHECK((co_await (*p)->Terminate(100)).ok());
    Output rest = co_await ReadAll(**p, seen.out.size(), seen.err.size());
    CHECK(seen.out + rest.out == "ready\ngot\ntwo\n");  // once
    auto e = co_await (*p)->Wait();
    REQUIRE(e.ok());
    CHECK(e->signal == SIGTERM);
  });
}


// Found under fault injection (conformance.*-faults, pty.size_and_resize,
// under load): a Resize whose frame left this host as the channel broke was
// OUTCOME_UNKNOWN, like a Signal. A size set twice is the same size, so a
// Resize is sent again on the next attachment until acknowledged.
TEST_CASE("a resize the channel swallows before a reattach is sent again and reaches the child") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    auto lossy_owner = std::make_shared<LossyTransport>(t);
    LossyTransport& lossy = *lossy_owner;
    StartOptions o = Opts();
    o.argv = V("sh", "-c", "stty size; read x; stty size");
    o.pty = StartOptions::PtySize{80, 24};
    o.reconnect = true;
    auto p = co_await Process::Start(lossy, o);
    REQUIRE(p.ok());
    CHECK((co_await ReadUntil(**p, "24 80\r\n")).find("24 80") != std::string::npos);
    lossy.StartDropping();  // the Resize frame goes into a black hole
    asio::steady_timer cut(co_await asio::this_coro::executor, std::chrono::milliseconds(300));
    cut.async_wait([&lossy](boost::system::error_code ec) {
      if (!ec) {
        lossy.StopDropping();
        lossy.Cut();  // the tunnel reattaches on a new channel
      }
    });
    const absl::Status st = co_await (*p)->Resize(132, 43);
    CHECK_MESSAGE(st.ok(), st);
    CHECK((*p)->reconnects() >= 1);
    CHECK((co_await (*p)->Write("\n")).ok());
    CHECK((co_await ReadUntil(**p, "43 132\r\n")).find("43 132") != std::string::npos);
    co_await Drain(**p);
    auto e = co_await (*p)->Wait();
    REQUIRE(e.ok());
    CHECK(e->code == 0);
  });
}
TEST_CASE("a control handle sees the exit without taking it; a later reopen gets the output and the exit") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    auto p = co_await Start(t, V("sh", "-c", "printf out; printf err >&2; exit 3"));
    REQUIRE(p.ok());
    // The child exits at once: its exit reaches this handle before the
    // disconnect, and must not be acknowledged by it (nothing was read).
    // Waited for: the supervisor reports the exit, and all 6 bytes arrived
    // here. It sends its replies of a batch before that batch's output and
    // exit (AttachmentCore::NextBatch), so the exit, sent once both streams
    // ended, is here by the time a later Status() is answered.
    bool exited = false;
    for (int i = 0; i < 3000 && !exited; ++i) {
      auto st = co_await (*p)->Status();
      REQUIRE(st.ok());
      exited = st->state == ProcessStatus::State::kExited && (*p)->unread_bytes() == 6;
      if (!exited) co_await Sleep(std::chrono::milliseconds(10));
    }
    REQUIRE(exited);
    REQUIRE((co_await (*p)->Status()).ok());  // a later batch than the exit
    absl::StatusOr<std::string> ref = (*p)->Reference();
    REQUIRE(ref.ok());
    CHECK((co_await (*p)->Disconnect()).ok());
    p->reset();
    ReopenOptions control;
    control.control = true;
    for (int i = 0; i < 3; ++i) {
      auto c = co_await Process::Reopen(t, *ref, control);
      REQUIRE(c.ok());
      auto st = co_await (*c)->Status();
      REQUIRE(st.ok());
      CHECK(st->state == ProcessStatus::State::kExited);
      REQUIRE(st->exit.has_value());
      CHECK(st->exit->code == 3);
      CHECK(absl::IsUnimplemented((co_await (*c)->Read()).status()));
      CHECK(absl::IsFailedPrecondition((co_await (*c)->Wait()).status()));
      CHECK((co_await (*c)->Terminate(100)).ok());  // moot, and harmless
      CHECK((co_await (*c)->Disconnect()).ok());
    }
    auto q = co_await Process::Reopen(t, *ref);
    REQUIRE(q.ok());
    Output rest = co_await ReadAll(**q);
    CHECK(rest.status.ok());
    CHECK(rest.out == "out");
    CHECK(rest.err == "err");
    auto e = co_await (*q)->Wait();
    REQUIRE(e.ok());
    CHECK(e->code == 3);
  });
  CHECK(sb.LeftoverStateDirs() == 0);
}

TEST_CASE("a control handle works while another handle holds the process (no BUSY)") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    auto p = co_await Start(t, V("sleep", "100"));
    REQUIRE(p.ok());
    absl::StatusOr<std::string> ref = (*p)->Reference();
    REQUIRE(ref.ok());
    // A second full attachment is BUSY; a control one is not.
    auto busy = co_await Process::Reopen(t, *ref);
    CHECK(ErrorCodeOf(busy.status()) == ErrorCode::kBusy);
    ReopenOptions control;
    control.control = true;
    auto c = co_await Process::Reopen(t, *ref, control);
    REQUIRE(c.ok());
    auto st = co_await (*c)->Status();
    REQUIRE(st.ok());
    CHECK(st->state == ProcessStatus::State::kRunning);
    CHECK((co_await (*c)->Terminate(500)).ok());
    CHECK((co_await (*c)->Disconnect()).ok());
    // The holder sees the exit the control handle caused, and takes it.
    auto e = co_await (*p)->Wait();
    REQUIRE(e.ok());
    CHECK(e->signal == SIGTERM);
  });
  CHECK(sb.LeftoverStateDirs() == 0);
}

TEST_CASE("a reference edited to name another program or directory runs nothing") {
  Sandbox sb;
  sb.Run([&sb](Transport& t) -> awaitable<void> {
    auto p = co_await Start(t, V("sleep", "100"));
    REQUIRE(p.ok());
    absl::StatusOr<std::string> ref = (*p)->Reference();
    REQUIRE(ref.ok());
    const auto edit = [&](const std::string& key, const std::string& value) {
      std::string r = *ref;
      const std::size_t k = r.find("\"" + key + "\":\"");
      const std::size_t from = k + key.size() + 4;
      const std::size_t to = r.find('"', from);
      return r.substr(0, from) + value + r.substr(to);
    };
    std::vector<std::string> edited;
    edited.push_back(edit("supervisor", "/bin/rm"));
    edited.push_back(edit("state_dir", sb.root()));
    edited.push_back(edit("state_dir", "/tmp"));
    edited.push_back(edit("supervisor", sb.root() + "/bin/../run/x"));
    edited.push_back(edit("state_dir", sb.root() + "/run/.."));
    for (const std::string& bad : edited) {
      auto q = co_await Process::Reopen(t, bad);
      CHECK(absl::IsInvalidArgument(q.status()));
    }
    CHECK((co_await (*p)->Terminate(100)).ok());
    CHECK((co_await (*p)->Wait()).ok());
  });
  CHECK(sb.LeftoverStateDirs() == 0);
}

}  // namespace
}  // namespace tether

namespace tether {
namespace {

// A sandbox whose probe, or whose uploads, never answer. (A probe is made
// only where starts do not run a start script: one-shot channels.)
class SilentTransport final : public internal::ForwardingTransport {
 public:
  SilentTransport(Transport& inner, bool silent_probe) : ForwardingTransport(inner), silent_probe_(silent_probe) {}
  ChannelCapabilities capabilities() const override {
    // (Text: a binary stream would take the binary inline, with no upload.)
    return CapabilitiesOf(silent_probe_ ? TunnelMode::kExchange : TunnelMode::kText);
  }
  awaitable<absl::StatusOr<SandboxInfo>> Probe() override {
    if (silent_probe_) co_await Forever();
    co_return co_await inner().Probe();
  }
  awaitable<absl::Status> PutFile(std::string path, std::string_view bytes, int mode) override {
    co_await Forever();
    co_return co_await inner().PutFile(std::move(path), bytes, mode);
  }

 private:
  static awaitable<void> Forever() {
    asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::hours(1));
    co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
  }
  bool silent_probe_;
};

TEST_CASE("a probe or an upload that never answers ends within the setup timeout, and nothing starts") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    for (bool silent_probe : {true, false}) {
      auto silent_owner = std::make_shared<SilentTransport>(t, silent_probe);
      SilentTransport& silent = *silent_owner;
      StartOptions o = Opts();
      o.argv = V("true");
      // (Long enough for the start script to ask for the upload on a
      // loaded machine: the deadline then passes during the upload.)
      o.setup_timeout_ms = silent_probe ? 300 : 3000;
      const auto t0 = std::chrono::steady_clock::now();
      auto p = co_await Process::Start(silent, o);
      const auto took = std::chrono::steady_clock::now() - t0;
      CAPTURE(p.status());
      CAPTURE(std::chrono::duration_cast<std::chrono::milliseconds>(took).count());
      CHECK_FALSE(p.ok());
      CHECK(ErrorCodeOf(p.status()) == ErrorCode::kUnavailable);
      // A deadline the product promises (setup_timeout_ms), so a bound: the
      // silent call would otherwise hang for an hour, or end at the default
      // 30 s. After the deadline only a few local steps run; 10 s of margin
      // holds on 2 loaded cores under ASan and stays well below 30 s.
      CHECK(took < std::chrono::milliseconds(o.setup_timeout_ms + 10000));
    }
  });
  CHECK(sb.LeftoverStateDirs() == 0);
}

// A sandbox whose commands start late: the setup deadline passes while the
// start script is in flight, so a cancellation marker must be written.
class LateExec : public internal::ForwardingTransport {
 public:
  explicit LateExec(Transport& inner) : ForwardingTransport(inner) {}
  ChannelCapabilities capabilities() const override { return CapabilitiesOf(TunnelMode::kText); }
  awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(std::vector<std::string> argv) override {
    asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::seconds(2));
    auto [ec] = co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec) co_return absl::CancelledError("exec cancelled");
    co_return co_await inner().Exec(std::move(argv));
  }
};

// ... and whose file calls never answer (so the marker cannot be written).
class LateExecSilentFiles final : public LateExec {
 public:
  using LateExec::LateExec;
  awaitable<absl::Status> PutFile(std::string, std::string_view, int) override {
    asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::hours(1));
    co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
    co_return absl::CancelledError("put cancelled");
  }
};

TEST_CASE("a cancellation marker that cannot be written ends the start in bounded time, outcome unknown") {
  // Before the marker had a time limit of its own, this start never ended.
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    auto late = std::make_shared<LateExecSilentFiles>(t);
    StartOptions o = Opts();
    o.argv = V("true");
    o.setup_timeout_ms = 300;
    const auto t0 = std::chrono::steady_clock::now();
    auto p = co_await Process::Start(*late, o);
    const auto took = std::chrono::steady_clock::now() - t0;
    CAPTURE(p.status());
    CHECK_FALSE(p.ok());
    CHECK(ErrorCodeOf(p.status()) == ErrorCode::kOutcomeUnknown);
    // A deadline the product promises: setup 0.3 s + the marker's own 5 s
    // (kMarkerTimeout). Without it this start never ended; the 10 s margin
    // holds on 2 loaded cores under ASan and stays below the 30 s defaults.
    CAPTURE(std::chrono::duration_cast<std::chrono::milliseconds>(took).count());
    CHECK(took < std::chrono::milliseconds(300 + 5000 + 10000));
  });
  CHECK(sb.LeftoverStateDirs() == 0);
}

// A sandbox whose start scripts arrive late: each is accepted at once and
// delivered 2 s later, even after the host gave up (SlowTransport), so the
// setup deadline passes while it is in flight and the launch still comes.
class LateLaunch : public internal::ForwardingTransport {
 public:
  explicit LateLaunch(Transport& inner) : ForwardingTransport(inner), slow_(inner, std::chrono::seconds(2)) {}
  ChannelCapabilities capabilities() const override { return CapabilitiesOf(TunnelMode::kText); }
  awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(std::vector<std::string> argv) override {
    co_return co_await slow_.Exec(std::move(argv));
  }
  int landed() const { return slow_.landed(); }
  int puts() const { return puts_; }

 protected:
  int puts_ = 0;

 private:
  SlowTransport slow_;
};

// ... whose first two file calls fail as a cut channel does (UNAVAILABLE,
// nothing written).
class LateLaunchCutFiles final : public LateLaunch {
 public:
  using LateLaunch::LateLaunch;
  awaitable<absl::Status> PutFile(std::string path, std::string_view bytes, int mode) override {
    if (++puts_ <= 2) co_return absl::UnavailableError("emulated cut");
    co_return co_await inner().PutFile(std::move(path), bytes, mode);
  }
};

// ... whose first two file calls are answered as a lost answer is
// (OUTCOME_UNKNOWN), once with nothing written and once after writing.
class LateLaunchLostFiles final : public LateLaunch {
 public:
  using LateLaunch::LateLaunch;
  awaitable<absl::Status> PutFile(std::string path, std::string_view bytes, int mode) override {
    ++puts_;
    if (puts_ == 1) co_return OutcomeUnknownError("emulated: the answer was lost before the call ran");
    if (puts_ == 2) {
      absl::Status st = co_await inner().PutFile(path, bytes, mode);
      (void)st;
      std::filesystem::remove(path);  // as if the write had been lost on the way in
      co_return OutcomeUnknownError("emulated: the answer was lost after the call ran");
    }
    co_return co_await inner().PutFile(std::move(path), bytes, mode);
  }
};

// A start whose setup times out while its launch is in flight, over `Late`:
// the marker is written (after the file calls `Late` fails), the start is
// OUTCOME_UNKNOWN, and the launch that lands 2 s later finds the marker,
// starts nothing and takes the marker away.
template <typename Late>
void LateLaunchFindsTheMarker() {
  Sandbox sb;
  const std::string flag = sb.root() + "/late-launch-ran";
  sb.Run([&](Transport& t) -> awaitable<void> {
    // The supervisor is in place, so the late launch is the supervisor's
    // (which finds the marker) and the only file calls are the marker's.
    co_await WarmUp(t);
    auto late = std::make_shared<Late>(t);
    StartOptions o = Opts();
    o.argv = V("sh", "-c", "echo ran > '" + flag + "'");
    o.setup_timeout_ms = 300;
    auto p = co_await Process::Start(*late, o);
    CAPTURE(p.status());
    CHECK(ErrorCodeOf(p.status()) == ErrorCode::kOutcomeUnknown);
    CHECK(std::string(p.status().message()).find("a cancellation marker stops a delayed launch") != std::string::npos);
    CHECK(late->puts() == 3);
    CHECK(late->landed() == 0);  // the launch is still on its way
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (late->landed() == 0 && std::chrono::steady_clock::now() < deadline) {
      asio::steady_timer timer(co_await asio::this_coro::executor, std::chrono::milliseconds(50));
      co_await timer.async_wait(asio::use_awaitable);
    }
    REQUIRE(late->landed() == 1);  // the launch arrived and its launcher ended
    CHECK_FALSE(std::filesystem::exists(flag));
  });
  // The launcher left no state directory, and the marker for any other copy.
  CHECK(sb.LeftoverStateDirs() == 0);
  CHECK(sb.Markers() == 1);
}

TEST_CASE("a cancellation marker whose first writes are cut is written again, and the late launch starts nothing") {
  // Before, one cut call left the marker unwritten, and the launch that
  // arrived late started the child.
  LateLaunchFindsTheMarker<LateLaunchCutFiles>();
}

TEST_CASE("a cancellation marker whose writes lost their answers is written again, and the late launch starts nothing") {
  // Before, a marker write answered OUTCOME_UNKNOWN (a 502 after the call
  // ran, as Runloop's emulator sends) was not tried again, so the marker
  // might be missing and the start said so (CI, conformance.runloop-faults
  // cancel.setup_timeout). Writing it is idempotent: it is tried again.
  LateLaunchFindsTheMarker<LateLaunchLostFiles>();
}

}  // namespace
}  // namespace tether

namespace tether {
namespace {

TEST_CASE("a well-formed reference parses and round-trips; each damaged field is refused") {
  const std::int64_t now = 1900000000;
  const std::string good =
      R"({"tether_process":1,"provider":"local","sandbox":"/tmp/s","supervisor":"/tmp/s/bin/tether-supervisor-x",)"
      R"("state_dir":"/tmp/s/run/0123456789abcdef","secret":"00112233445566778899aabbccddeeff","pid":4242,)"
      R"("stdin_pipe":true,"pty":false,"text":false,"backpressure":true,"window_bytes":1048576,"output_left":-1,)"
      R"("stdout_offset":12,"stderr_offset":0,"expires_at":1900050000,"ticket":")" +
      std::string(64, 'f') + R"("})";
  absl::StatusOr<ProcessReference> r = ParseReference(good, now);
  REQUIRE_MESSAGE(r.ok(), r.status().ToString());
  CHECK(r->ticket_mac == std::string(32, '\xff'));
  absl::StatusOr<ProcessReference> again = ParseReference(EncodeReference(*r), now);
  REQUIRE(again.ok());
  CHECK(EncodeReference(*again) == EncodeReference(*r));
  const auto with = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const std::size_t at = s.find(from);
    REQUIRE(at != std::string::npos);
    s.replace(at, from.size(), to);
    return ParseReference(s, now).status();
  };
  CHECK(absl::IsInvalidArgument(with("\"/tmp/s/run/", "\"/tmp/s/run/../")));
  CHECK(absl::IsInvalidArgument(with("\"window_bytes\":1048576", "\"window_bytes\":100")));
  CHECK(absl::IsInvalidArgument(with("\"pid\":4242", "\"pid\":1")));
  CHECK(absl::IsInvalidArgument(with("\"stdin_pipe\":true,\"pty\":false", "\"stdin_pipe\":false,\"pty\":true")));
  CHECK(absl::IsInvalidArgument(with(std::string(64, 'f'), "ff")));
  CHECK(absl::IsInvalidArgument(with("\"provider\":\"local\"", "\"provider\":\"\"")));
  CHECK(ErrorCodeOf(with("1900050000", "1000")) == ErrorCode::kExpired);
}

}  // namespace
}  // namespace tether

namespace tether {
namespace {

// Records, per Write, the frames the host sends on its channels once armed
// (after the start: from then on every write is whole frames).
class TappedTransport final : public internal::ForwardingTransport {
 public:
  struct Tap {
    bool armed = false;
    bool eof_read = false;  // set by the test once Read() returned the end
    struct Write {
      std::vector<wire::Envelope> frames;
      bool after_eof = false;
    };
    std::vector<Write> writes;
  };

  explicit TappedTransport(Transport& inner) : ForwardingTransport(inner) {}
  ChannelCapabilities capabilities() const override { return CapabilitiesOf(TunnelMode::kBinary); }
  awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(std::vector<std::string> argv) override {
    auto c = co_await inner().Exec(std::move(argv));
    if (!c.ok()) co_return c;
    co_return std::unique_ptr<Channel>(std::make_unique<TapChannel>(*std::move(c), tap));
  }
  std::shared_ptr<Tap> tap = std::make_shared<Tap>();

 private:
  class TapChannel final : public Channel {
   public:
    TapChannel(std::unique_ptr<Channel> inner, std::shared_ptr<Tap> tap) : inner_(std::move(inner)), tap_(tap) {}
    awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf) override {
      co_return co_await inner_->ReadSome(buf);
    }
    bool waits_readable() const override { return inner_->waits_readable(); }
    awaitable<absl::Status> WaitReadable() override { co_return co_await inner_->WaitReadable(); }
    awaitable<absl::Status> Write(std::string_view bytes) override {
      if (tap_->armed) {
        Tap::Write w;
        w.after_eof = tap_->eof_read;
        std::string_view in = bytes;
        std::string payload;
        while (true) {
          absl::StatusOr<protocol::DecodeResult> r = decoder_.Decode(&in, &payload);
          REQUIRE(r.ok());
          if (*r == protocol::DecodeResult::kNeedMore) break;
          wire::Envelope env;
          REQUIRE(env.ParseFromString(payload));
          w.frames.push_back(std::move(env));
        }
        tap_->writes.push_back(std::move(w));
      }
      co_return co_await inner_->Write(bytes);
    }
    void CloseWrite() override { inner_->CloseWrite(); }
    void Close() override { inner_->Close(); }
    awaitable<void> AsyncClose() override { co_await inner_->AsyncClose(); }
    std::optional<int> exit_code() const override { return inner_->exit_code(); }
    std::string Diagnostics() const override { return inner_->Diagnostics(); }

   private:
    std::unique_ptr<Channel> inner_;
    std::shared_ptr<Tap> tap_;
    protocol::FrameDecoder decoder_;
  };
};

// A trickle of output (less than a quarter window in all) costs no ack of
// its own: what was consumed goes out with the keepalive's ping, in the
// same write, so the daemon wakes once per output frame, not twice. Before,
// each line read more than 50 ms after the last ack was acknowledged at
// once, a frame (and a daemon wake-up) per line.
TEST_CASE("a trickle's acks ride on the keepalive ping, never alone") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    co_await WarmUp(t);
    auto tapped_owner = std::make_shared<TappedTransport>(t);
    TappedTransport& tapped = *tapped_owner;
    StartOptions o = Opts();
    o.argv = V("sh", "-c", "for i in 1 2 3 4 5 6 7 8; do echo line$i; sleep 0.2; done");
    o.lease_ms = 1500;  // a ping every 500 ms
    auto p = co_await Process::Start(tapped, o);
    REQUIRE_MESSAGE(p.ok(), p.status());
    tapped.tap->armed = true;
    std::string out;
    int reads = 0;
    while (true) {
      auto c = co_await (*p)->Read();
      REQUIRE_MESSAGE(c.ok(), c.status());
      if (!*c) break;
      out += (*c)->bytes;
      ++reads;
    }
    tapped.tap->eof_read = true;
    auto e = co_await (*p)->Wait();
    REQUIRE(e.ok());
    CHECK(e->code == 0);
    CHECK(out == "line1\nline2\nline3\nline4\nline5\nline6\nline7\nline8\n");
    int alone = 0, riding = 0;
    std::uint64_t acked_with_ping = 0;
    std::string log;
    for (const auto& w : tapped.tap->writes) {
      log += w.after_eof ? "| after EOF:" : "|";
      for (const auto& f : w.frames) log += " " + std::to_string(int(f.body_case()));
    }
    CAPTURE(log);
    for (const auto& w : tapped.tap->writes) {
      bool has_ping = false;
      for (const auto& f : w.frames) has_ping |= f.has_ping();
      for (const auto& f : w.frames) {
        if (!f.has_ack() || w.after_eof || f.ack().exit()) continue;
        if (has_ping) {
          ++riding;
          acked_with_ping = std::max<std::uint64_t>(acked_with_ping, f.ack().stdout_offset());
        } else if (f.ack().stdout_offset() < out.size()) {
          // Credit for part of the output, alone. (The ack of all of it is
          // due at once when both ends arrive after the last byte was
          // taken, so it may precede our read of the EOF, depending on
          // where the pings fall: with the child started 0.05-0.1 s later
          // against them, this test failed when it counted that ack too.)
          ++alone;
        }
      }
    }
    CAPTURE(reads);
    CAPTURE(tapped.tap->writes.size());
    CHECK(reads >= 4);  // it was a trickle: read a few lines at a time at most
    CHECK(alone == 0);
    CHECK(riding >= 1);  // 1.6 s of output, a ping every 500 ms
    CHECK(acked_with_ping > 0);
    CHECK(acked_with_ping <= out.size());
  });
  CHECK(sb.LeftoverStateDirs() == 0);
}

}  // namespace
}  // namespace tether
