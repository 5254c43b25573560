// The host's sans-I/O cores (host/core/) and the tunnel chooser, driven
// directly: no supervisor, no executor.
#include <doctest.h>

#include "host/core/process_core.h"
#include "tether/errors.h"
#include "host/tunnel/choose.h"

namespace tether {
namespace {

wire::Envelope Out(wire::Stream s, std::uint64_t offset, std::string data, bool eof = false) {
  wire::Envelope env;
  env.set_generation(1);
  env.mutable_output()->set_stream(s);
  env.mutable_output()->set_offset(offset);
  env.mutable_output()->set_data(std::move(data));
  env.mutable_output()->set_eof(eof);
  return env;
}

core::ProcessCore Attached(core::OutputConfig oc, bool pipe) {
  core::ProcessCore c(oc, pipe, /*keep_copies=*/true);
  wire::Welcome w;
  w.set_stdin_window_bytes(256 * 1024);
  w.mutable_state()->set_pid(7);
  REQUIRE(c.Attached(w).ok());
  return c;
}

TEST_CASE("tunnel chooser: one pure decision per channel shape") {
  struct Row {
    const char* what;
    ChannelCapabilities caps;
    TunnelMode mode;
    bool zstd;
    bool always_reconnect;
  };
  const auto caps = [](bool exact, bool streaming, bool direct, bool costly) {
    ChannelCapabilities c;
    c.exact_bytes = exact;
    c.streaming = streaming;
    c.direct_connect = direct;
    c.costly_bytes = costly;
    return c;
  };
  const Row rows[] = {
      {"local provider", caps(true, true, true, false), TunnelMode::kDirect, false, false},
      {"ssh / kubectl exec / docker exec", caps(true, true, false, true), TunnelMode::kBinary, true, false},
      {"exact bytes on this machine, no socket", caps(true, true, false, false), TunnelMode::kBinary, false, false},
      {"text-only streaming channel", caps(false, true, false, true), TunnelMode::kText, true, true},
      {"text-only, direct claimed but not exact", caps(false, true, true, false), TunnelMode::kText, false, true},
      {"one-shot commands only", caps(false, false, false, true), TunnelMode::kExchange, true, true},
      {"one-shot but exact", caps(true, false, false, true), TunnelMode::kExchange, true, true},
      {"native HTTP stream / WebSocket (E2B, Kubernetes, Docker)",
       [&] {
         ChannelCapabilities c = caps(true, true, false, true);
         c.cut_prone = true;
         return c;
       }(),
       TunnelMode::kBinary, true, true},
  };
  for (const Row& r : rows) {
    CAPTURE(r.what);
    const tunnel::TunnelChoice c = tunnel::ChooseTunnel(r.caps);
    CHECK(c.mode == r.mode);
    CHECK(c.zstd == r.zstd);
    CHECK(c.always_reconnect == r.always_reconnect);
  }
  // CapabilitiesOf(mode) describes a channel that gets exactly that mode.
  for (TunnelMode m : {TunnelMode::kDirect, TunnelMode::kBinary, TunnelMode::kText, TunnelMode::kExchange}) {
    CHECK(tunnel::ChooseTunnel(CapabilitiesOf(m)).mode == m);
  }
}

TEST_CASE("output receiver: offsets, window, acks and the end") {
  core::ProcessCore c = Attached({}, false);
  core::Effects fx;
  wire::Envelope a = Out(wire::STREAM_STDOUT, 0, "hello");
  REQUIRE(c.Handle(a, 1, &fx).ok());
  wire::Envelope replay = Out(wire::STREAM_STDOUT, 2, "llo!");  // overlapping replay: only "!" is new
  REQUIRE(c.Handle(replay, 1, &fx).ok());
  core::ReadStep s = c.output.Take();
  REQUIRE(s.kind == core::ReadStep::kChunk);
  CHECK(s.chunk.bytes == "hello");
  s = c.output.Take();
  REQUIRE(s.kind == core::ReadStep::kChunk);
  CHECK(s.chunk.offset == 5);
  CHECK(s.chunk.bytes == "!");
  // "!" is being written out: only "hello" is done with.
  CHECK(c.output.MakeAck(false).stdout_offset() == 5);
  CHECK(c.output.Take().kind == core::ReadStep::kNeedMore);  // back for more: "!" is done
  CHECK_FALSE(c.output.AckDue());  // caught up, but less than a step: the shell's timer sends it
  CHECK(c.output.AckPending());
  CHECK(c.output.MakeAck(false).stdout_offset() == 6);
  CHECK_FALSE(c.output.AckPending());
  wire::Envelope skip = Out(wire::STREAM_STDOUT, 9, "x");
  CHECK(absl::IsDataLoss(c.Handle(skip, 1, &fx)));  // a hole without a gap report
  wire::Envelope over = Out(wire::STREAM_STDERR, 0, std::string(kDefaultOutputWindowBytes + 1, 'e'));
  CHECK(absl::IsDataLoss(c.Handle(over, 1, &fx)));  // beyond the window
}

// What a trickle costs: small frames, each read as it arrives (a text line
// at a time, as on Daytona). Before, every frame the consumer caught up
// with was acknowledged at once (one ack, one input request on the text
// and exchange tunnels, per output frame); now acks come in quarter-window
// steps, and what is less waits for the shell's next keepalive ping.
TEST_CASE("output receiver: a trickle of small frames is acknowledged in quarter-window steps") {
  core::OutputConfig oc;
  oc.window = 64 * 1024;
  core::ProcessCore c = Attached(oc, false);
  core::Effects fx;
  constexpr int kFrames = 1000;
  constexpr std::size_t kLine = 100;  // bytes per frame
  int acks = 0;
  std::uint64_t offset = 0;
  for (int i = 0; i < kFrames; ++i) {
    wire::Envelope e = Out(wire::STREAM_STDOUT, offset, std::string(kLine, 'x'));
    REQUIRE(c.Handle(e, 1, &fx).ok());
    offset += kLine;
    REQUIRE(c.output.Take().kind == core::ReadStep::kChunk);
    if (c.output.AckDue()) {
      ++acks;
      CHECK(c.output.MakeAck(false).stdout_offset() == offset - kLine);  // (the chunk just taken is not done)
    }
  }
  // 100 000 bytes in 16 KiB steps: 6 acks instead of 1000.
  CHECK(acks == int(kFrames * kLine / (oc.window / 4)));
  CHECK(c.output.AckPending());  // the rest waits for the ping
  // The end is acknowledged at once.
  wire::Envelope end = Out(wire::STREAM_STDOUT, offset, "!", true);
  REQUIRE(c.Handle(end, 1, &fx).ok());
  wire::Envelope err_end = Out(wire::STREAM_STDERR, 0, "", true);
  REQUIRE(c.Handle(err_end, 1, &fx).ok());
  REQUIRE(c.output.Take().kind == core::ReadStep::kChunk);
  CHECK(c.output.Take().kind == core::ReadStep::kEnd);
  CHECK(c.output.AckDue());
}

TEST_CASE("output receiver: a supervisor out of window or ring gets its credit when the consumer catches up") {
  core::OutputConfig oc;
  oc.window = 64 * 1024;
  oc.ring = 4096;  // smaller than the window: the ring blocks the supervisor first
  core::ProcessCore c = Attached(oc, false);
  core::Effects fx;
  wire::Envelope e = Out(wire::STREAM_STDOUT, 0, std::string(4096, 'x'));
  REQUIRE(c.Handle(e, 1, &fx).ok());
  REQUIRE(c.output.Take().kind == core::ReadStep::kChunk);
  CHECK_FALSE(c.output.AckDue());  // being written out
  REQUIRE(c.output.Take().kind == core::ReadStep::kNeedMore);
  CHECK(c.output.AckDue());
  CHECK(c.output.MakeAck(false).stdout_offset() == 4096);
  // A whole window in flight, read in small pieces: due once a quarter is read.
  core::OutputConfig big;
  big.window = 64 * 1024;
  core::ProcessCore d = Attached(big, false);
  std::uint64_t offset = 0;
  int acks = 0;
  for (int i = 0; i < 64; ++i) {
    wire::Envelope f = Out(wire::STREAM_STDOUT, offset, std::string(1024, 'y'));
    REQUIRE(d.Handle(f, 1, &fx).ok());
    offset += 1024;
  }
  for (int i = 0; i <= 64; ++i) {
    REQUIRE(d.output.Take().kind == (i < 64 ? core::ReadStep::kChunk : core::ReadStep::kNeedMore));
    if (d.output.AckDue()) {
      ++acks;
      (void)d.output.MakeAck(false);
    }
  }
  CHECK(acks == 4);
  CHECK_FALSE(d.output.AckPending());
}

TEST_CASE("output receiver: a resume below the ring counts dropped and earlier-read bytes apart") {
  core::ProcessCore c = Attached({}, false);
  core::Effects fx;
  wire::Envelope g;
  g.set_generation(1);
  g.mutable_output_gap()->set_stream(wire::STREAM_STDOUT);
  g.mutable_output_gap()->set_from(0);
  g.mutable_output_gap()->set_to(1000);
  g.mutable_output_gap()->set_dropped(0);  // an earlier reader took all of it
  REQUIRE(c.Handle(g, 1, &fx).ok());
  CHECK_FALSE(c.output.gap());
  CHECK(c.output.read_earlier(0) == 1000);
  CHECK(c.output.dropped(0) == 0);
  wire::Envelope o = Out(wire::STREAM_STDOUT, 1000, "x");
  REQUIRE(c.Handle(o, 1, &fx).ok());
  core::ReadStep s = c.output.Take();
  REQUIRE(s.kind == core::ReadStep::kChunk);
  CHECK(s.chunk.offset == 1000);
  // Stderr: 300 of 500 dropped while nobody was attached.
  wire::Envelope e = g;
  e.mutable_output_gap()->set_stream(wire::STREAM_STDERR);
  e.mutable_output_gap()->set_to(500);
  e.mutable_output_gap()->set_dropped(300);
  REQUIRE(c.Handle(e, 1, &fx).ok());
  CHECK(c.output.gap());
  CHECK(c.output.dropped(1) == 300);
  CHECK(c.output.read_earlier(1) == 200);
  // An older supervisor does not say: the whole range counts as lost.
  core::ProcessCore old = Attached({}, false);
  wire::Envelope o2 = g;
  o2.mutable_output_gap()->clear_dropped();
  REQUIRE(old.Handle(o2, 1, &fx).ok());
  CHECK(old.output.gap());
  CHECK(old.output.dropped(0) == 1000);
}

TEST_CASE("output receiver: exit only after both ends; stale generations ignored") {
  core::ProcessCore c = Attached({}, false);
  core::Effects fx;
  wire::Envelope exit;
  exit.set_generation(1);
  exit.mutable_exit()->set_code(3);
  CHECK(absl::IsDataLoss(c.Handle(exit, 1, &fx)));
  wire::Envelope e0 = Out(wire::STREAM_STDOUT, 0, "", true), e1 = Out(wire::STREAM_STDERR, 0, "", true);
  REQUIRE(c.Handle(e0, 1, &fx).ok());
  REQUIRE(c.Handle(e1, 1, &fx).ok());
  wire::Envelope old = exit;
  old.set_generation(0);
  REQUIRE(c.Handle(old, 1, &fx).ok());
  CHECK(!fx.exit_arrived);
  REQUIRE(c.Handle(exit, 1, &fx).ok());
  CHECK(fx.exit_arrived);
  CHECK(c.exit->code == 3);
  CHECK(c.output.Take().kind == core::ReadStep::kEnd);
  wire::Envelope future = exit;
  future.set_generation(2);
  CHECK(absl::IsDataLoss(c.Handle(future, 1, &fx)));
}

TEST_CASE("output receiver: gap after gap cannot grow unread output past two windows") {
  core::OutputConfig oc;
  oc.window = oc.unread_limit = 16 * 1024;
  core::ProcessCore c = Attached(oc, false);
  core::Effects fx;
  std::uint64_t at = 0;
  absl::Status st;
  for (int round = 0; round < 8 && st.ok(); ++round) {
    wire::Envelope o = Out(wire::STREAM_STDOUT, at, std::string(oc.window, 'a'));
    st = c.Handle(o, 1, &fx);
    at += oc.window;
    if (!st.ok()) break;
    wire::Envelope g;
    g.set_generation(1);
    g.mutable_output_gap()->set_stream(wire::STREAM_STDOUT);
    g.mutable_output_gap()->set_from(at);
    g.mutable_output_gap()->set_to(at + 100);
    at += 100;
    st = c.Handle(g, 1, &fx);
  }
  CHECK(absl::IsDataLoss(st));
  CHECK(c.output.unread_bytes() <= 2 * oc.window);
}

TEST_CASE("input sender: offsets, queue, acks, resend and the failure verdict") {
  core::ProcessCore c = Attached({}, true);
  absl::StatusOr<std::uint64_t> t = c.input.Admit(3, false);
  REQUIRE(t.ok());
  CHECK(c.input.Ready(*t, 3));
  CHECK(c.input.MakeData("abc").offset() == 0);
  c.input.Leave(*t, 3);
  CHECK(c.input.MakeData("de").offset() == 3);
  CHECK(c.input.Settled(false).code() == absl::StatusCode::kFailedPrecondition);
  wire::StdinAck ack;
  ack.set_offset(9);
  CHECK(absl::IsDataLoss(c.input.OnAck(ack)));  // beyond what was sent
  ack.set_offset(3);
  REQUIRE(c.input.OnAck(ack).ok());
  wire::ProcessState st;
  st.set_stdin_received(3);
  std::vector<wire::Envelope> again = c.input.Resend(st);
  REQUIRE(again.size() == 1);
  CHECK(again[0].stdin_data().offset() == 3);
  CHECK(again[0].stdin_data().data() == "de");
  c.input.OnConnectionLost(absl::UnavailableError("gone"));
  CHECK(ErrorCodeOf(c.input.Allowed()) == ErrorCode::kOutcomeUnknown);
  CHECK(ErrorCodeOf(c.input.Settled(false)) == ErrorCode::kOutcomeUnknown);
  // A full queue refuses writes, never a close.
  core::InputSender q(true, false);
  for (std::size_t i = 0; i < kMaxWriteQueueCalls; ++i) REQUIRE(q.Admit(1, false).ok());
  CHECK(absl::IsResourceExhausted(q.Admit(1, false).status()));
  CHECK(q.Admit(0, true).ok());
}

TEST_CASE("requests: a status reply under a resent id answers the first; terminate settles once") {
  core::Requests r;
  r.StatusSent(10);
  CHECK(!r.StatusReply(10));
  CHECK(r.StatusPending() == std::vector<std::uint64_t>{10});
  r.StatusResent(20, 10);
  wire::ProcessState running;
  running.set_phase(wire::ProcessState::PHASE_RUNNING);
  CHECK(!r.OnStatus(20, running));
  REQUIRE(r.StatusReply(10));
  CHECK(r.StatusReply(10)->phase() == wire::ProcessState::PHASE_RUNNING);
  r.TerminateSent(30, 500);
  CHECK(r.terminate_pending());
  CHECK(r.OnStatus(30, running));
  CHECK(!r.OnStatus(30, running));
  CHECK(r.terminate_result()->ok());
}

TEST_CASE("requests: a signal is acted on once the pong of the ping after it arrives; a refusal comes first") {
  core::ProcessCore c = Attached(core::OutputConfig{}, false);
  core::Effects fx;
  c.requests.ActedSent(40, 41);
  wire::Envelope pong;
  pong.set_generation(1);
  pong.set_request_id(99);  // a keepalive's
  pong.mutable_pong();
  REQUIRE(c.Handle(pong, 1, &fx).ok());
  CHECK(!c.requests.Acted(40));
  pong.set_generation(0);  // replayed from an earlier attachment
  pong.set_request_id(41);
  REQUIRE(c.Handle(pong, 1, &fx).ok());
  CHECK(!c.requests.Acted(40));
  pong.set_generation(1);
  REQUIRE(c.Handle(pong, 1, &fx).ok());
  REQUIRE(c.requests.Acted(40));
  CHECK(c.requests.Acted(40)->ok());
  c.requests.ForgetActed(40);
  CHECK(!c.requests.Acted(40));

  c.requests.ActedSent(50, 51);
  wire::Envelope refused;
  refused.set_generation(1);
  refused.set_request_id(50);
  refused.mutable_error()->set_code(wire::ERROR_NOT_FOUND);
  refused.mutable_error()->set_request_id(50);
  REQUIRE(c.Handle(refused, 1, &fx).ok());
  pong.set_request_id(51);
  REQUIRE(c.Handle(pong, 1, &fx).ok());
  REQUIRE(c.requests.Acted(50));
  CHECK(absl::IsNotFound(*c.requests.Acted(50)));
}

}  // namespace
}  // namespace tether
