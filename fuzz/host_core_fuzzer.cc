// Fuzz target: the host's protocol core (host/core/process_core.h) in
// process, no I/O: a hostile "supervisor" sends envelopes while the
// application reads, writes, closes stdin, and the channel fails and
// reattaches, in an order the input chooses.
//
// Input: one config byte, then operations [op u8][arguments]:
//   config: 1 pty, 2 text, 4 no backpressure, 8 finite (cap 3000 bytes),
//           16 a 16 KiB window (else 64 KiB), 32 stdin pipe
//   0 [len u16][payload]  an envelope from the supervisor (parsed from the
//                         payload; generation stamped 1, or left as parsed
//                         when len's top bit is set)
//   1                     the application takes output (Take)
//   2 [n u8]              the application writes n*97 bytes (when allowed
//                         and its turn)
//   3                     the application closes stdin
//   4 [stream u8][n u16][eof u8] well-formed output: n bytes at the end of
//                         what was received on that stream
//   5 [to u16]            a gap on stdout to received+to
//   6                     the channel fails and the handle reattaches: the
//                         input's unacknowledged bytes are resent
//   7 [offset u16]        a stdin ack at that offset (or `sent` when 0xffff)
//   8                     an exit record
//
// Invariants (abort = our bug): nothing crashes; chunks are at most
// kMaxChunkBytes, in offset order per stream and contiguous unless a gap
// was reported; delivered bytes never exceed what envelopes carried; unread
// output stays within the window (or the unread limit) and the chunk cap;
// an ack never acknowledges beyond what arrived; once the core ends the
// output it keeps saying so; stdin offsets never run ahead of what was
// written; a handled error leaves the attachment closed (no more input is
// fed to it).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "host/core/process_core.h"

namespace {

constexpr char kFuzzTarget[] = "host_core_fuzzer";
namespace wire = tether::wire;
namespace core = tether::core;

struct Reader {
  std::string_view in;
  bool Byte(std::uint8_t* b) {
    if (in.empty()) return false;
    *b = static_cast<std::uint8_t>(in[0]);
    in.remove_prefix(1);
    return true;
  }
  bool U16(std::uint16_t* v) {
    std::uint8_t a = 0, b = 0;
    if (!Byte(&a) || !Byte(&b)) return false;
    *v = static_cast<std::uint16_t>((a << 8) | b);
    return true;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tether::fuzz::QuietProtobufLogs();
  Reader r{std::string_view(reinterpret_cast<const char*>(data), size)};
  std::uint8_t cfg = 0;
  if (!r.Byte(&cfg)) return 0;
  core::OutputConfig oc;
  oc.pty = cfg & 1;
  oc.text = cfg & 2;
  oc.backpressure = !(cfg & 4);
  if (cfg & 8) oc.finite_limit = 3000;
  oc.window = oc.unread_limit = (cfg & 16) ? 16 * 1024 : 64 * 1024;
  const bool pipe = (cfg & 32) || oc.pty;
  core::ProcessCore c(oc, pipe, /*keep_copies=*/true);
  wire::Welcome welcome;
  welcome.set_generation(1);
  welcome.set_stdin_window_bytes(256 * 1024);
  welcome.mutable_state()->set_pid(42);
  if (!c.Attached(welcome).ok()) tether::fuzz::Fail(kFuzzTarget, "a valid welcome refused");

  const wire::Stream out0 = oc.pty ? wire::STREAM_PTY : wire::STREAM_STDOUT;
  std::uint64_t carried = 0;      // output bytes the envelopes carried
  std::uint64_t delivered = 0;    // bytes handed out (raw count in bytes mode)
  std::uint64_t next[2] = {0, 0};  // bytes mode: the next offset per stream
  std::uint64_t recv_end[2] = {0, 0};  // well-formed output: where each stream ends
  bool eof[2] = {false, false};
  bool ended = false;
  bool dead = false;  // a handled error closed the attachment
  std::uint64_t written = 0;

  const auto take = [&] {
    core::ReadStep s = c.output.Take();
    if (s.kind == core::ReadStep::kChunk) {
      FUZZ_CHECK(!ended);
      FUZZ_CHECK(!s.chunk.bytes.empty());
      FUZZ_CHECK(s.chunk.bytes.size() <= tether::kMaxChunkBytes);
      const int i = s.chunk.stream == tether::StreamId::kStderr ? 1 : 0;
      FUZZ_CHECK((s.chunk.stream == tether::StreamId::kPty) == (oc.pty && i == 0));
      if (!oc.text) {
        FUZZ_CHECK(s.chunk.offset == next[i] || (c.output.gap() && s.chunk.offset > next[i]));
        next[i] = s.chunk.offset + s.chunk.bytes.size();
        delivered += s.chunk.bytes.size();
        FUZZ_CHECK(delivered <= carried);
      }
    } else if (s.kind == core::ReadStep::kEnd) {
      FUZZ_CHECK(c.output.ended() && c.output.all_taken());
      ended = true;
    } else if (s.kind == core::ReadStep::kStopped) {
      FUZZ_CHECK(!s.error.ok());
    } else {
      FUZZ_CHECK(!ended);
    }
    if (c.output.AckDue()) {
      const wire::Ack a = c.output.MakeAck(false);
      FUZZ_CHECK(a.stderr_offset() <= c.output.received(1));
      FUZZ_CHECK(a.stdout_offset() + a.pty_offset() <= c.output.received(0));
    }
  };

  const auto handle = [&](wire::Envelope& env) {
    if (dead) return;
    if (env.has_output()) carried += env.output().data().size();
    core::Effects fx;
    if (!c.Handle(env, 1, &fx).ok()) {
      dead = true;
      c.input.OnConnectionLost(absl::UnavailableError("protocol error"));
      return;
    }
    if (fx.exit_arrived) FUZZ_CHECK(c.exit.has_value() && c.output.ended());
  };

  std::uint8_t op = 0;
  while (r.Byte(&op)) {
    switch (op % 9) {
      case 0: {
        std::uint16_t len = 0;
        if (!r.U16(&len)) return 0;
        const std::string_view payload = r.in.substr(0, len & 0x7fff);
        r.in.remove_prefix(payload.size());
        wire::Envelope env;
        if (!env.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) break;
        if (!(len & 0x8000)) env.set_generation(1);
        handle(env);
        break;
      }
      case 1:
        take();
        break;
      case 2: {
        std::uint8_t n = 0;
        if (!r.Byte(&n)) return 0;
        const std::size_t bytes = static_cast<std::size_t>(n) * 97 % (tether::kMaxWriteBytes + 1);
        if (!c.input.Allowed().ok() || dead) break;
        absl::StatusOr<std::uint64_t> t = c.input.Admit(bytes, false);
        if (!t.ok()) break;
        if (c.input.Ready(*t, bytes)) {
          const wire::StdinData d = c.input.MakeData(std::string(bytes, 'x'));
          FUZZ_CHECK(d.offset() == written);
          written += bytes;
        }
        c.input.Leave(*t, bytes);
        break;
      }
      case 3:
        if (c.input.Allowed().ok() && !dead) {
          const wire::StdinEof e = c.input.MakeEof();
          FUZZ_CHECK(e.offset() == written);
        }
        break;
      case 4: {
        std::uint8_t s = 0, e = 0;
        std::uint16_t n = 0;
        if (!r.Byte(&s) || !r.U16(&n) || !r.Byte(&e)) return 0;
        const int i = s & 1;
        if (eof[i]) break;
        wire::Envelope env;
        env.set_generation(1);
        wire::Output* o = env.mutable_output();
        o->set_stream(i == 1 ? wire::STREAM_STDERR : out0);
        o->set_offset(recv_end[i]);
        std::string bytes(n % 20000, '\0');
        for (std::size_t k = 0; k < bytes.size(); ++k) bytes[k] = static_cast<char>((recv_end[i] + k) * 131);
        o->set_data(bytes);
        o->set_eof(e & 1);
        recv_end[i] += bytes.size();
        eof[i] = e & 1;
        handle(env);
        break;
      }
      case 5: {
        std::uint16_t to = 0;
        if (!r.U16(&to)) return 0;
        if (eof[0]) break;
        wire::Envelope env;
        env.set_generation(1);
        env.mutable_output_gap()->set_stream(out0);
        env.mutable_output_gap()->set_from(recv_end[0]);
        env.mutable_output_gap()->set_to(recv_end[0] + to);
        recv_end[0] += to;
        handle(env);
        break;
      }
      case 6: {
        c.input.OnConnectionLost(absl::UnavailableError("channel failed"));
        c.output.Attached();
        wire::ProcessState st;
        st.set_stdin_received(c.input.acked());
        for (const wire::Envelope& env : c.input.Resend(st)) {
          if (env.has_stdin_data()) {
            FUZZ_CHECK(env.stdin_data().offset() + env.stdin_data().data().size() <= written);
            FUZZ_CHECK(env.stdin_data().data().size() <= tether::kMaxWriteBytes);
          }
        }
        const wire::Ack a = c.output.MakeAck(false);
        (void)a;
        break;
      }
      case 7: {
        std::uint16_t off = 0;
        if (!r.U16(&off)) return 0;
        wire::Envelope env;
        env.set_generation(1);
        env.mutable_stdin_ack()->set_offset(off == 0xffff ? c.input.sent() : off);
        handle(env);
        FUZZ_CHECK(c.input.acked() <= c.input.sent());
        break;
      }
      case 8: {
        wire::Envelope env;
        env.set_generation(1);
        env.mutable_exit()->set_code(3);
        handle(env);
        break;
      }
    }
    FUZZ_CHECK(c.input.sent() == written);
    FUZZ_CHECK(c.output.unread_chunks() <= tether::kMaxUnreadChunks);
    // (A gap moves the window past unread bytes: at most one extra window.)
    if (oc.backpressure) FUZZ_CHECK(c.output.unread_bytes() <= 2 * oc.window);
    if (!oc.backpressure) FUZZ_CHECK(c.output.unread_bytes() <= oc.unread_limit);
    if (oc.finite_limit) FUZZ_CHECK(c.output.unread_bytes() + delivered <= oc.finite_limit || oc.text);
  }
  // Drain: everything carried comes out, in order, and the end is sticky.
  for (int k = 0; k < 2000 && !ended; ++k) {
    const std::size_t before = c.output.unread_bytes();
    take();
    if (c.output.unread_bytes() == before && !ended) break;
  }
  return 0;
}
