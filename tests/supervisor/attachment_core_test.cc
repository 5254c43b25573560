#include "supervisor/attachment_core.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <doctest.h>

#include "protocol/envelope.h"
#include "tether/protocol/version.h"

namespace tether::supervisor {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr char kSecret[] = "attachment-core-test-secret-0123";
constexpr std::int64_t kNow = 1'800'000'000;  // wall clock, s

wire::Launch TestLaunch() {
  wire::Launch l;
  l.set_launch_id("test");
  l.set_secret(kSecret);
  l.set_stdin_mode(wire::STDIN_PIPE);
  l.set_lease_ms(1000);
  return l;
}

// One core over a running process, fed whole envelopes; its batches decoded.
struct Fixture {
  explicit Fixture(wire::Launch l = TestLaunch()) : p(std::move(l), std::string(kTicketKeyBytes, 'k')) {
    p.pid = p.pgid = 100;
    p.phase = wire::ProcessState::PHASE_RUNNING;
  }

  std::vector<Action> Send(AttachmentCore& core, wire::Envelope env, AttachmentCore::Step want =
                                                                           AttachmentCore::Step::kHandled) {
    std::string bytes;
    protocol::AppendEnvelope(env, protocol::Compression::kNone, &bytes);
    std::string_view in = bytes;
    std::vector<Action> actions;
    CHECK(core.Next(&in, kNow, &actions) == want);
    return actions;
  }
  std::vector<wire::Envelope> Read(AttachmentCore& core) {
    OutputBatch batch;
    core.NextBatch(&batch);
    std::string bytes;
    for (std::string_view v : batch.Views()) bytes.append(v);
    std::string_view in = bytes;
    std::vector<wire::Envelope> out;
    wire::Envelope env;
    while (*replies.Next(&in, &env)) out.push_back(env);
    return out;
  }
  wire::Envelope Hello(std::uint64_t window = 0, bool zstd = false) const {
    wire::Envelope env;
    env.set_request_id(1);
    env.mutable_hello()->set_secret(kSecret);
    env.mutable_hello()->set_min_version(kProtocolVersion);
    env.mutable_hello()->set_max_version(kProtocolVersion);
    env.mutable_hello()->set_window_bytes(window);
    env.mutable_hello()->set_zstd(zstd);
    return env;
  }
  void Write(int stream, std::string_view bytes) {
    std::span<char> space = p.rings[stream].WritableSpan();
    REQUIRE(space.size() >= bytes.size());
    std::copy(bytes.begin(), bytes.end(), space.begin());
    p.rings[stream].Commit(bytes.size());
  }

  Supervised p;
  protocol::EnvelopeDecoder replies;
};

TEST_CASE("a wrong secret gets a fatal UNAUTHENTICATED error and no welcome") {
  Fixture f;
  AttachmentCore core(f.p, Clock::now());
  wire::Envelope hello = f.Hello();
  hello.mutable_hello()->set_secret("attachment-core-test-secret-0124");
  f.Send(core, hello, AttachmentCore::Step::kStop);
  const std::vector<wire::Envelope> got = f.Read(core);
  REQUIRE(got.size() == 1);
  CHECK(got[0].error().code() == wire::ERROR_UNAUTHENTICATED);
  CHECK(got[0].error().fatal());
  CHECK(!core.authenticated());
  CHECK(!f.p.held);
}

TEST_CASE("a hello takes the process: generation 1, Attached, and a second one is BUSY") {
  Fixture f;
  AttachmentCore first(f.p, Clock::now());
  const std::vector<Action> actions = f.Send(first, f.Hello());
  REQUIRE(!actions.empty());
  CHECK(actions[0].kind == Action::kAttached);
  const std::vector<wire::Envelope> got = f.Read(first);
  REQUIRE(got.size() == 1);
  CHECK(got[0].welcome().generation() == 1);
  CHECK(got[0].welcome().stdin_window_bytes() == kStdinWindowBytes);

  AttachmentCore second(f.p, Clock::now());
  wire::Envelope hello = f.Hello();
  *hello.mutable_hello()->mutable_ticket() = got[0].welcome().ticket();
  f.replies = protocol::EnvelopeDecoder();  // another connection's replies
  f.Send(second, hello, AttachmentCore::Step::kStop);
  const std::vector<wire::Envelope> busy = f.Read(second);
  REQUIRE(busy.size() == 1);
  CHECK(busy[0].error().code() == wire::ERROR_BUSY);
}

TEST_CASE("a resend hello needs no ticket within 120 s of the launch, and one after; it marks the process resent") {
  // The first attachment was granted and lost before its Welcome arrived
  // (generation 1, nobody holds it): the launching host sends its Launch
  // and Hello again, without a ticket (PROTOCOL.md 4.2 step 4).
  const auto attach = [](std::int64_t launched_ago, bool resend) {
    Fixture f;
    f.p.generation = 1;
    f.p.launched_at_s = kNow - launched_ago;
    AttachmentCore core(f.p, Clock::now());
    wire::Envelope hello = f.Hello();
    hello.mutable_hello()->set_resend(resend);
    const bool expired = resend ? launched_ago >= kResendWindowSeconds : true;
    f.Send(core, hello, expired ? AttachmentCore::Step::kStop : AttachmentCore::Step::kHandled);
    const std::vector<wire::Envelope> got = f.Read(core);
    REQUIRE(got.size() == 1);
    if (expired) {
      CHECK(got[0].error().code() == wire::ERROR_EXPIRED);
    } else {
      CHECK(got[0].welcome().generation() == 2);
      CHECK(got[0].welcome().ticket().mac().size() == 32);
    }
    return f.p.resent;
  };
  CHECK(attach(0, true));
  CHECK(attach(kResendWindowSeconds - 1, true));
  CHECK(attach(kResendWindowSeconds, true));  // refused, but its secret was right: still a resent launch
  CHECK_FALSE(attach(5, false));              // an ordinary reattach still needs its ticket
  // A daemon that does not know its start time (0) takes no resend without a ticket.
  Fixture f;
  f.p.generation = 1;
  AttachmentCore core(f.p, Clock::now());
  wire::Envelope hello = f.Hello();
  hello.mutable_hello()->set_resend(true);
  f.Send(core, hello, AttachmentCore::Step::kStop);
  CHECK(f.Read(core).at(0).error().code() == wire::ERROR_EXPIRED);
}

TEST_CASE("a resend hello takes the process from the attachment holding it; an ordinary one gets BUSY") {
  // The launching host gave up on its first attempt's channel before the
  // daemon saw it end: that attempt still holds the process.
  Fixture f;
  f.p.launched_at_s = kNow - 1;
  AttachmentCore first(f.p, Clock::now());
  f.Send(first, f.Hello());
  const wire::Ticket ticket = f.Read(first).at(0).welcome().ticket();
  {
    AttachmentCore other(f.p, Clock::now());
    wire::Envelope hello = f.Hello();
    *hello.mutable_hello()->mutable_ticket() = ticket;
    f.replies = protocol::EnvelopeDecoder();
    f.Send(other, hello, AttachmentCore::Step::kStop);
    CHECK(f.Read(other).at(0).error().code() == wire::ERROR_BUSY);
  }
  AttachmentCore again(f.p, Clock::now());
  wire::Envelope hello = f.Hello();
  hello.mutable_hello()->set_resend(true);
  f.replies = protocol::EnvelopeDecoder();
  const std::vector<Action> actions = f.Send(again, hello);
  REQUIRE(actions.size() >= 2);
  CHECK(actions[0].kind == Action::kDisplaced);
  CHECK(actions[1].kind == Action::kAttached);
  CHECK(f.Read(again).at(0).welcome().generation() == 2);
  CHECK(f.p.held);
}

TEST_CASE("a hello from the handle holding the process takes it; another handle's, or none, gets BUSY") {
  // A handle that gave up its attachment (a lost Welcome, a cut channel
  // whose far end lives on) attaches again before the daemon saw it end.
  Fixture f;
  const std::string mine(16, 'A');
  AttachmentCore first(f.p, Clock::now());
  wire::Envelope hello = f.Hello();
  hello.mutable_hello()->set_handle(mine);
  f.Send(first, hello);
  const wire::Ticket ticket = f.Read(first).at(0).welcome().ticket();
  CHECK(f.p.holder_handle == mine);
  for (const std::string other : {std::string(16, 'B'), std::string(), std::string(15, 'A')}) {
    CAPTURE(other.size());
    AttachmentCore core(f.p, Clock::now());
    wire::Envelope h = f.Hello();
    h.mutable_hello()->set_handle(other);
    *h.mutable_hello()->mutable_ticket() = ticket;
    f.replies = protocol::EnvelopeDecoder();
    f.Send(core, h, AttachmentCore::Step::kStop);
    CHECK(f.Read(core).at(0).error().code() == wire::ERROR_BUSY);
  }
  {
    // The same handle still shows a ticket: the claim opens nothing.
    AttachmentCore core(f.p, Clock::now());
    f.replies = protocol::EnvelopeDecoder();
    f.Send(core, hello, AttachmentCore::Step::kStop);
    CHECK(f.Read(core).at(0).error().code() == wire::ERROR_EXPIRED);
  }
  AttachmentCore again(f.p, Clock::now());
  *hello.mutable_hello()->mutable_ticket() = ticket;
  f.replies = protocol::EnvelopeDecoder();
  const std::vector<Action> actions = f.Send(again, hello);
  REQUIRE(actions.size() >= 2);
  CHECK(actions[0].kind == Action::kDisplaced);
  CHECK(actions[1].kind == Action::kAttached);
  CHECK(f.Read(again).at(0).welcome().generation() == 2);
  CHECK(f.p.held);
  CHECK(f.p.holder_handle == mine);
}

TEST_CASE("a handle id longer than 32 bytes is refused before anything else is looked at") {
  Fixture f;
  AttachmentCore core(f.p, Clock::now());
  wire::Envelope hello = f.Hello();
  hello.mutable_hello()->set_handle(std::string(33, 'A'));
  f.Send(core, hello, AttachmentCore::Step::kStop);
  const wire::Error e = f.Read(core).at(0).error();
  CHECK(e.code() == wire::ERROR_PROTOCOL);
  CHECK(e.message().find("handle id of 33 bytes") != std::string::npos);
  CHECK(!f.p.held);
  CHECK(f.p.generation == 0);
}

TEST_CASE("a first attachment that is a resend takes generation 1 and marks the process resent") {
  Fixture f;
  f.p.launched_at_s = kNow - 1;
  AttachmentCore core(f.p, Clock::now());
  wire::Envelope hello = f.Hello();
  hello.mutable_hello()->set_resend(true);
  f.Send(core, hello);
  CHECK(f.Read(core).at(0).welcome().generation() == 1);
  CHECK(f.p.resent);
}

TEST_CASE("output stops at the window the host granted and resumes after its ack") {
  Fixture f;
  AttachmentCore core(f.p, Clock::now());
  f.Send(core, f.Hello(4096));
  f.Write(0, std::string(6000, 'o'));
  std::vector<wire::Envelope> got = f.Read(core);
  REQUIRE(got.size() == 2);  // welcome, then 4096 bytes of output
  CHECK(got[1].output().offset() == 0);
  CHECK(got[1].output().data().size() == 4096);
  CHECK(f.Read(core).empty());  // the window is full

  wire::Envelope ack;
  ack.set_generation(1);
  ack.mutable_ack()->set_stdout_offset(4096);
  const std::vector<Action> actions = f.Send(core, ack);
  REQUIRE(actions.size() == 1);
  CHECK(actions[0].kind == Action::kReleased);
  got = f.Read(core);
  REQUIRE(got.size() == 1);
  CHECK(got[0].output().offset() == 4096);
  CHECK(got[0].output().data().size() == 6000 - 4096);
}

TEST_CASE("streams take turns, so a flooding stdout cannot keep the window from stderr") {
  Fixture f;
  AttachmentCore core(f.p, Clock::now());
  f.Send(core, f.Hello(2 * kMaxOutputChunkBytes));
  f.Read(core);
  f.Write(0, std::string(3 * kMaxOutputChunkBytes, 'o'));
  f.Write(1, "err");
  std::vector<wire::Envelope> got = f.Read(core);
  REQUIRE(got.size() == 2);  // stdout went first and filled the window
  CHECK(got[1].output().stream() == wire::STREAM_STDOUT);
  wire::Envelope ack;
  ack.set_generation(1);
  ack.mutable_ack()->set_stdout_offset(2 * kMaxOutputChunkBytes);
  f.Send(core, ack);
  got = f.Read(core);
  REQUIRE(got.size() == 2);  // now stderr goes first
  CHECK(got[0].output().stream() == wire::STREAM_STDERR);
  CHECK(got[0].output().data() == "err");
  CHECK(got[1].output().stream() == wire::STREAM_STDOUT);
}

TEST_CASE("with zstd, incompressible output still arrives byte for byte") {
  Fixture f;
  AttachmentCore core(f.p, Clock::now());
  f.Send(core, f.Hello(0, /*zstd=*/true));
  f.Read(core);
  std::string noise(2 * kMaxOutputChunkBytes, '\0');
  std::uint64_t x = 88172645463325252ull;
  for (char& c : noise) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    c = static_cast<char>(x);
  }
  f.Write(0, noise);
  const std::vector<wire::Envelope> got = f.Read(core);
  REQUIRE(got.size() == 2);
  std::string data;
  for (const wire::Envelope& e : got) data += e.output().data();
  CHECK(data == noise);
}

TEST_CASE("nothing after EOF, and the exit only after both streams ended") {
  Fixture f;
  AttachmentCore core(f.p, Clock::now());
  f.Send(core, f.Hello());
  f.Read(core);
  f.Write(0, "bye");
  f.p.eof[0] = true;
  wire::Exit exit;
  exit.set_code(0);
  f.p.exit = exit;  // (as the daemon would not yet: stderr is open)
  std::vector<wire::Envelope> got = f.Read(core);
  REQUIRE(got.size() == 2);
  CHECK(got[0].output().data() == "bye");
  CHECK(got[1].output().eof());
  CHECK(f.Read(core).empty());
  f.p.eof[1] = true;
  got = f.Read(core);
  REQUIRE(got.size() == 2);
  CHECK((got[0].output().stream() == wire::STREAM_STDERR && got[0].output().eof()));
  CHECK(got[1].has_exit());
  CHECK(core.sender().exit_sent());
}

TEST_CASE("stdin after the child closed its end is acknowledged at once, not queued") {
  Fixture f;
  AttachmentCore core(f.p, Clock::now());
  f.Send(core, f.Hello());
  f.Read(core);
  f.p.stdin_queue.ChildClosed();
  wire::Envelope in;
  in.set_generation(1);
  in.mutable_stdin_data()->set_data("late");
  CHECK(f.Send(core, in).empty());  // nothing for the pump
  const std::vector<wire::Envelope> got = f.Read(core);
  REQUIRE(got.size() == 1);
  CHECK(got[0].stdin_ack().offset() == 4);
  CHECK(got[0].stdin_ack().closed_by_child());
}

TEST_CASE("a control attachment may not send stdin: a fatal error") {
  Fixture f;
  AttachmentCore owner(f.p, Clock::now());
  std::vector<wire::Envelope> got;
  f.Send(owner, f.Hello());
  got = f.Read(owner);
  AttachmentCore control(f.p, Clock::now());
  wire::Envelope hello = f.Hello();
  hello.mutable_hello()->set_control(true);
  *hello.mutable_hello()->mutable_ticket() = got[0].welcome().ticket();
  CHECK(f.Send(control, hello).empty());  // no Attached: it holds nothing
  CHECK(control.control());
  wire::Envelope in;
  in.set_generation(1);
  in.mutable_stdin_data()->set_data("x");
  f.Send(control, in, AttachmentCore::Step::kStop);
}

TEST_CASE("the lease runs out lease_ms after the last bytes, kHelloTimeoutMs before the hello") {
  Fixture f;
  const Clock::time_point t0 = Clock::now();
  AttachmentCore core(f.p, t0);
  CHECK(!core.CheckLease(t0 + milliseconds(kHelloTimeoutMs - 1)).expired);
  CHECK(core.CheckLease(t0 + milliseconds(kHelloTimeoutMs)).expired);
  CHECK(!core.CheckLease(t0 + milliseconds(kHelloTimeoutMs)).unless_peer_stopped);
  f.Send(core, f.Hello());
  core.Received(t0 + milliseconds(10));
  CHECK(!core.CheckLease(t0 + milliseconds(1009)).expired);
  const AttachmentCore::Lease l = core.CheckLease(t0 + milliseconds(1010));
  CHECK(l.expired);
  CHECK(l.unless_peer_stopped);  // a stopped host is paused, not gone
}

TEST_CASE("a signal to a process that has exited is refused without an action") {
  Fixture f;
  AttachmentCore core(f.p, Clock::now());
  f.Send(core, f.Hello());
  f.Read(core);
  wire::Envelope sig;
  sig.set_generation(1);
  sig.set_request_id(7);
  sig.mutable_signal()->set_signal(15);
  std::vector<Action> actions = f.Send(core, sig);
  REQUIRE(actions.size() == 1);
  CHECK(actions[0].kind == Action::kSignal);
  CHECK(actions[0].arg == 15);
  wire::Exit exit;
  f.p.exit = exit;
  CHECK(f.Send(core, sig).empty());
  const std::vector<wire::Envelope> got = f.Read(core);
  REQUIRE(got.size() == 1);
  CHECK(got[0].error().code() == wire::ERROR_NOT_FOUND);
  CHECK(got[0].error().request_id() == 7);
}

}  // namespace
}  // namespace tether::supervisor
