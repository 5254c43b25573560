// Fuzz target: the supervisor's attachment protocol in process
// (supervisor/attachment_core.h), with up to kConns connections to one
// simulated process. No daemon, no socket, no clock: the input drives the
// host's envelopes (valid and hostile), how their bytes are split when they
// arrive, when each connection's writer runs, what the child writes and
// when it ends, the stdin pump, the time, and whether signals and resizes
// succeed. The harness performs the core's actions as daemon.cc does.
//
// Input layout: one config byte, then operations [op u8][operands...] until
// the input ends (see Harness::Step). Config: 1 pty; 2 stdin closed; 4 a
// 64 KiB ring (else 4 KiB); 8 incompressible output; 16 the launch failed
// (no child: an exit record from the start).
//
// Invariants (abort = our bug), per connection as a host sees its replies:
//  - replies decode as frames of host-bound envelopes;
//  - a Welcome only after a first envelope that was a Hello with the right
//    secret; an output attachment only while no other one is open, its
//    generation above every earlier one;
//  - every reply after the Welcome carries the connection's generation;
//  - output is contiguous per stream from the resume point (or the gap),
//    its bytes are the bytes the child wrote, the bytes in flight never
//    exceed the window the host granted, nothing after that stream's EOF,
//    EOF only once the stream ended and all of it was sent;
//  - Exit only after both EOFs, once, and nothing after it;
//  - a control attachment gets no output, stdin ack or exit;
//  - stdin acks never exceed the stdin sent, and never move back;
//  - a state has an exit exactly when its phase has ended, and
//    stdin_acked <= stdin_received <= the stdin sent;
//  - every complete Hello, Ping, StatusRequest and Terminate the core read
//    is answered (by request id) by the end of the next writer run, unless
//    the attachment is closing;
//  - the exit is acknowledged (ExitAcknowledged) only after it was sent.
#include <algorithm>
#include <array>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "protocol/envelope.h"
#include "supervisor/attachment_core.h"
#include "tether/protocol/version.h"

namespace {

constexpr char kFuzzTarget[] = "attachment_core_fuzzer";
namespace wire = tether::wire;
namespace protocol = tether::protocol;
namespace sup = tether::supervisor;
using sup::Action;
using sup::AttachmentCore;
using sup::kNumStreams;
using Clock = std::chrono::steady_clock;

constexpr char kSecret[] = "attachment-core-fuzz-secret-0123";  // 32 bytes
constexpr unsigned kLeaseMs = 1000;
constexpr int kConns = 3;
constexpr std::size_t kMaxWireBytes = 1 << 20;  // unread bytes per connection, to bound memory

enum Config : std::uint8_t { kPty = 1, kStdinClosed = 2, kBigRing = 4, kRandomOutput = 8, kLaunchFailed = 16 };

// The byte the child writes at `offset` of stream `i`: compressible runs, or
// a hash (incompressible) with kRandomOutput.
char ChildByte(bool random, int i, std::uint64_t offset) {
  if (!random) return static_cast<char>('a' + (offset / 64 + 3 * i) % 26);
  std::uint64_t x = (offset + 1) * 0x9E3779B97F4A7C15ull ^ static_cast<std::uint64_t>(i + 1) << 60;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  return static_cast<char>(x >> 56);
}

std::uint64_t ClampWindow(std::uint64_t w) { return std::clamp<std::uint64_t>(w, 4096, 64u << 20); }

// The fuzz input, read from the front; zeros once it is used up.
struct Input {
  std::string_view s;
  bool empty() const { return s.empty(); }
  std::uint8_t U8() {
    if (s.empty()) return 0;
    const auto v = static_cast<std::uint8_t>(s[0]);
    s.remove_prefix(1);
    return v;
  }
  std::uint16_t U16() { return static_cast<std::uint16_t>(U8() << 8 | U8()); }
  std::uint32_t U32() { return static_cast<std::uint32_t>(U16()) << 16 | U16(); }
  std::uint64_t U64() { return static_cast<std::uint64_t>(U32()) << 32 | U32(); }
};

// One connection: the core, the bytes sent but not yet delivered to it, and
// what its host has seen.
struct Conn {
  explicit Conn(sup::Supervised& p, Clock::time_point now) : core(std::make_unique<AttachmentCore>(p, now)) {}
  std::unique_ptr<AttachmentCore> core;
  bool open = true;
  bool reading = true;                // false after a fatal error (kStop)
  std::string wire;                   // sent, not yet delivered
  protocol::EnvelopeDecoder mirror;   // the delivered bytes, decoded as the core does
  protocol::EnvelopeDecoder replies;  // what the core wrote
  bool first_seen = false, first_good_hello = false;
  bool welcomed = false, control = false;
  std::uint64_t generation = 0;
  std::uint64_t next_request = 1;
  std::uint64_t window = sup::kDefaultWindowBytes;
  std::array<std::uint64_t, kNumStreams> resume{}, sent{}, acked{};
  std::array<bool, kNumStreams> eof{};
  bool exit_seen = false;
  std::uint64_t stdin_acked = 0;
  std::multimap<std::uint64_t, int> awaiting;  // request id -> count of requests to answer
};

// TETHER_FUZZ_VERBOSE=1: every envelope read and written, to see what a
// crash input does.
const bool g_verbose = std::getenv("TETHER_FUZZ_VERBOSE") != nullptr;

void Log(const char* dir, const Conn& c, const wire::Envelope& env) {
  if (!g_verbose) return;
  std::fprintf(stderr, "%s %s gen %llu id %llu (core gen %llu%s%s)\n", dir, std::string(protocol::BodyName(env)).c_str(),
               static_cast<unsigned long long>(env.generation()), static_cast<unsigned long long>(env.request_id()),
               static_cast<unsigned long long>(c.core->generation()), c.core->authenticated() ? " auth" : "",
               c.core->closing() ? " closing" : "");
}

class Harness {
 public:
  explicit Harness(std::uint8_t config);
  // One operation; false when the run is over (the daemon shut down).
  bool Step(Input& in);

 private:
  void Send(Conn& c, Input& in);
  void Deliver(int k, std::size_t n);
  void Drain(int k, int batches);
  void Close(int k);
  void Perform(int k, const Action& a);
  void OnReply(Conn& c, const wire::Envelope& env);
  void Mirrored(Conn& c, const wire::Envelope& env, bool was_closing, bool was_authenticated);
  void CheckState(const wire::ProcessState& st) const;
  void ChildWrites(int i, std::size_t n);
  void MaybeExit();
  std::int64_t wall() const { return wall_s_; }

  sup::Supervised p_;
  bool random_output_;
  Clock::time_point now_{};
  std::int64_t wall_s_ = 1'800'000'000;
  std::array<std::optional<Conn>, kConns> conns_;
  int holder_ = -1;              // the connection holding the process
  bool hold_output_ = false;     // a lost holder's backpressure lasts until a time step
  bool child_exited_ = false;
  std::uint64_t stdin_sent_max_ = 0;  // highest stdin offset + size any host sent
  std::uint64_t last_generation_ = 0;
  wire::Ticket ticket_;  // the newest ticket a host saw
  bool shut_down_ = false;
};

wire::Launch MakeLaunch(std::uint8_t config) {
  wire::Launch l;
  l.set_launch_id("fuzz");
  l.set_secret(kSecret);
  l.add_argv("/bin/cat");
  l.set_stdin_mode(config & kStdinClosed ? wire::STDIN_CLOSED : wire::STDIN_PIPE);
  l.set_lease_ms(kLeaseMs);
  l.set_ring_bytes(config & kBigRing ? 64 * 1024 : sup::kMinRingBytes);
  if (config & kPty) {
    l.mutable_pty()->set_cols(80);
    l.mutable_pty()->set_rows(24);
  }
  return l;
}

Harness::Harness(std::uint8_t config)
    : p_(MakeLaunch(config), std::string(sup::kTicketKeyBytes, 'k')), random_output_(config & kRandomOutput) {
  p_.launched_at_s = wall_s_;  // (resend Hellos are taken for kResendWindowSeconds)
  if (config & kLaunchFailed) {
    p_.phase = wire::ProcessState::PHASE_FAILED;
    wire::Exit e;
    e.set_failure(wire::ERROR_LAUNCH_FAILED);
    e.set_code(126);
    p_.exit = e;
    p_.eof.fill(true);
    p_.stdin_queue.Close();
    return;
  }
  p_.pid = p_.pgid = 4242;
  p_.phase = wire::ProcessState::PHASE_RUNNING;
  if (p_.pty()) p_.eof[1] = true;  // a terminal combines everything into stream 0
  if (!p_.stdin_enabled()) p_.stdin_queue.Close();
  conns_[0].emplace(p_, now_);
}

void Harness::CheckState(const wire::ProcessState& st) const {
  FUZZ_CHECK(st.stdin_acked() <= st.stdin_received());
  FUZZ_CHECK(st.stdin_received() <= stdin_sent_max_);
  const bool ended = st.phase() == wire::ProcessState::PHASE_EXITED || st.phase() == wire::ProcessState::PHASE_FAILED;
  FUZZ_CHECK(ended == st.has_exit());
}

void Harness::ChildWrites(int i, std::size_t n) {
  if (p_.eof[i] || child_exited_) return;
  sup::OutputRing& r = p_.rings[i];
  while (n > 0) {
    std::span<char> space = r.WritableSpan();
    if (space.empty()) {
      // As the daemon's pump: evict when detached, else the child blocks.
      if (p_.generation > 0 && holder_ < 0 && !hold_output_) {
        r.Evict(std::min(r.size(), sup::kMinRingBytes));
        continue;
      }
      return;
    }
    const std::size_t k = std::min(n, space.size());
    for (std::size_t j = 0; j < k; ++j) space[j] = ChildByte(random_output_, i, r.end() + j);
    r.Commit(k);
    n -= k;
  }
}

void Harness::MaybeExit() {
  if (p_.exit || !child_exited_ || !p_.eof[0] || !p_.eof[1]) return;
  wire::Exit e;
  e.set_code(3);
  p_.exit = e;
  p_.phase = wire::ProcessState::PHASE_EXITED;
}

// Builds one envelope from the input and appends its frame to c.wire.
void Harness::Send(Conn& c, Input& in) {
  wire::Envelope env;
  const std::uint8_t kind = in.U8();
  const std::uint8_t gen = in.U8();
  const std::uint64_t g = c.core->generation();
  env.set_generation(gen % 4 == 0 ? g : gen % 4 == 1 ? g - 1 : gen % 4 == 2 ? g + 1 : 0);
  env.set_request_id(gen & 0x80 ? 0 : c.next_request++);
  const bool pty = p_.pty();
  switch (kind % 14) {
    case 0: {
      const std::uint8_t f = in.U8();
      wire::Hello* h = env.mutable_hello();
      h->set_secret(f & 1 ? "attachment-core-fuzz-secret-0124" : kSecret);
      h->set_min_version(f & 32 ? tether::kProtocolVersion + 1 : tether::kProtocolVersion);
      h->set_max_version(tether::kProtocolVersion);
      h->set_control(f & 2);
      h->set_zstd(f & 4);
      h->set_resend(f & 128);
      // A handle id: none, one of two, or one too long (refused).
      switch (in.U8() % 4) {
        case 0: break;
        case 1: h->set_handle(std::string(16, 'A')); break;
        case 2: h->set_handle(std::string(16, 'B')); break;
        default: h->set_handle(std::string(33, 'A'));
      }
      if (f & 64) h->set_window_bytes(static_cast<std::uint64_t>(in.U16()) * 64);
      switch ((f >> 3) & 3) {
        case 0: break;  // no ticket
        case 1: *h->mutable_ticket() = ticket_; break;
        case 2:
          *h->mutable_ticket() = ticket_;
          h->mutable_ticket()->set_expires_at(ticket_.expires_at() + 1);
          break;
        default:
          *h->mutable_ticket() = ticket_;
          if (!ticket_.mac().empty()) (*h->mutable_ticket()->mutable_mac())[0] ^= 1;
      }
      for (int i = 0; i < kNumStreams; ++i) {
        const std::uint8_t r = in.U8();
        const sup::OutputRing& ring = p_.rings[i];
        const std::uint64_t off = r % 4 == 0 ? 0 : r % 4 == 1 ? ring.end() : r % 4 == 2 ? ring.begin() : ring.end() + r / 4;
        if (i == 1) h->set_stderr_offset(off);
        else if (pty) h->set_pty_offset(off);
        else h->set_stdout_offset(off);
      }
      break;
    }
    case 1: {
      const std::uint8_t m = in.U8();
      const std::uint64_t received = p_.stdin_queue.received();
      std::uint64_t off = received;
      if (m % 4 == 1) off = received - std::min<std::uint64_t>(received, in.U8());
      if (m % 4 == 2) off = received + 1 + in.U8();
      if (m % 4 == 3) off = in.U32();
      std::size_t len = in.U16() % 2048;
      if (m & 0x80) len = sup::kStdinWindowBytes + 1 - len;  // near or beyond the window
      wire::StdinData* d = env.mutable_stdin_data();
      d->set_offset(off);
      d->mutable_data()->assign(len, 'i');
      stdin_sent_max_ = std::max(stdin_sent_max_, off + len);
      break;
    }
    case 2: {
      const std::uint8_t m = in.U8();
      const std::uint64_t received = p_.stdin_queue.received();
      env.mutable_stdin_eof()->set_offset(m % 3 == 0 ? received : m % 3 == 1 ? received + 1 : m);
      break;
    }
    case 3: {
      const std::uint8_t m = in.U8();
      wire::Ack* a = env.mutable_ack();
      std::array<std::uint64_t, kNumStreams> off{};
      for (int i = 0; i < kNumStreams; ++i) {
        const std::uint8_t r = in.U8();
        off[i] = r % 4 == 0 ? c.sent[i] : r % 4 == 1 ? c.acked[i] : r % 4 == 2 ? p_.rings[i].end() : c.sent[i] + r;
      }
      if (pty) a->set_pty_offset(off[0]);
      else a->set_stdout_offset(off[0]);
      a->set_stderr_offset(off[1]);
      if (m & 1) a->set_window_bytes(m & 2 ? in.U16() : static_cast<std::uint64_t>(in.U16()) << 8);
      a->set_exit(m & 4);
      break;
    }
    case 4: env.mutable_signal()->set_signal(static_cast<std::int8_t>(in.U8())); break;
    case 5: env.mutable_terminate()->set_grace_ms(in.U16()); break;
    case 6:
      env.mutable_resize()->mutable_size()->set_cols(in.U16());
      env.mutable_resize()->mutable_size()->set_rows(in.U8());
      break;
    case 7: env.mutable_status_request(); break;
    case 8: env.mutable_ping()->set_nonce(in.U64()); break;
    case 9: env.mutable_detach(); break;
    case 10: env.mutable_output()->set_data("x"); break;  // not a request
    case 11: env.mutable_welcome(); break;                // not a request
    case 12: env.mutable_stdin_ack(); break;              // not a request
    default: break;                                       // no body: a decode error
  }
  protocol::AppendEnvelope(env, kind & 0x80 ? protocol::Compression::kAuto : protocol::Compression::kNone, &c.wire);
}

// What the core read: the host's side of the accounting the core does.
void Harness::Mirrored(Conn& c, const wire::Envelope& env, bool was_closing, bool was_authenticated) {
  Log("->", c, env);
  if (!c.first_seen) {
    c.first_seen = true;
    c.first_good_hello = env.has_hello() && env.hello().secret() == kSecret;
  }
  if (was_closing) return;  // ignored
  const bool current = was_authenticated && env.generation() == c.core->generation();
  const bool awaited = (!was_authenticated && env.has_hello()) ||
                       (was_authenticated && (env.has_ping() || env.has_status_request() || env.has_terminate()));
  if (awaited) c.awaiting.emplace(env.request_id(), 1);
  if (current && !c.core->control() && env.has_ack()) {
    const wire::Ack& a = env.ack();
    const std::array<std::uint64_t, kNumStreams> off = {p_.pty() ? a.pty_offset() : a.stdout_offset(),
                                                        a.stderr_offset()};
    for (int i = 0; i < kNumStreams; ++i) {
      c.sent[i] = std::max(c.sent[i], off[i]);
      c.acked[i] = std::max(c.acked[i], off[i]);
    }
    if (a.window_bytes() != 0) c.window = ClampWindow(a.window_bytes());
  }
}

void Harness::OnReply(Conn& c, const wire::Envelope& env) {
  Log("<-", c, env);
  // (An Error names its request in its body.)
  const std::uint64_t id = env.has_error() ? env.error().request_id() : env.request_id();
  if (auto it = c.awaiting.find(id); it != c.awaiting.end()) c.awaiting.erase(it);
  if (env.has_welcome()) {
    FUZZ_CHECK(!c.welcomed);
    FUZZ_CHECK(c.first_good_hello);  // a wrong secret is never welcomed
    FUZZ_CHECK(env.welcome().generation() == env.generation());
    CheckState(env.welcome().state());
    ticket_ = env.welcome().ticket();
    c.welcomed = true;
    c.control = c.core->control();
    c.generation = env.generation();
    if (c.control) {
      FUZZ_CHECK(env.welcome().stdin_window_bytes() == 0 && env.generation() <= p_.generation);
      return;
    }
    FUZZ_CHECK(env.generation() > last_generation_);
    last_generation_ = env.generation();
    return;
  }
  FUZZ_CHECK(env.generation() == c.generation);
  if (env.has_error()) return;
  FUZZ_CHECK(c.welcomed);  // everything else is for an attachment
  FUZZ_CHECK(!c.control || env.has_status() || env.has_pong());
  switch (env.body_case()) {
    case wire::Envelope::kOutputGap: {
      const wire::OutputGap& g = env.output_gap();
      const int i = g.stream() == wire::STREAM_STDERR ? 1 : 0;
      // Gaps come with the Welcome, before any output: the resume point moved up.
      FUZZ_CHECK(g.to() > g.from() && g.to() == c.resume[i]);
      return;
    }
    case wire::Envelope::kOutput: {
      const wire::Output& o = env.output();
      const wire::Stream want = p_.pty() ? wire::STREAM_PTY : wire::STREAM_STDOUT;
      FUZZ_CHECK(o.stream() == want || o.stream() == wire::STREAM_STDERR);
      const int i = o.stream() == wire::STREAM_STDERR ? 1 : 0;
      FUZZ_CHECK(!c.eof[i] && !c.exit_seen);
      FUZZ_CHECK(o.offset() == c.sent[i]);
      FUZZ_CHECK(!o.data().empty() || o.eof());
      for (std::size_t j = 0; j < o.data().size(); ++j) {
        FUZZ_CHECK(o.data()[j] == ChildByte(random_output_, i, o.offset() + j));
      }
      c.sent[i] += o.data().size();
      FUZZ_CHECK(c.sent[i] <= p_.rings[i].end());
      const std::uint64_t in_flight = c.sent[0] - c.acked[0] + c.sent[1] - c.acked[1];
      FUZZ_CHECK(o.data().empty() || in_flight <= c.window);
      if (o.eof()) {
        FUZZ_CHECK(p_.eof[i] && c.sent[i] == p_.rings[i].end());
        c.eof[i] = true;
      }
      return;
    }
    case wire::Envelope::kExit:
      FUZZ_CHECK(c.eof[0] && c.eof[1] && !c.exit_seen && p_.exit);
      c.exit_seen = true;
      return;
    case wire::Envelope::kStdinAck: {
      const wire::StdinAck& a = env.stdin_ack();
      FUZZ_CHECK(a.offset() >= c.stdin_acked);
      FUZZ_CHECK(a.offset() <= stdin_sent_max_ && a.offset() <= p_.stdin_queue.received());
      c.stdin_acked = a.offset();
      return;
    }
    case wire::Envelope::kStatus: CheckState(env.status()); return;
    case wire::Envelope::kPong: ticket_ = env.pong().ticket(); return;
    default:
      tether::fuzz::Fail(kFuzzTarget, "a reply that is not host-bound");
  }
}

void Harness::Perform(int k, const Action& a) {
  Conn& c = *conns_[k];
  switch (a.kind) {
    case Action::kDisplaced: {
      // A resent launch's Hello, or one of the holder's own handle, took the
      // process from the connection that held it.
      FUZZ_CHECK(holder_ >= 0 && holder_ != k && p_.held && !c.core->control());
      conns_[holder_]->open = false;
      holder_ = -1;
      return;
    }
    case Action::kAttached:
      FUZZ_CHECK(holder_ < 0 && p_.held && !c.core->control());
      holder_ = k;
      hold_output_ = false;
      // Performed before the next envelope: the sender starts from here.
      for (int i = 0; i < kNumStreams; ++i) c.resume[i] = c.sent[i] = c.acked[i] = c.core->sender().acked(i);
      c.window = c.core->sender().window();
      return;
    case Action::kReleased:
    case Action::kStdinReady:
      return;
    case Action::kSignal:
      FUZZ_CHECK(a.arg > 0 && a.arg < NSIG && p_.pgid > 1 && !p_.exit);
      if (a.arg % 8 == 0) c.core->Refused(a, absl::NotFoundError("signal: kill: No such process"));
      return;
    case Action::kResize:
      FUZZ_CHECK(p_.pty());
      if (a.size.cols() == 0 || a.size.rows() == 0 || a.size.cols() > 10000) {
        c.core->Refused(a, absl::InvalidArgumentError("terminal size outside 1..10000"));
      }
      return;
    case Action::kTerminate:
      if (p_.pgid > 1) child_exited_ = true;
      return;
    case Action::kExitAcknowledged:
      // Batches are decoded as soon as they are made: sent means seen.
      FUZZ_CHECK(c.core->sender().exit_sent() && c.exit_seen);
      shut_down_ = true;
      return;
  }
}

void Harness::Deliver(int k, std::size_t n) {
  Conn& c = *conns_[k];
  if (!c.open || !c.reading) return;
  n = std::min(n, c.wire.size());
  const std::string chunk = c.wire.substr(0, n);
  c.wire.erase(0, n);
  // The mirror decodes the same bytes: one envelope per handled step.
  std::vector<wire::Envelope> decoded;
  {
    std::string_view m = chunk;
    wire::Envelope env;
    while (true) {
      absl::StatusOr<bool> got = c.mirror.Next(&m, &env);
      if (!got.ok() || !*got) break;
      decoded.push_back(env);
    }
  }
  c.core->Received(now_);
  std::string_view in = chunk;
  std::size_t handled = 0;
  std::vector<Action> actions;
  while (c.open) {
    const bool was_closing = c.core->closing();
    const bool was_authenticated = c.core->authenticated();
    actions.clear();
    const AttachmentCore::Step step = c.core->Next(&in, wall(), &actions);
    if (step == AttachmentCore::Step::kHandled) {
      FUZZ_CHECK(handled < decoded.size());
      Mirrored(c, decoded[handled++], was_closing, was_authenticated);
    }
    for (const Action& a : actions) Perform(k, a);
    if (step == AttachmentCore::Step::kNeedMore) {
      FUZZ_CHECK(in.empty() && handled == decoded.size());
      break;
    }
    if (step == AttachmentCore::Step::kStop) {
      FUZZ_CHECK(c.core->closing());
      c.reading = false;
      break;
    }
  }
  (void)c.core->TakeWake();
}

void Harness::Drain(int k, int batches) {
  Conn& c = *conns_[k];
  sup::OutputBatch batch;
  for (int b = 0; b < batches && c.open; ++b) {
    c.core->NextBatch(&batch);
    if (batch.size() == 0) {
      if (c.core->closing()) Close(k);
      break;
    }
    std::string bytes;
    for (std::string_view v : batch.Views()) bytes.append(v);
    std::string_view in = bytes;
    wire::Envelope env;
    while (true) {
      absl::StatusOr<bool> got = c.replies.Next(&in, &env);
      FUZZ_CHECK(got.ok());
      if (!*got) break;
      OnReply(c, env);
    }
    FUZZ_CHECK(c.replies.idle());  // a batch holds whole frames
  }
  // Every request read before the attachment began closing has its answer.
  FUZZ_CHECK(c.core->closing() || !c.open || c.awaiting.empty() || batches == 0);
}

void Harness::Close(int k) {
  Conn& c = *conns_[k];
  if (!c.open) return;
  c.open = false;
  if (!c.core->control() && holder_ == k) {
    holder_ = -1;
    p_.held = false;
    p_.holder_handle.clear();
    hold_output_ = c.core->authenticated() && !c.core->deliberate_end() && !p_.exit;
  }
}

bool Harness::Step(Input& in) {
  if (shut_down_) return false;
  const std::uint8_t op = in.U8();
  const int k = (op >> 4) % kConns;
  if (!conns_[k] && (op & 15) != 9) return true;
  switch (op & 15) {
    case 0:
    case 1:
    case 2:
      if (conns_[k]->open && conns_[k]->wire.size() < kMaxWireBytes) Send(*conns_[k], in);
      return true;
    case 3: {  // raw bytes
      const std::size_t n = in.U8() % 32;
      for (std::size_t j = 0; j < n; ++j) conns_[k]->wire.push_back(static_cast<char>(in.U8()));
      return true;
    }
    case 4: {
      const std::uint8_t m = in.U8();
      Deliver(k, m == 0 ? std::string::npos : m < 128 ? m : static_cast<std::size_t>(m) * 64);
      return true;
    }
    case 5: Deliver(k, std::string::npos); Drain(k, 1000); return true;
    case 6: Drain(k, 1 + in.U8() % 4); return true;
    case 7: ChildWrites(in.U8() & 1, 1 + static_cast<std::size_t>(in.U16()) % 40000); return true;
    case 8: {
      const std::uint8_t m = in.U8();
      if (m & 1) {
        if (!p_.eof[0]) p_.eof[0] = true;
      } else if (!p_.eof[1]) {
        p_.eof[1] = true;
      }
      if (m & 2) child_exited_ = p_.pgid > 1;
      MaybeExit();
      return true;
    }
    case 9:  // a new connection in slot k (an open one there is closed)
      if (conns_[k]) Close(k);
      conns_[k].emplace(p_, now_);
      return true;
    case 10: Close(k); return true;  // the host hung up
    case 11: {  // the stdin pump
      sup::StdinQueue& q = p_.stdin_queue;
      const std::uint8_t m = in.U8();
      if (q.closed()) return true;
      if (m % 4 == 0) {
        q.ChildClosed();
        q.Close();
      } else if (!q.pending().empty()) {
        q.Written(std::min<std::size_t>(q.pending().size(), 1 + m * 97));
      } else if (q.eof_due()) {
        q.Close();
      } else {
        return true;
      }
      if (holder_ >= 0) conns_[holder_]->core->QueueStdinAck();
      return true;
    }
    case 12: {  // time passes; leases are checked
      const std::uint16_t ms = in.U16();
      now_ += std::chrono::milliseconds(ms);
      if (ms > 60000) wall_s_ += 24 * 3600;  // beyond a ticket's lifetime, now and then
      hold_output_ = hold_output_ && ms < kLeaseMs;
      for (int j = 0; j < kConns; ++j) {
        if (!conns_[j] || !conns_[j]->open) continue;
        const AttachmentCore::Lease l = conns_[j]->core->CheckLease(now_);
        if (!l.expired) continue;
        if (l.unless_peer_stopped && (ms & 1)) {
          conns_[j]->core->Paused(now_);
        } else {
          Close(j);
        }
      }
      return true;
    }
    default: {  // the host reads and answers: ack everything received so far
      Conn& c = *conns_[k];
      if (!c.open || !c.welcomed || c.control) return true;
      wire::Envelope env;
      env.set_generation(c.generation);
      if (p_.pty()) env.mutable_ack()->set_pty_offset(c.sent[0]);
      else env.mutable_ack()->set_stdout_offset(c.sent[0]);
      env.mutable_ack()->set_stderr_offset(c.sent[1]);
      env.mutable_ack()->set_exit(c.exit_seen);
      protocol::AppendEnvelope(env, protocol::Compression::kNone, &c.wire);
      return true;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tether::fuzz::QuietProtobufLogs();
  if (size == 0) return 0;
  Input in{std::string_view(reinterpret_cast<const char*>(data), size)};
  Harness h(in.U8());
  while (!in.empty() && h.Step(in)) {
  }
  return 0;
}
