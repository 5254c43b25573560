// Fuzz target: arbitrary frame sequences from a "host" into the real
// supervisor daemon (supervisor/daemon.cc: Hello, acks, stdin offsets and
// EOF, signals, resize, status, terminate, detach, ping) over its real Unix
// socket. Per input, a fresh private state directory and a daemon forked
// from the fuzzer (RunDaemon, as `launch` runs it: own session, subreaper),
// whose child is cat or a small shell script; sanitizer reports in the
// daemon end it abnormally, which is a failure here.
//
// Input layout: one config byte, then records of [flags u8][length u16
// big-endian][payload] (as message_handler_fuzzer).
//   config: 1 wrong secret in our Hello; 2 no Hello from us (the input
//   sends its own); 4 Hello asks for zstd; 8 pty; 16 stdin closed; bits 5-6
//   the child (0 cat, 1 `cat; echo done >&2`, 2 300 kB of zeros to stdout
//   and 70 kB of random bytes to stderr, then cat, 3 true); 128 a 4 KiB
//   window and ring.
//   record flags: 1 stamp the current generation; 8 stamp a stale one; 4 a
//   Hello gets our secret and version; 32 an Ack gets the offsets received
//   so far; 2 zstd when it helps; 64 the payload is sent as raw bytes (no
//   frame); 16 a round trip (ping) afterwards; 128 reconnect first; 255
//   (all) no frame: a pause of 4 ms x (payload[0] % 32), beyond the lease
//   at 100 ms from 26 on. A payload is re-encoded (version stamped; without
//   a terminal, StdinData bytes rewritten, see StdinByte) only with flag
//   1, 4, 8 or 32 and when it parses; otherwise it is framed as is.
//
// Invariants (abort = our bug): the daemon answers every complete request
// (a round trip ends in a pong, an error or a close within kReplyDeadline)
// or closes; replies decode as frames of host-bound bodies stamped with the
// attachment's generation; output is contiguous per stream from the resume
// offset, never beyond what the child could have written, within the
// window the host granted, nothing after EOF, Exit only after both EOFs; a
// wrong secret is never welcomed; stdin acks never exceed stdin sent; a
// state (Welcome, Status) has an exit exactly when its phase has ended;
// without a terminal, stdout is byte for byte what the child wrote (stdin
// bytes are rewritten to StdinByte(offset) so that it is known). Then
// the cleanup: attach, Terminate, ack the exit; the daemon must exit 0
// within kEndDeadline, remove its directory and leave no process behind.
//
// An integration test now, not a fuzzer: the protocol's decisions are
// fuzzed in process by attachment_core_fuzzer (supervisor/attachment_core.h:
// about 1000 executions a second against 14.5 for a daemon forked per
// input, both under ASan + UBSan on a loaded 2-core machine); this keeps
// what only a real daemon shows (its Asio shell, a real child and pipes,
// the exit, the cleanup, no process left behind) as a replay of its corpus
// in every preset (ctest fuzz_replay.supervisor_handler, under ASan in
// `asan`). Built only without libFuzzer (it forks and waits for processes);
// replay_main's -max_total_time=S still mutates the corpus for S seconds for
// a manual chaos run.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <functional>
#include <string>
#include <string_view>
#include <thread>

#include "absl/strings/str_cat.h"
#include "fuzz/fuzz_util.h"
#include "protocol/envelope.h"
#include "supervisor/child.h"
#include "supervisor/daemon.h"
#include "supervisor/output_ring.h"
#include "supervisor/state_dir.h"
#include "tether/protocol/version.h"

namespace {

constexpr char kFuzzTarget[] = "supervisor_handler_fuzzer";
namespace wire = tether::wire;
namespace protocol = tether::protocol;
namespace sup = tether::supervisor;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr char kSecret[] = "supervisor-handler-fuzz-secret-0";  // 32 bytes (16..64)
// Short, so that a pause record outlasts the lease, and a daemon without an
// attachment ends soon after its child (a lease that expires while we work
// closes the connection, which every check accepts).
constexpr unsigned kLeaseMs = 100;
constexpr unsigned kLingerMs = 100;  // exit record kept this long without an attachment
constexpr unsigned kPauseUnitMs = 4;  // a pause record waits payload[0] % 32 of these
constexpr unsigned kDrainMs = 100;
constexpr unsigned kTerminateGraceMs = 1000;  // SIGTERM, then SIGKILL after this
// A daemon silent this long on a complete request is hung (generous: ASan
// on 2 cores while other fuzzers run).
constexpr milliseconds kReplyDeadline{3000};
constexpr milliseconds kEndDeadline{5000};  // for the daemon to end once the exit is acked
constexpr std::uint64_t kFloodStdout = 300000, kFloodStderr = 70000;  // child 2, bytes
constexpr std::uint64_t kPingNonceBase = 1ull << 62;                  // our round trips

enum Config : std::uint8_t { kWrongSecret = 1, kNoHello = 2, kZstd = 4, kPty = 8, kStdinClosed = 16, kSmall = 128 };
enum Flag : std::uint8_t {
  kStampGeneration = 1, kCompress = 2, kFixHello = 4, kStaleGeneration = 8,
  kRoundTrip = 16, kAckReceived = 32, kRaw = 64, kReconnect = 128,
  kPause = 255,  // all of them: no frame, wait kPauseUnitMs x (payload[0] % 32)
};

pid_t g_daemon = -1;
std::string g_dir;

// Kills and reaps our children other than the daemon: what the daemon
// started and left behind, reparented to us (the fuzzer is a subreaper).
void KillStrays() {
  const pid_t self = ::getpid();
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(e.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const std::size_t close = stat.rfind(')');
    long ppid = 0;
    if (close != std::string::npos && std::sscanf(stat.c_str() + close + 1, " %*c %ld", &ppid) == 1 &&
        ppid == self && std::stol(name) != g_daemon) {
      ::kill(static_cast<pid_t>(std::stol(name)), SIGKILL);
    }
  }
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

// Kills the daemon and what it started (reparented to us once it is dead),
// and aborts with the input kept.
[[noreturn]] void Bug(const char* what) {
  if (g_daemon > 0) {
    ::kill(g_daemon, SIGKILL);
    ::waitpid(g_daemon, nullptr, 0);
  }
  KillStrays();
  if (!g_dir.empty()) sup::RemovePrivateDir(g_dir);
  tether::fuzz::Fail(kFuzzTarget, what);
}
#define CHECK_OR_BUG(cond) \
  do {                     \
    if (!(cond)) Bug(#cond); \
  } while (0)

std::uint64_t SatAdd(std::uint64_t a, std::uint64_t b) { return a + b < a ? ~0ull : a + b; }

// The stdin byte at `offset` in every StdinData we re-encode: compressible
// (runs of 8 bytes), and a shift by less than 1040 bytes changes it.
char StdinByte(std::uint64_t offset) {
  const std::uint64_t run = offset / 8;
  return offset % 8 == 7 ? static_cast<char>('0' + run % 10) : static_cast<char>('a' + run % 26);
}

// What the child could have written per stream, given the stdin it got.
struct Bounds {
  std::uint64_t fixed[2] = {0, 0};
  std::uint64_t per_stdin_byte = 1;  // a terminal echoes and turns \n into \r\n
  std::uint64_t Max(int i, std::uint64_t stdin_bytes) const {
    return SatAdd(fixed[i], i == 0 ? stdin_bytes * per_stdin_byte : 0);
  }
};

// State of the whole run, shared by its connections.
struct Session {
  bool pty = false;
  Bounds bounds;
  // Without a terminal, the stdout the child writes is known byte for byte:
  // `zeros` NULs (child 2), then stdin, which we send as StdinByte(offset)
  // whatever frames carry it. Unknown once stdin that is not ours was
  // accepted, or an ack claimed bytes not yet received (a lying host may
  // see ring bytes reused under a write in progress).
  bool content_known = false;
  std::uint64_t zeros = 0;
  std::uint64_t stdin_max = 0;   // highest stdin offset + size the daemon may have accepted
  std::uint64_t last_generation = 0;
  wire::Ticket ticket;  // the newest reference ticket (Welcome, Pong): later Hellos show it
  std::uint64_t next_nonce = kPingNonceBase;
  std::uint64_t max_nonce_sent = 0;  // the input's pings included
  bool any_nonce = false;
};

// One connection: what the daemon read from us (mirrored with the same
// decoder) and what it answered.
struct Conn {
  int fd = -1;
  bool closed = false;
  protocol::EnvelopeDecoder replies;
  protocol::EnvelopeDecoder mirror;  // our bytes as the daemon's reader decodes them
  bool mirror_failed = false;        // the daemon must close this connection
  bool first_seen = false;           // the daemon read a first envelope
  bool first_is_good_hello = false;  // ... and it was a Hello with our secret
  bool control = false;              // ... asking for a control attachment
  std::uint64_t resume[2] = {0, 0};
  std::uint64_t window = sup::kDefaultWindowBytes;  // the largest granted, bytes
  std::uint64_t generation = 0;
  bool welcomed = false;
  int answers = 0;  // welcomes and errors
  std::uint64_t next[2] = {0, 0}, acked[2] = {0, 0};
  bool eof[2] = {false, false};
  bool exit_seen = false;
  std::uint64_t stdin_acked = 0;
  std::uint64_t pong = 0, error_request = 0;
  bool auto_ack = false;  // cleanup: acknowledge everything received
  bool eof_sent = false;  // we shut down our sending side
};

std::uint64_t Clamp(std::uint64_t w) { return std::clamp<std::uint64_t>(w, 4096, 64u << 20); }

// Accounts one envelope the daemon decoded from our bytes.
void Log(const char* dir, const wire::Envelope& env);

void Mirrored(Session& s, Conn& c, const wire::Envelope& env) {
  Log("->", env);
  if (!c.first_seen) {
    c.first_seen = true;
    if (env.has_hello()) {
      const wire::Hello& h = env.hello();
      c.first_is_good_hello = h.secret() == kSecret;
      c.control = h.control();
      c.resume[0] = s.pty ? h.pty_offset() : h.stdout_offset();
      c.resume[1] = h.stderr_offset();
      if (h.window_bytes() != 0) c.window = Clamp(h.window_bytes());
    }
  }
  // Counted whatever their generation: a looser bound, never a false alarm.
  if (env.has_stdin_data()) {
    const wire::StdinData& d = env.stdin_data();
    s.stdin_max = std::max(s.stdin_max, SatAdd(d.offset(), d.data().size()));
    for (std::size_t j = 0; j < d.data().size() && s.content_known; ++j) {
      s.content_known = d.data()[j] == StdinByte(d.offset() + j);
    }
  }
  if (env.has_ack()) {
    const wire::Ack& a = env.ack();
    if ((s.pty ? a.pty_offset() : a.stdout_offset()) > c.next[0] || a.stderr_offset() > c.next[1]) {
      s.content_known = false;
    }
    c.acked[0] = std::max(c.acked[0], s.pty ? a.pty_offset() : a.stdout_offset());
    c.acked[1] = std::max(c.acked[1], a.stderr_offset());
    if (a.window_bytes() != 0) c.window = std::max(c.window, Clamp(a.window_bytes()));
  }
  if (env.has_ping()) {
    s.max_nonce_sent = std::max(s.max_nonce_sent, env.ping().nonce());
    s.any_nonce = true;
  }
}

// TETHER_FUZZ_VERBOSE=1: every envelope the daemon read and sent, to see
// what a crash input does.
const bool g_verbose = std::getenv("TETHER_FUZZ_VERBOSE") != nullptr;

void Log(const char* dir, const wire::Envelope& env) {
  if (!g_verbose) return;
  // (Lite protobuf: no DebugString.)
  std::string more;
  if (env.has_output()) {
    more = absl::StrCat(" stream ", env.output().stream(), " offset ", env.output().offset(), " +",
                        env.output().data().size(), env.output().eof() ? " eof" : "");
  } else if (env.has_output_gap()) {
    more = absl::StrCat(" stream ", env.output_gap().stream(), " ", env.output_gap().from(), "..",
                        env.output_gap().to());
  } else if (env.has_error()) {
    more = absl::StrCat(" ", env.error().code(), " ", std::string(env.error().message()));
  } else if (env.has_ack()) {
    more = absl::StrCat(" ", env.ack().stdout_offset(), "/", env.ack().pty_offset(), " ", env.ack().stderr_offset(),
                        env.ack().exit() ? " exit" : "");
  } else if (env.has_stdin_data()) {
    more = absl::StrCat(" offset ", env.stdin_data().offset(), " +", env.stdin_data().data().size());
  } else if (env.has_stdin_ack()) {
    more = absl::StrCat(" ", env.stdin_ack().offset(), env.stdin_ack().eof() ? " eof" : "");
  }
  std::fprintf(stderr, "%s %s gen %llu%s\n", dir, std::string(protocol::BodyName(env)).c_str(),
               static_cast<unsigned long long>(env.generation()), more.c_str());
}

void CheckState(const Session& s, const wire::ProcessState& st) {
  CHECK_OR_BUG(st.stdin_acked() <= st.stdin_received());
  CHECK_OR_BUG(st.stdin_received() <= s.stdin_max);
  const bool ended = st.phase() == wire::ProcessState::PHASE_EXITED || st.phase() == wire::ProcessState::PHASE_FAILED;
  CHECK_OR_BUG(ended == st.has_exit());
}

void OnReply(Session& s, Conn& c, const wire::Envelope& env) {
  Log("<-", env);
  switch (env.body_case()) {
    case wire::Envelope::kWelcome: {
      CHECK_OR_BUG(!c.welcomed);
      CHECK_OR_BUG(c.first_is_good_hello);  // a wrong secret is never welcomed
      CHECK_OR_BUG(env.welcome().generation() == env.generation());
      CheckState(s, env.welcome().state());
      if (env.welcome().has_ticket()) s.ticket = env.welcome().ticket();
      if (c.control) {
        // Requests only, beside the output attachment: no generation of its own.
        CHECK_OR_BUG(env.generation() == s.last_generation);
        c.generation = env.generation();
      } else {
        CHECK_OR_BUG(env.generation() > s.last_generation);
        s.last_generation = c.generation = env.generation();
      }
      c.welcomed = true;
      ++c.answers;
      for (int i = 0; i < 2; ++i) c.next[i] = c.acked[i] = std::max(c.acked[i], c.resume[i]);
      return;
    }
    case wire::Envelope::kError:
      CHECK_OR_BUG(env.generation() == c.generation);
      c.error_request = env.request_id();
      ++c.answers;
      return;
    default:
      break;
  }
  CHECK_OR_BUG(c.welcomed);  // everything else is for an attachment
  CHECK_OR_BUG(env.generation() == c.generation);
  // A control attachment never gets output, stdin acks or the exit.
  CHECK_OR_BUG(!c.control || env.has_status() || env.has_pong() || env.has_error());
  switch (env.body_case()) {
    case wire::Envelope::kOutput: {
      const wire::Output& o = env.output();
      const wire::Stream want = s.pty ? wire::STREAM_PTY : wire::STREAM_STDOUT;
      CHECK_OR_BUG(o.stream() == want || o.stream() == wire::STREAM_STDERR);
      const int i = o.stream() == wire::STREAM_STDERR ? 1 : 0;
      CHECK_OR_BUG(!c.eof[i] && !c.exit_seen);
      CHECK_OR_BUG(o.offset() == c.next[i]);
      CHECK_OR_BUG(!o.data().empty() || o.eof());
      if (i == 0 && s.content_known) {
        for (std::size_t j = 0; j < o.data().size(); ++j) {
          const std::uint64_t k = o.offset() + j;
          CHECK_OR_BUG(o.data()[j] == (k < s.zeros ? '\0' : StdinByte(k - s.zeros)));
        }
      }
      c.next[i] += o.data().size();
      c.eof[i] = o.eof();
      CHECK_OR_BUG(c.next[i] <= s.bounds.Max(i, s.stdin_max));
      const std::uint64_t in_flight = (c.next[0] - std::min(c.next[0], c.acked[0])) +
                                      (c.next[1] - std::min(c.next[1], c.acked[1]));
      CHECK_OR_BUG(in_flight <= c.window);
      return;
    }
    case wire::Envelope::kOutputGap: {
      const wire::OutputGap& g = env.output_gap();
      const int i = g.stream() == wire::STREAM_STDERR ? 1 : 0;
      CHECK_OR_BUG(g.from() == c.next[i] && g.to() > g.from());
      c.next[i] = g.to();
      c.acked[i] = std::max(c.acked[i], g.to());
      return;
    }
    case wire::Envelope::kExit:
      CHECK_OR_BUG(c.eof[0] && c.eof[1] && !c.exit_seen);
      c.exit_seen = true;
      return;
    case wire::Envelope::kStdinAck:
      CHECK_OR_BUG(env.stdin_ack().offset() >= c.stdin_acked);
      CHECK_OR_BUG(env.stdin_ack().offset() <= s.stdin_max);
      c.stdin_acked = env.stdin_ack().offset();
      return;
    case wire::Envelope::kStatus:
      CheckState(s, env.status());
      return;
    case wire::Envelope::kPong:
      CHECK_OR_BUG(s.any_nonce && env.pong().nonce() <= s.max_nonce_sent);
      c.pong = std::max(c.pong, env.pong().nonce());
      if (env.pong().has_ticket()) s.ticket = env.pong().ticket();
      return;
    default:
      Bug("a reply body a supervisor may not send");
  }
}

void SendRaw(Session& s, Conn& c, std::string_view bytes);
bool Pump(Session& s, Conn& c, Clock::time_point deadline, const std::function<bool()>& done);

void AckAll(Session& s, Conn& c, bool exit) {
  wire::Envelope env;
  env.set_generation(c.generation);
  wire::Ack* a = env.mutable_ack();
  if (s.pty) {
    a->set_pty_offset(c.next[0]);
  } else {
    a->set_stdout_offset(c.next[0]);
  }
  a->set_stderr_offset(c.next[1]);
  a->set_exit(exit);
  std::string out;
  protocol::AppendEnvelope(env, protocol::Compression::kNone, &out);
  SendRaw(s, c, out);
}

// Reads replies until `done()`, a close, or `deadline`; false on the deadline.
bool Pump(Session& s, Conn& c, Clock::time_point deadline, const std::function<bool()>& done) {
  char buf[64 * 1024];
  while (!done()) {
    if (c.closed) return true;
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    pollfd p{c.fd, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::max<long long>(left, 0)));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return false;
    const ssize_t n = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) {
      c.closed = true;
      // The daemon never ends mid-frame, except that our EOF means the host
      // is gone (bridge.cc), and it then closes at once, even in the middle
      // of a batch.
      CHECK_OR_BUG(c.replies.idle() || c.eof_sent);
      return true;
    }
    std::string_view in(buf, static_cast<std::size_t>(n));
    wire::Envelope env;
    bool acked_any = false;
    while (true) {
      absl::StatusOr<bool> got = c.replies.Next(&in, &env);
      if (!got.ok()) {
        std::fprintf(stderr, "%s: reply: %s\n", kFuzzTarget, std::string(got.status().message()).c_str());
        Bug("a reply does not decode");
      }
      if (!*got) break;
      OnReply(s, c, env);
      acked_any = acked_any || env.has_output() || env.has_output_gap();
    }
    if (c.auto_ack && acked_any && !c.closed) AckAll(s, c, false);
  }
  return true;
}

// Writes all of `bytes`, reading replies meanwhile (so neither side blocks
// on a full socket); a daemon that stops reading without closing is hung.
void SendRaw(Session& s, Conn& c, std::string_view bytes) {
  if (c.closed) return;
  const auto deadline = Clock::now() + kReplyDeadline;
  while (!bytes.empty() && !c.closed) {
    const ssize_t n = ::send(c.fd, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      bytes.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN) return;  // closed by the daemon: the replies say why
    if (Clock::now() >= deadline) Bug("the daemon neither reads nor closes");
    pollfd p{c.fd, POLLOUT | POLLIN, 0};
    ::poll(&p, 1, 10);
    if (p.revents & POLLIN) {
      // A daemon whose reader stopped (a fatal error) may be writing to us.
      const bool auto_ack = c.auto_ack;
      c.auto_ack = false;  // (no nested sends)
      Pump(s, c, Clock::now(), [] { return false; });
      c.auto_ack = auto_ack;
    }
  }
}

void Send(Session& s, Conn& c, std::string_view bytes) {
  if (c.closed) return;
  std::string_view in = bytes;
  wire::Envelope env;
  while (!c.mirror_failed) {
    absl::StatusOr<bool> got = c.mirror.Next(&in, &env);
    if (!got.ok()) c.mirror_failed = true;
    if (!got.ok() || !*got) break;
    Mirrored(s, c, env);
  }
  SendRaw(s, c, bytes);
  // Read what is already there, so that stamped acks see it.
  Pump(s, c, Clock::now(), [] { return false; });
}

void SendEnvelope(Session& s, Conn& c, const wire::Envelope& env) {
  std::string out;
  protocol::AppendEnvelope(env, protocol::Compression::kNone, &out);
  Send(s, c, out);
}

// A round trip: our ping must come back as a pong or an error, or the
// connection closes. Skipped when a partial frame is pending (the daemon
// rightly waits for the rest of it).
void RoundTrip(Session& s, Conn& c) {
  if (c.closed || (!c.mirror_failed && !c.mirror.idle())) return;
  const std::uint64_t nonce = ++s.next_nonce;
  const int answers = c.answers;
  if (!c.mirror_failed) {
    wire::Envelope ping;
    ping.set_generation(c.generation);
    ping.set_request_id(nonce);
    ping.mutable_ping()->set_nonce(nonce);
    SendEnvelope(s, c, ping);
  }
  const bool ok = Pump(s, c, Clock::now() + kReplyDeadline, [&] {
    return c.pong >= nonce || (c.answers > answers && c.error_request == nonce);
  });
  if (!ok) Bug(c.mirror_failed ? "bytes that are not frames left the connection open" : "no answer to a ping");
}

bool Connect(Conn& c) {
  absl::StatusOr<int> fd = sup::ConnectInDir(g_dir);
  if (!fd.ok()) {
    c.closed = true;  // nothing listens: the daemon is ending
    return false;
  }
  c.fd = *fd;
  return true;
}

void Disconnect(Conn& c) {
  if (c.fd >= 0) ::close(c.fd);
  c.fd = -1;
}

wire::Envelope HelloEnvelope(const Session& s, bool right_secret, bool zstd, std::uint64_t window) {
  wire::Envelope env;
  wire::Hello* h = env.mutable_hello();
  *h->mutable_ticket() = s.ticket;  // none before the first welcome, as for a launching host
  h->set_min_version(tether::kProtocolVersion);
  h->set_max_version(tether::kProtocolVersion);
  h->set_secret(right_secret ? kSecret : "supervisor-handler-fuzz-secret-1");
  h->set_zstd(zstd);
  h->set_window_bytes(window);
  return env;
}

// Sends a Hello and waits for its answer (welcome, error or close).
void Hello(Session& s, Conn& c, const wire::Envelope& hello) {
  const int answers = c.answers;
  SendEnvelope(s, c, hello);
  if (!Pump(s, c, Clock::now() + kReplyDeadline, [&] { return c.answers > answers; })) Bug("no answer to a hello");
}

wire::Launch MakeLaunch(std::uint8_t config, Session* s) {
  wire::Launch l;
  l.set_launch_id("fuzz");
  l.set_secret(kSecret);
  l.set_state_dir(g_dir);
  l.set_cwd("/");
  wire::EnvVar* path = l.add_env();
  path->set_name("PATH");
  path->set_value("/usr/bin:/bin");
  l.set_stdin_mode(config & kStdinClosed ? wire::STDIN_CLOSED : wire::STDIN_PIPE);
  l.set_lease_ms(kLeaseMs);
  l.set_linger_ms(kLingerMs);
  l.set_drain_ms(kDrainMs);
  if (config & kSmall) l.set_ring_bytes(sup::kMinRingBytes);
  switch ((config >> 5) & 3) {
    case 0:
      l.add_argv("/bin/cat");
      break;
    case 1:
      l.add_argv("/bin/sh"), l.add_argv("-c"), l.add_argv("cat; echo done >&2");
      s->bounds.fixed[1] = 5;
      break;
    case 2:
      l.add_argv("/bin/sh"), l.add_argv("-c");
      l.add_argv("head -c 300000 /dev/zero; head -c 70000 /dev/urandom >&2; exec cat");
      s->bounds.fixed[0] = s->zeros = kFloodStdout;
      s->bounds.fixed[1] = kFloodStderr;
      break;
    default:
      l.add_argv("/bin/true");
  }
  s->pty = config & kPty;
  s->content_known = !s->pty;
  if (s->pty) {
    l.mutable_pty()->set_cols(80);
    l.mutable_pty()->set_rows(24);
    // One stream: everything, with \n as \r\n, and stdin echoed.
    s->bounds.fixed[0] = 2 * (s->bounds.fixed[0] + s->bounds.fixed[1]) + 1024;
    s->bounds.fixed[1] = 0;
    s->bounds.per_stdin_byte = 4;
  }
  return l;
}

pid_t StartDaemon(wire::Launch launch) {
  const absl::Status created = sup::CreatePrivateDir(g_dir);
  if (!created.ok()) Bug("cannot create the state directory");
  absl::StatusOr<int> listen_fd = sup::ListenInDir(g_dir);
  if (!listen_fd.ok()) Bug("cannot listen in the state directory");
  const pid_t fuzzer = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) Bug("fork");
  if (pid == 0) {
    // As Daemonize() in launcher.cc, except that stderr stays (sanitizer
    // reports) and we are its parent (we wait for it).
    ::setsid();
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    // A fuzzer killed (timeout, ^C, SIGPIPE on its log) leaves no daemon:
    // its child then sees EOF or a hangup and ends too.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != fuzzer) ::_exit(1);  // it died before the prctl
    ::signal(SIGPIPE, SIG_IGN);
    ::signal(SIGHUP, SIG_IGN);
    for (int fd = 3; fd < 1024; ++fd) {
      if (fd != *listen_fd) ::close(fd);
    }
    sup::DaemonConfig config;
    config.child_env = sup::BuildEnvironment(launch.env(), launch.inherit_env(), environ);
    config.launch = std::move(launch);
    config.state_dir = g_dir;
    config.listen_fd = *listen_fd;
    try {
      ::_exit(sup::RunDaemon(std::move(config)));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: daemon threw: %s\n", kFuzzTarget, e.what());
    }
    ::_exit(99);
  }
  ::close(*listen_fd);
  return pid;
}

// Attaches, terminates the child and acknowledges its exit, so that the
// daemon ends as it does for a real host that is done.
void Finish(Session& s, std::uint8_t config) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    siginfo_t info{};
    if (::waitid(P_PID, g_daemon, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid != 0) return;
    struct stat st;
    if (::lstat(g_dir.c_str(), &st) != 0) return;  // removed: the daemon is ending (linger or acked exit)
    Conn c;
    if (!Connect(c)) {
      std::this_thread::sleep_for(milliseconds(1));
      continue;
    }
    c.auto_ack = true;
    Hello(s, c, HelloEnvelope(s, true, config & kZstd, 64u << 20));
    if (!c.welcomed) {
      // BUSY: the daemon has not yet seen the close of our last connection.
      Disconnect(c);
      std::this_thread::sleep_for(milliseconds(1));
      continue;
    }
    // SIGCONT first (the input may have stopped the group), so that SIGTERM
    // ends it within the grace: the SIGKILL after it scans /proc once more
    // (SignalOrphans), which costs ~10 ms under ASan on a busy machine.
    wire::Envelope cont;
    cont.set_generation(c.generation);
    cont.mutable_signal()->set_signal(SIGCONT);
    SendEnvelope(s, c, cont);
    wire::Envelope t;
    t.set_generation(c.generation);
    t.mutable_terminate()->set_grace_ms(kTerminateGraceMs);
    SendEnvelope(s, c, t);
    if (!Pump(s, c, Clock::now() + kReplyDeadline, [&] { return c.exit_seen; })) Bug("no exit after terminate");
    if (c.exit_seen) {
      AckAll(s, c, true);
      if (!Pump(s, c, Clock::now() + kReplyDeadline, [] { return false; })) Bug("no close after the exit ack");
    }
    Disconnect(c);
    return;
  }
  Bug("cannot attach to the daemon for the cleanup");
}

}  // namespace

namespace {

// Waits for the daemon to end; it must exit 0 having removed its directory,
// and nothing it started may outlive it (we are the subreaper above it).
void WaitDaemon() {
  const auto deadline = Clock::now() + kEndDeadline;
  int status = 0;
  while (true) {
    const pid_t r = ::waitpid(g_daemon, &status, WNOHANG);
    if (r == g_daemon) break;
    if (r < 0 && errno != EINTR) Bug("waitpid on the daemon");
    if (Clock::now() >= deadline) Bug("the daemon did not end after its exit was acknowledged");
    std::this_thread::sleep_for(milliseconds(1));
  }
  g_daemon = -1;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "%s: daemon wait status 0x%x\n", kFuzzTarget, status);
    Bug("the daemon ended abnormally");
  }
  struct stat st;
  CHECK_OR_BUG(::lstat(g_dir.c_str(), &st) != 0);
  // Descendants reparented to us: zombies of a group the daemon killed are
  // fine, a live one is a leak.
  const auto reap_deadline = Clock::now() + kEndDeadline;
  while (true) {
    const pid_t r = ::waitpid(-1, &status, WNOHANG);
    if (r < 0 && errno == ECHILD) return;
    if (r > 0) continue;
    if (Clock::now() >= reap_deadline) Bug("a process the daemon started outlived it");
    std::this_thread::sleep_for(milliseconds(1));
  }
}

// Per input: <base>/<n>, under a private base made once.
// (A char array: a static std::string would be destroyed before the
// atexit handler registered while constructing it runs.)
std::string NextDir() {
  static char base[] = "/tmp/tether-supfuzz-XXXXXX";
  static const bool made = [] {
    if (::mkdtemp(base) == nullptr) tether::fuzz::Fail(kFuzzTarget, "mkdtemp");
    std::atexit([] { ::rmdir(base); });
    return true;
  }();
  (void)made;
  static std::uint64_t n = 0;
  return std::string(base) + "/" + std::to_string(n++);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool once = [] {
    tether::fuzz::QuietProtobufLogs();
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    return true;
  }();
  (void)once;
  if (size == 0) return 0;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  const std::uint8_t config = static_cast<std::uint8_t>(in[0]);
  in.remove_prefix(1);

  Session s;
  g_dir = NextDir();
  g_daemon = StartDaemon(MakeLaunch(config, &s));

  Conn c;
  if (!Connect(c)) Bug("cannot connect to a fresh daemon");
  if (!(config & kNoHello)) {
    Hello(s, c, HelloEnvelope(s, !(config & kWrongSecret), config & kZstd, config & kSmall ? 4096 : 0));
  }
  while (in.size() >= 3) {
    const std::uint8_t flags = static_cast<std::uint8_t>(in[0]);
    const std::size_t len = (static_cast<unsigned char>(in[1]) << 8) | static_cast<unsigned char>(in[2]);
    in.remove_prefix(3);
    const std::string payload(in.substr(0, std::min(len, in.size())));
    in.remove_prefix(payload.size());
    if (flags == kPause) {
      // Long enough to outlast the lease (the attachment is closed, output
      // evicted), reading meanwhile.
      const unsigned ms = payload.empty() ? 0 : kPauseUnitMs * (static_cast<unsigned char>(payload[0]) % 32);
      const auto until = Clock::now() + milliseconds(ms);
      while (Clock::now() < until) {
        if (c.closed) {
          std::this_thread::sleep_until(until);
          break;
        }
        Pump(s, c, until, [] { return false; });
      }
      continue;
    }
    if (flags & kReconnect) {
      Disconnect(c);
      c = Conn();
      if (!Connect(c)) break;  // the daemon ended (its exit was acknowledged)
    }
    std::string bytes;
    wire::Envelope env;
    const bool stamp = flags & (kStampGeneration | kStaleGeneration | kFixHello | kAckReceived);
    if (flags & kRaw) {
      bytes = payload;
    } else if (stamp && env.ParseFromString(payload)) {
      if (flags & kStampGeneration) env.set_generation(c.generation);
      if (flags & kStaleGeneration) env.set_generation(c.generation - 1);
      if ((flags & kFixHello) && env.has_hello()) {
        env.mutable_hello()->set_secret(kSecret);
        env.mutable_hello()->set_min_version(tether::kProtocolVersion);
        env.mutable_hello()->set_max_version(tether::kProtocolVersion);
        *env.mutable_hello()->mutable_ticket() = s.ticket;
      }
      if (!s.pty && env.has_stdin_data()) {
        std::string* d = env.mutable_stdin_data()->mutable_data();
        for (std::size_t j = 0; j < d->size(); ++j) (*d)[j] = StdinByte(env.stdin_data().offset() + j);
      }
      if ((flags & kAckReceived) && env.has_ack()) {
        if (s.pty) {
          env.mutable_ack()->set_pty_offset(c.next[0]);
        } else {
          env.mutable_ack()->set_stdout_offset(c.next[0]);
        }
        env.mutable_ack()->set_stderr_offset(c.next[1]);
      }
      protocol::AppendEnvelope(env, flags & kCompress ? protocol::Compression::kAuto : protocol::Compression::kNone,
                               &bytes);
    } else {
      protocol::AppendFrame(payload, flags & kCompress ? protocol::Compression::kAuto : protocol::Compression::kNone,
                            &bytes);
    }
    const int answers = c.answers;
    const bool had_first = c.first_seen;
    Send(s, c, bytes);
    // A Hello the daemon read is answered (welcome or error) or closed.
    if (!had_first && c.first_seen && !Pump(s, c, Clock::now() + kReplyDeadline, [&] { return c.answers > answers; })) {
      Bug("no answer to a hello");
    }
    if (flags & kRoundTrip) RoundTrip(s, c);
  }
  RoundTrip(s, c);
  // Our end of the stream: the daemon must close the connection (a partial
  // frame included), which frees the attachment for the cleanup's Hello.
  if (!c.closed) {
    ::shutdown(c.fd, SHUT_WR);
    c.eof_sent = true;
    if (!Pump(s, c, Clock::now() + kReplyDeadline, [] { return false; })) Bug("no close after the host's EOF");
  }
  Disconnect(c);
  Finish(s, config);
  WaitDaemon();
  g_dir.clear();
  return 0;
}
