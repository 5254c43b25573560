#include "supervisor/daemon.h"

#include <signal.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <array>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "protocol/envelope.h"
#include "protocol/sha256.h"
#include "protocol/status_macros.h"
#include "supervisor/admission.h"
#include "supervisor/async.h"
#include "supervisor/child.h"
#include "supervisor/launcher.h"
#include "supervisor/output_ring.h"
#include "supervisor/proc.h"
#include "supervisor/state_dir.h"
#include "tether/protocol/version.h"

namespace tether::supervisor {
namespace {

using asio::awaitable;
using asio::local::stream_protocol;
using protocol::Compression;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr std::size_t kReadBufferBytes = 64 * 1024;
constexpr std::size_t kMaxBatchBytes = 256 * 1024;  // frames coalesced per socket write
constexpr int kNumStreams = 2;                      // stdout, stderr
constexpr int kZstdSkipFrames = 64;               // after a frame zstd could not shrink
constexpr unsigned kAbandonGraceMs = 2000;          // SIGTERM -> SIGKILL for an abandoned run
constexpr std::int64_t kTicketLifetimeSeconds = 24 * 3600;  // a reference lives at most this long

// True when `pid` is stopped (SIGSTOP, Ctrl-Z) or stopped by a tracer: an
// attachment whose peer is stopped is not lost, only paused.
bool ProcessStopped(pid_t pid) {
  if (pid <= 0) return false;
  const std::optional<ProcStat> st = ReadProcStat(pid);
  return st && (st->state == 'T' || st->state == 't');
}

// Stream 0 is stdout, or the combined terminal output with a pty; 1 is stderr.
wire::Stream StreamOf(int i, bool pty) {
  if (pty) return i == 0 ? wire::STREAM_PTY : wire::STREAM_STDERR;
  return i == 0 ? wire::STREAM_STDOUT : wire::STREAM_STDERR;
}

bool SecretsEqual(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// Terminate's sweep of what escaped the child's group: how long it goes on
// killing and reaping while processes keep being reparented to us, and the
// pauses between its rounds (doubling from the first).
constexpr milliseconds kOrphanSweepMs{3000};
constexpr milliseconds kOrphanSweepFirstPause{5};
constexpr milliseconds kOrphanSweepMaxPause{100};

// Sends `sig` to every process whose parent is us: descendants that left the
// child's process group (setsid) and were reparented to us, the subreaper,
// when their parent died. Returns how many there were, zombies included
// (they are ours until reaped).
std::size_t SignalOrphans(int sig) {
  const std::vector<pid_t> orphans = ChildrenOf(::getpid());
  for (pid_t p : orphans) ::kill(p, sig);
  return orphans.size();
}

wire::Envelope ErrorEnvelope(wire::ErrorCode code, std::string message, std::uint64_t request_id,
                             bool fatal) {
  wire::Envelope env;
  wire::Error* e = env.mutable_error();
  e->set_code(code);
  e->set_message(std::move(message));
  e->set_request_id(request_id);
  e->set_fatal(fatal);
  return env;
}

class Daemon;

// One authenticated (or authenticating) connection from a bridge.
class Attachment : public std::enable_shared_from_this<Attachment> {
 public:
  Attachment(Daemon& d, stream_protocol::socket socket, pid_t peer_pid)
      : daemon_(d), socket_(std::move(socket)), wake_(socket_.get_executor()), peer_pid_(peer_pid) {}

  awaitable<void> Run();
  void Close();
  bool closed() const { return closed_; }
  bool authenticated() const { return authenticated_; }
  // A control attachment (Hello.control): requests only, beside the one
  // that holds the output.
  bool control() const { return is_control_; }
  pid_t peer_pid() const { return peer_pid_; }
  std::uint64_t generation() const { return generation_; }
  void Wake() { wake_.Notify(); }
  void Queue(const wire::Envelope& env);
  void QueueStdinAck() {
    stdin_ack_dirty_ = true;
    wake_.Notify();
  }

 private:
  awaitable<void> Reader();
  awaitable<void> Writer();
  awaitable<void> Lease();
  absl::Status Handle(const wire::Envelope& env);
  absl::Status HandleHello(const wire::Envelope& env);
  absl::Status HandleAck(const wire::Ack& ack);
  // The reply to this attachment's Hello, with a fresh reference ticket.
  void QueueWelcome(std::uint64_t request_id, std::uint64_t stdin_window);
  // One socket write: encoded frames, and output data referenced in place in
  // the rings (one gather write, no copy of the data).
  class Batch {
   public:
    void Clear() {
      owned_.clear();
      pieces_.clear();
      size_ = 0;
      owned_size_in_pieces_ = 0;
    }
    // Frames appended to owned() directly are picked up by the next
    // Append/Reference/Buffers call.
    std::string* owned() { return &owned_; }
    void Append(std::string_view bytes) {
      owned_.append(bytes);
    }
    void Reference(std::string_view bytes) {
      TakeOwned();
      pieces_.push_back({bytes.data(), 0, bytes.size()});
      size_ += bytes.size();
    }
    std::size_t size() {
      TakeOwned();
      return size_;
    }
    const std::vector<asio::const_buffer>& Buffers() {
      TakeOwned();
      buffers_.clear();
      for (const Piece& p : pieces_) {
        buffers_.emplace_back(p.data ? p.data : owned_.data() + p.pos, p.len);
      }
      return buffers_;
    }

   private:
    // Turns owned bytes not yet in a piece into one (by position, since
    // owned_ may still move as it grows).
    void TakeOwned() {
      const std::size_t have = owned_size_in_pieces_;
      if (owned_.size() > have) {
        pieces_.push_back({nullptr, have, owned_.size() - have});
        size_ += owned_.size() - have;
        owned_size_in_pieces_ = owned_.size();
      }
    }
    struct Piece {
      const char* data;  // ring bytes; null: owned_ from `pos` (owned_ may move while it grows)
      std::size_t pos;
      std::size_t len;
    };
    std::string owned_;
    std::size_t owned_size_in_pieces_ = 0;
    std::vector<Piece> pieces_;
    std::vector<asio::const_buffer> buffers_;
    std::size_t size_ = 0;
  };
  void AppendOutput(Batch* batch);

  Daemon& daemon_;
  stream_protocol::socket socket_;
  Notifier wake_;
  bool closed_ = false;
  bool authenticated_ = false;
  bool is_control_ = false;
  pid_t peer_pid_ = 0;  // SO_PEERCRED at connect; 0 when not visible here
  std::uint64_t generation_ = 0;
  bool zstd_ = false;
  std::array<int, kNumStreams> zstd_skip_{};  // raw frames to send before trying zstd again
  std::uint64_t window_ = kDefaultWindowBytes;
  std::array<std::uint64_t, kNumStreams> sent_{};
  std::array<std::uint64_t, kNumStreams> acked_{};
  std::array<bool, kNumStreams> eof_sent_{};
  bool exit_sent_ = false;
  int first_stream_ = 0;
  bool stdin_ack_dirty_ = false;
  bool closing_ = false;  // a fatal error is queued: send control frames only, then Close()
  // Ended by an explicit detach or its lease, not by a lost connection.
  bool deliberate_end_ = false;
  std::string control_;  // encoded control frames waiting for the writer
  steady_clock::time_point last_request_ = steady_clock::now();
};

class Daemon {
 public:
  explicit Daemon(DaemonConfig config);
  int Run();

  // --- used by Attachment ---
  const wire::Launch& launch() const { return config_.launch; }
  OutputRing& ring(int i) { return streams_[i]->ring; }
  bool stream_eof(int i) const { return streams_[i]->eof; }
  const std::optional<wire::Exit>& exit() const { return exit_; }
  wire::ProcessState State() const;
  std::uint64_t stdin_acked() const { return stdin_.base; }
  bool stdin_eof_delivered() const { return stdin_.closed; }
  bool stdin_closed_by_child() const { return stdin_.closed_by_child; }
  std::uint64_t generation() const { return generation_; }

  // Called after an attachment authenticated; returns its generation or an
  // error when another attachment holds the process.
  absl::StatusOr<std::uint64_t> Attach(const std::shared_ptr<Attachment>& a);
  // Reference tickets (wire::Ticket): issued with every Welcome and Pong,
  // checked on every attachment after the first.
  wire::Ticket IssueTicket() const;
  absl::Status CheckTicket(const wire::Ticket& t) const;
  // `lost`: the connection broke (no detach, lease not over): output keeps
  // its backpressure for a lease, so a host that reconnects loses nothing.
  void Detached(const Attachment* a, bool lost);
  void Released(int stream) { streams_[stream]->space.Notify(); }
  absl::Status AcceptStdin(const wire::StdinData& data);
  absl::Status AcceptStdinEof(const wire::StdinEof& eof);
  absl::Status SignalGroup(int sig);
  absl::Status Resize(const wire::PtySize& size);
  bool stdin_enabled() const {
    return config_.launch.has_pty() || config_.launch.stdin_mode() == wire::STDIN_PIPE;
  }
  void Terminate(unsigned grace_ms);
  void ExitAcknowledged();
  asio::any_io_executor executor() { return io_.get_executor(); }

 private:
  struct Stream {
    explicit Stream(asio::io_context& io, std::size_t cap) : fd(io), ring(cap), space(io.get_executor()) {}
    asio::posix::stream_descriptor fd;
    OutputRing ring;
    Notifier space;
    bool eof = false;
  };
  struct Stdin {
    explicit Stdin(asio::io_context& io) : fd(io), data(io.get_executor()) {}
    asio::posix::stream_descriptor fd;
    Notifier data;
    std::string buf;             // bytes [base, base + buf.size()) not yet in the pipe
    std::uint64_t base = 0;      // bytes written into the pipe so far
    bool eof_requested = false;  // host sent StdinEof
    std::uint64_t eof_offset = 0;
    bool closed = false;           // EOF delivered (or stdin never was a pipe)
    bool closed_by_child = false;  // EPIPE: the child closed its end
  };

  void Start();
  awaitable<void> AcceptLoop();
  awaitable<void> OutputPump(int i);
  awaitable<void> StdinPump();
  awaitable<void> WriteTerminalEof();
  awaitable<void> Reaper();
  void Reap();
  void RecordExit(int status, const struct rusage& ru);
  void Fail(wire::ErrorCode code, const absl::Status& why);
  void WakeAttachment() {
    if (auto a = attachment_.lock()) a->Wake();
  }
  void OnExitKnown();
  void ArmLinger();
  void ArmAbandon();
  void Shutdown();
  void SweepOrphans();
  void SweepOrphansRound();

  DaemonConfig config_;
  asio::io_context io_{1};
  stream_protocol::acceptor acceptor_;
  asio::signal_set sigchld_;
  std::array<std::unique_ptr<Stream>, kNumStreams> streams_;
  Stdin stdin_;
  pid_t pid_ = -1;
  pid_t pgid_ = -1;
  wire::ProcessState::Phase phase_ = wire::ProcessState::PHASE_STARTING;
  std::optional<wire::Exit> exit_;
  std::optional<int> raw_status_;  // wait status seen before all output drained
  struct rusage rusage_ {};
  std::uint64_t generation_ = 0;
  std::weak_ptr<Attachment> attachment_;
  // Connection bookkeeping (admission.h): every open connection, so that
  // the owner always gets in.
  struct Connection {
    std::weak_ptr<Attachment> attachment;
    int fd = -1;  // its socket, for FIONREAD; open while the attachment is
    steady_clock::time_point accepted;
    bool pressed = false;  // open under pressure: kPressuredHelloMs to authenticate
  };
  void PruneConnections();
  bool MakeRoom();
  void ArmHelloPressure();
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
  // Terminate's orphan sweep (SweepOrphans): rounds until none is left.
  asio::steady_timer sweep_timer_;
  bool sweeping_ = false;
  steady_clock::time_point sweep_deadline_;
  milliseconds sweep_pause_ = kOrphanSweepFirstPause;
  asio::steady_timer drain_timer_;
  bool output_cut_ = false;
  bool terminating_ = false;
  bool cancelled_ = false;  // a cancellation marker was found before the child started
  bool shut_down_ = false;
  std::string ticket_key_;  // in memory only: references cannot outlive its word
  friend class Attachment;
};

// ---------------------------------------------------------------- Attachment

void Attachment::Queue(const wire::Envelope& env) {
  wire::Envelope copy = env;
  copy.set_generation(generation_);
  protocol::AppendEnvelope(copy, Compression::kNone, &control_);
  wake_.Notify();
}

void Attachment::Close() {
  if (closed_) return;
  closed_ = true;
  boost::system::error_code ec;
  socket_.shutdown(stream_protocol::socket::shutdown_both, ec);
  socket_.close(ec);
  wake_.Notify();
  if (!is_control_) daemon_.Detached(this, authenticated() && !deliberate_end_);
}

awaitable<void> Attachment::Run() {
  auto self = shared_from_this();
  asio::co_spawn(socket_.get_executor(), Writer(), RethrowOnError);
  asio::co_spawn(socket_.get_executor(), Lease(), RethrowOnError);
  co_await Reader();
}

awaitable<void> Attachment::Lease() {
  auto self = shared_from_this();
  asio::steady_timer t(socket_.get_executor());
  while (!closed_) {
    const unsigned lease = daemon_.launch().lease_ms() ? daemon_.launch().lease_ms() : kLeaseMs;
    const auto limit = authenticated() ? milliseconds(lease) : milliseconds(kHelloTimeoutMs);
    const auto deadline = last_request_ + limit;
    if (steady_clock::now() >= deadline) {
      if (authenticated() && ProcessStopped(peer_pid_)) {
        // The host on this machine is stopped (Ctrl-Z, SIGSTOP): paused, not
        // gone. Its attachment and backpressure wait for it to resume.
        last_request_ = steady_clock::now();
        continue;
      }
      // Lost: no requests within the lease. Like a broken connection, the
      // output keeps its backpressure for another lease so that a host that
      // was only slow can reattach without loss.
      Close();
      break;
    }
    t.expires_at(std::min(deadline, steady_clock::now() + milliseconds(1000)));
    co_await t.async_wait(kNoThrow);
  }
}

awaitable<void> Attachment::Reader() {
  auto self = shared_from_this();
  protocol::EnvelopeDecoder decoder;
  std::unique_ptr<char[]> buf(new char[kReadBufferBytes]);
  wire::Envelope env;
  while (!closed_) {
    auto [ec, n] = co_await socket_.async_read_some(asio::buffer(buf.get(), kReadBufferBytes), kNoThrow);
    if (ec || n == 0) break;
    last_request_ = steady_clock::now();
    std::string_view in(buf.get(), n);
    while (!closed_) {
      absl::StatusOr<bool> got = decoder.Next(&in, &env);
      absl::Status st = got.ok() ? absl::OkStatus() : got.status();
      if (st.ok() && !*got) break;
      if (st.ok()) st = Handle(env);
      if (!st.ok()) {
        // Hostile or corrupt input: say why, flush, and drop the attachment.
        const auto code = st.code() == absl::StatusCode::kUnauthenticated     ? wire::ERROR_UNAUTHENTICATED
                          : st.code() == absl::StatusCode::kDeadlineExceeded ? wire::ERROR_EXPIRED
                          : st.code() == absl::StatusCode::kUnavailable    ? wire::ERROR_BUSY
                          : st.code() == absl::StatusCode::kResourceExhausted
                              ? wire::ERROR_RESOURCE_EXHAUSTED
                              : wire::ERROR_PROTOCOL;
        // The writer sends it after its current batch, then closes: a second
        // async_write on the socket would interleave with the writer's bytes.
        Queue(ErrorEnvelope(code, std::string(st.message()), env.request_id(), true));
        closing_ = true;
        co_return;
      }
    }
  }
  Close();
}

absl::Status Attachment::HandleHello(const wire::Envelope& env) {
  const wire::Hello& h = env.hello();
  if (!SecretsEqual(h.secret(), daemon_.launch().secret())) {
    return absl::UnauthenticatedError("hello: wrong secret");
  }
  if (h.min_version() > kProtocolVersion || h.max_version() < kProtocolVersion) {
    return absl::InvalidArgumentError(absl::StrCat("hello: host speaks protocol ", h.min_version(),
                                                   "..", h.max_version(), ", supervisor speaks ",
                                                   kProtocolVersion));
  }
  // The first attachment is the launching host's own; every later one comes
  // from a reference (or a handle that reattaches) and shows its ticket.
  if (daemon_.generation() > 0) RETURN_IF_ERROR(daemon_.CheckTicket(h.ticket()));
  if (h.control()) {
    // Requests only: no generation of its own, no output, no exit record.
    authenticated_ = true;
    is_control_ = true;
    generation_ = daemon_.generation();
    QueueWelcome(env.request_id(), 0);  // no stdin window: it sends none
    return absl::OkStatus();
  }
  const bool pty = daemon_.launch().has_pty();
  const std::uint64_t resume[kNumStreams] = {pty ? h.pty_offset() : h.stdout_offset(), h.stderr_offset()};
  for (int i = 0; i < kNumStreams; ++i) {
    if (resume[i] > daemon_.ring(i).end()) {
      return absl::InvalidArgumentError(absl::StrCat("hello: resume offset ", resume[i],
                                                     " is beyond the ", i == 0 ? "stdout" : "stderr",
                                                     " end ", daemon_.ring(i).end()));
    }
  }
  ASSIGN_OR_RETURN(generation_, daemon_.Attach(shared_from_this()));
  authenticated_ = true;
  zstd_ = h.zstd();
  if (h.window_bytes() != 0) window_ = std::clamp<std::uint64_t>(h.window_bytes(), 4096, 64u << 20);

  QueueWelcome(env.request_id(), kStdinWindowBytes);

  for (int i = 0; i < kNumStreams; ++i) {
    OutputRing& r = daemon_.ring(i);
    std::uint64_t from = resume[i];
    if (from < r.begin()) {
      wire::Envelope gap;
      gap.mutable_output_gap()->set_stream(StreamOf(i, pty));
      gap.mutable_output_gap()->set_from(from);
      gap.mutable_output_gap()->set_to(r.begin());
      Queue(gap);
      from = r.begin();
    }
    r.Release(from);
    daemon_.Released(i);
    sent_[i] = acked_[i] = from;
  }
  return absl::OkStatus();
}

void Attachment::QueueWelcome(std::uint64_t request_id, std::uint64_t stdin_window) {
  wire::Envelope reply;
  reply.set_request_id(request_id);
  wire::Welcome* w = reply.mutable_welcome();
  w->set_version(kProtocolVersion);
  w->set_supervisor_version(kTetherVersion);
  w->set_generation(generation_);
  *w->mutable_state() = daemon_.State();
  w->set_stdin_window_bytes(stdin_window);
  w->set_max_frame_bytes(protocol::kMaxFrameBytes);
  *w->mutable_ticket() = daemon_.IssueTicket();
  Queue(reply);
}

absl::Status Attachment::HandleAck(const wire::Ack& ack) {
  const std::uint64_t offs[kNumStreams] = {
      daemon_.launch().has_pty() ? ack.pty_offset() : ack.stdout_offset(), ack.stderr_offset()};
  for (int i = 0; i < kNumStreams; ++i) {
    if (offs[i] > daemon_.ring(i).end()) {
      return absl::InvalidArgumentError(absl::StrCat("ack: offset ", offs[i], " beyond the ",
                                                     daemon_.ring(i).end(), " bytes of stream ", i + 1));
    }
    // After a reattach the host may acknowledge bytes it holds from an
    // earlier attachment before we resent them: they need no resending.
    if (offs[i] > sent_[i]) sent_[i] = offs[i];
    if (offs[i] > acked_[i]) {
      acked_[i] = offs[i];
      daemon_.ring(i).Release(offs[i]);
      daemon_.Released(i);
    }
  }
  if (ack.window_bytes() != 0) window_ = std::clamp<std::uint64_t>(ack.window_bytes(), 4096, 64u << 20);
  if (ack.exit()) {
    if (!exit_sent_) return absl::InvalidArgumentError("ack: exit acknowledged before it was sent");
    daemon_.ExitAcknowledged();
  }
  wake_.Notify();
  return absl::OkStatus();
}

absl::Status Attachment::Handle(const wire::Envelope& env) {
  if (closing_) return absl::OkStatus();  // detached or failed: nothing more is read
  if (!authenticated()) {
    if (env.body_case() != wire::Envelope::kHello) {
      return absl::UnauthenticatedError(
          absl::StrCat("expected hello first, got ", std::string(protocol::BodyName(env))));
    }
    return HandleHello(env);
  }
  if (env.generation() != generation_) {
    Queue(ErrorEnvelope(wire::ERROR_STALE_GENERATION,
                        absl::StrCat(std::string(protocol::BodyName(env)), " of generation ", env.generation(),
                                     " refused: the current attachment is generation ", generation_),
                        env.request_id(), false));
    return absl::OkStatus();
  }
  if (is_control_ && (env.body_case() == wire::Envelope::kStdinData || env.body_case() == wire::Envelope::kStdinEof ||
                   env.body_case() == wire::Envelope::kAck)) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(protocol::BodyName(env)),
                                                   " is not allowed on a control attachment"));
  }
  switch (env.body_case()) {
    case wire::Envelope::kStdinData: {
      absl::Status st = daemon_.AcceptStdin(env.stdin_data());
      if (absl::IsFailedPrecondition(st)) {
        Queue(ErrorEnvelope(wire::ERROR_INPUT_CLOSED, std::string(st.message()), env.request_id(), false));
        return absl::OkStatus();
      }
      return st;
    }
    case wire::Envelope::kStdinEof:
      return daemon_.AcceptStdinEof(env.stdin_eof());
    case wire::Envelope::kAck:
      return HandleAck(env.ack());
    case wire::Envelope::kSignal: {
      absl::Status st = daemon_.SignalGroup(env.signal().signal());
      if (!st.ok()) {
        Queue(ErrorEnvelope(st.code() == absl::StatusCode::kInvalidArgument ? wire::ERROR_INVALID_ARGUMENT
                                                                            : wire::ERROR_NOT_FOUND,
                            std::string(st.message()), env.request_id(), false));
      }
      return absl::OkStatus();
    }
    case wire::Envelope::kTerminate: {
      daemon_.Terminate(env.terminate().grace_ms());
      // The acknowledgement: the state right after the request took effect.
      wire::Envelope reply;
      reply.set_request_id(env.request_id());
      *reply.mutable_status() = daemon_.State();
      Queue(reply);
      return absl::OkStatus();
    }
    case wire::Envelope::kResize: {
      absl::Status st = daemon_.Resize(env.resize().size());
      if (!st.ok()) {
        Queue(ErrorEnvelope(absl::IsUnimplemented(st) ? wire::ERROR_UNSUPPORTED : wire::ERROR_INVALID_ARGUMENT,
                            std::string(st.message()), env.request_id(), false));
      }
      return absl::OkStatus();
    }
    case wire::Envelope::kStatusRequest: {
      wire::Envelope reply;
      reply.set_request_id(env.request_id());
      *reply.mutable_status() = daemon_.State();
      Queue(reply);
      return absl::OkStatus();
    }
    case wire::Envelope::kPing: {
      wire::Envelope reply;
      reply.set_request_id(env.request_id());
      reply.mutable_pong()->set_nonce(env.ping().nonce());
      *reply.mutable_pong()->mutable_ticket() = daemon_.IssueTicket();
      Queue(reply);
      return absl::OkStatus();
    }
    case wire::Envelope::kDetach:
      // Explicit disconnect: the writer finishes its current frames (so the
      // host never sees half a frame) and then frees the attachment.
      closing_ = true;
      deliberate_end_ = true;
      wake_.Notify();
      return absl::OkStatus();
    case wire::Envelope::kHello:
      return absl::InvalidArgumentError("hello: already attached");
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(std::string(protocol::BodyName(env)), " is not a request a host may send"));
  }
}

void Attachment::AppendOutput(Batch* batch) {
  // Streams take turns going first, so that a flooding stdout cannot keep
  // the shared window from stderr.
  const std::size_t batch_before = batch->size();
  for (int k = 0; k < kNumStreams; ++k) {
    const int i = (first_stream_ + k) % kNumStreams;
    OutputRing& r = daemon_.ring(i);
    const wire::Stream stream = StreamOf(i, daemon_.launch().has_pty());
    while (batch->size() < kMaxBatchBytes) {
      // The window is shared by both streams: a quiet stderr leaves all of
      // it to stdout.
      const std::uint64_t in_flight = sent_[0] - acked_[0] + sent_[1] - acked_[1];
      if (in_flight >= window_) break;
      std::string_view v = r.Readable(sent_[i], std::min<std::uint64_t>(kMaxOutputChunkBytes, window_ - in_flight));
      if (v.empty()) break;
      if (zstd_ && zstd_skip_[i] == 0) {
        wire::Envelope env;
        env.set_generation(generation_);
        wire::Output* o = env.mutable_output();
        o->set_stream(stream);
        o->set_offset(sent_[i]);
        o->set_data(v.data(), v.size());
        const std::size_t at = batch->owned()->size();
        protocol::AppendEnvelope(env, Compression::kAuto, batch->owned());
        // Output that does not compress (random, already compressed) is
        // sent raw for the next frames instead of being tried every time.
        const bool shrank = (static_cast<unsigned char>((*batch->owned())[at + 3]) & protocol::kFlagZstd) != 0;
        if (!shrank && v.size() >= protocol::kMinCompressBytes) zstd_skip_[i] = kZstdSkipFrames;
      } else {
        if (zstd_skip_[i] > 0) --zstd_skip_[i];
        // The frame's prefix, then the data straight from the ring: it stays
        // put until the host acknowledges it, which is after it was written.
        char prefix[protocol::kMaxOutputPrefixBytes];
        batch->Append({prefix, protocol::EncodeOutputPrefix(generation_, stream, sent_[i], v.size(), prefix)});
        batch->Reference(v);
      }
      sent_[i] += v.size();
    }
    if (daemon_.stream_eof(i) && sent_[i] == r.end() && !eof_sent_[i]) {
      wire::Envelope env;
      env.set_generation(generation_);
      wire::Output* o = env.mutable_output();
      o->set_stream(stream);
      o->set_offset(sent_[i]);
      o->set_eof(true);
      protocol::AppendEnvelope(env, Compression::kNone, batch->owned());
      eof_sent_[i] = true;
    }
  }
  if (batch->size() > batch_before) first_stream_ ^= 1;
  if (daemon_.exit() && eof_sent_[0] && eof_sent_[1] && !exit_sent_) {
    wire::Envelope ex;
    ex.set_generation(generation_);
    *ex.mutable_exit() = *daemon_.exit();
    protocol::AppendEnvelope(ex, Compression::kNone, batch->owned());
    exit_sent_ = true;
  }
}

awaitable<void> Attachment::Writer() {
  auto self = shared_from_this();
  Batch batch;  // reused: its buffers keep their capacity
  while (!closed_) {
    batch.Clear();
    batch.Append(control_);
    control_.clear();
    if (authenticated() && !is_control_ && !closing_) {
      if (stdin_ack_dirty_) {
        stdin_ack_dirty_ = false;
        wire::Envelope a;
        a.set_generation(generation_);
        a.mutable_stdin_ack()->set_offset(daemon_.stdin_acked());
        a.mutable_stdin_ack()->set_eof(daemon_.stdin_eof_delivered());
        a.mutable_stdin_ack()->set_closed_by_child(daemon_.stdin_closed_by_child());
        protocol::AppendEnvelope(a, Compression::kNone, batch.owned());
      }
      AppendOutput(&batch);
    }
    if (batch.size() == 0) {
      if (closing_) break;  // the fatal error is out
      co_await wake_.Wait();
      continue;
    }
    auto [ec, n] = co_await asio::async_write(socket_, batch.Buffers(), kNoThrow);
    if (ec) break;
  }
  Close();
}

// -------------------------------------------------------------------- Daemon

Daemon::Daemon(DaemonConfig config)
    : config_(std::move(config)),
      acceptor_(io_, stream_protocol(), config_.listen_fd),
      sigchld_(io_, SIGCHLD),
      stdin_(io_),
      linger_(io_),
      hold_timer_(io_),
      abandon_timer_(io_),
      kill_timer_(io_),
      sweep_timer_(io_),
      pressure_timer_(io_),
      drain_timer_(io_) {
  std::size_t cap = config_.launch.ring_bytes() ? config_.launch.ring_bytes() : kDefaultRingBytes;
  cap = std::clamp(cap, kMinRingBytes, kMaxRingBytes);
  for (auto& s : streams_) s = std::make_unique<Stream>(io_, cap);
  ticket_key_.resize(32);
  std::size_t got = 0;
  while (got < ticket_key_.size()) {
    const ssize_t n = ::getrandom(ticket_key_.data() + got, ticket_key_.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) std::abort();  // no randomness: no key can be made
    got += static_cast<std::size_t>(n);
  }
}

namespace {
std::string TicketMac(const std::string& key, const std::string& launch_id, std::uint64_t expires_at) {
  std::string msg = "tether-ticket-v1";
  msg += launch_id;
  for (int i = 7; i >= 0; --i) msg.push_back(static_cast<char>(expires_at >> (8 * i)));
  const std::array<std::uint8_t, 32> mac = protocol::HmacSha256(key, msg);
  return std::string(reinterpret_cast<const char*>(mac.data()), mac.size());
}
}  // namespace

wire::Ticket Daemon::IssueTicket() const {
  wire::Ticket t;
  const auto expires = static_cast<std::uint64_t>(::time(nullptr) + kTicketLifetimeSeconds);
  t.set_expires_at(expires);
  t.set_mac(TicketMac(ticket_key_, config_.launch.launch_id(), expires));
  return t;
}

absl::Status Daemon::CheckTicket(const wire::Ticket& t) const {
  if (t.expires_at() == 0 || t.mac().empty()) {
    return absl::DeadlineExceededError("hello: no reference ticket (EXPIRED): reopen with a reference from this process");
  }
  if (!protocol::ConstantTimeEqual(t.mac(), TicketMac(ticket_key_, config_.launch.launch_id(), t.expires_at()))) {
    return absl::DeadlineExceededError(
        "hello: the reference's ticket was not issued by this supervisor or its expiry was altered (EXPIRED)");
  }
  if (static_cast<std::int64_t>(t.expires_at()) <= static_cast<std::int64_t>(::time(nullptr))) {
    return absl::DeadlineExceededError("hello: the reference has expired (EXPIRED)");
  }
  return absl::OkStatus();
}

wire::ProcessState Daemon::State() const {
  wire::ProcessState s;
  s.set_phase(phase_);
  s.set_pid(pid_);
  s.set_pgid(pgid_);
  s.set_stdin_acked(stdin_.base);
  s.set_stdin_closed(stdin_.closed);
  s.set_stdin_received(stdin_.base + stdin_.buf.size());
  s.set_stdin_eof_received(stdin_.eof_requested);
  if (exit_) *s.mutable_exit() = *exit_;
  return s;
}

absl::StatusOr<std::uint64_t> Daemon::Attach(const std::shared_ptr<Attachment>& a) {
  if (auto cur = attachment_.lock(); cur && !cur->closed()) {
    return absl::UnavailableError(absl::StrCat(
        "busy: attachment generation ", cur->generation(),
        " holds this process; it is freed by its disconnect or after ",
        config_.launch.lease_ms() ? config_.launch.lease_ms() : kLeaseMs, " ms without requests"));
  }
  attachment_ = a;
  linger_.cancel();
  hold_output_ = false;
  hold_timer_.cancel();
  abandon_timer_.cancel();
  last_peer_pid_ = a->peer_pid();
  return ++generation_;
}

void Daemon::Detached(const Attachment* a, bool lost) {
  if (attachment_.lock().get() != a) return;
  attachment_.reset();
  // (Not once shut down: a pending timer would keep the daemon alive.)
  hold_output_ = lost && !shut_down_ && !exit_;
  if (hold_output_) {
    const unsigned lease = config_.launch.lease_ms() ? config_.launch.lease_ms() : kLeaseMs;
    hold_timer_.expires_after(milliseconds(lease));
    hold_timer_.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      hold_output_ = false;
      for (auto& s : streams_) s->space.Notify();
    });
  }
  for (auto& s : streams_) s->space.Notify();  // a pump waiting for space evicts now
  if (exit_) ArmLinger();
  ArmAbandon();
}

void Daemon::ArmAbandon() {
  if (!config_.launch.end_with_host() || exit_ || shut_down_) return;
  // The host that owns the process has a lease to come back (a reconnect);
  // after that nobody can ever reach it (no reference was issued).
  const unsigned lease = config_.launch.lease_ms() ? config_.launch.lease_ms() : kLeaseMs;
  abandon_timer_.expires_after(milliseconds(lease));
  abandon_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || exit_ || shut_down_ || !attachment_.expired()) return;
    if (ProcessStopped(config_.launcher_parent) || ProcessStopped(last_peer_pid_)) {
      ArmAbandon();  // the host is stopped (Ctrl-Z), not gone: wait for it
      return;
    }
    abandoned_ = true;
    Terminate(kAbandonGraceMs);
    if (pgid_ <= 1) Shutdown();  // nothing runs (never started)
  });
}

void Daemon::ArmLinger() {
  const unsigned linger = config_.launch.linger_ms() ? config_.launch.linger_ms() : kDefaultLingerMs;
  linger_.expires_after(milliseconds(linger));
  linger_.async_wait([this](boost::system::error_code ec) {
    if (!ec && attachment_.expired()) Shutdown();
  });
}

absl::Status Daemon::AcceptStdin(const wire::StdinData& d) {
  const std::uint64_t next = stdin_.base + stdin_.buf.size();
  if (!stdin_enabled()) {
    return absl::FailedPreconditionError("stdin: the process was started with stdin closed");
  }
  if (stdin_.eof_requested) return absl::FailedPreconditionError("stdin: input after EOF");
  if (d.offset() > next) {
    return absl::InvalidArgumentError(
        absl::StrCat("stdin: data at offset ", d.offset(), " leaves a hole after ", next));
  }
  // Bytes below `next` were already accepted: a replay after reconnect.
  const std::uint64_t skip = next - d.offset();
  if (skip >= d.data().size()) return absl::OkStatus();
  if (stdin_.buf.size() + (d.data().size() - skip) > kStdinWindowBytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "stdin: host sent beyond the ", kStdinWindowBytes, "-byte window it was given"));
  }
  if (stdin_.closed_by_child) {
    stdin_.base += d.data().size() - skip;  // the child closed its stdin: dropped, acked
    if (auto a = attachment_.lock()) a->QueueStdinAck();
    return absl::OkStatus();
  }
  stdin_.buf.append(d.data(), skip, std::string::npos);
  stdin_.data.Notify();
  return absl::OkStatus();
}

absl::Status Daemon::AcceptStdinEof(const wire::StdinEof& e) {
  if (stdin_.eof_requested) {
    if (e.offset() != stdin_.eof_offset) {
      return absl::InvalidArgumentError(absl::StrCat("stdin_eof: at ", e.offset(),
                                                     ", but EOF was already at ", stdin_.eof_offset));
    }
    return absl::OkStatus();  // a replay
  }
  if (e.offset() != stdin_.base + stdin_.buf.size()) {
    return absl::InvalidArgumentError(absl::StrCat("stdin_eof: at ", e.offset(), ", but ",
                                                   stdin_.base + stdin_.buf.size(),
                                                   " bytes of stdin were sent"));
  }
  stdin_.eof_requested = true;
  stdin_.eof_offset = e.offset();
  stdin_.data.Notify();
  if (!stdin_enabled() || stdin_.closed) {
    if (auto a = attachment_.lock()) a->QueueStdinAck();
  }
  return absl::OkStatus();
}

absl::Status Daemon::SignalGroup(int sig) {
  if (sig <= 0 || sig >= NSIG) return absl::InvalidArgumentError(absl::StrCat("signal: ", sig, " is not a signal"));
  if (pgid_ <= 1 || exit_) return absl::NotFoundError("signal: the process has exited");
  if (::kill(-pgid_, sig) != 0) return absl::NotFoundError(absl::StrCat("signal: kill: ", std::strerror(errno)));
  return absl::OkStatus();
}

absl::Status Daemon::Resize(const wire::PtySize& size) {
  if (!config_.launch.has_pty()) return absl::UnimplementedError("resize: this process has no terminal");
  if (!streams_[0]->fd.is_open()) return absl::OkStatus();  // the terminal is gone with the child
  return ResizePty(streams_[0]->fd.native_handle(), size.cols(), size.rows());
}

awaitable<void> Daemon::WriteTerminalEof() {
  struct termios t {};
  char veof = 4;  // ^D unless the terminal says otherwise
  if (::tcgetattr(stdin_.fd.native_handle(), &t) == 0 && t.c_cc[VEOF] != 0) veof = static_cast<char>(t.c_cc[VEOF]);
  while (true) {
    const ssize_t n = ::write(stdin_.fd.native_handle(), &veof, 1);
    if (n == 1 || (n < 0 && errno != EAGAIN && errno != EINTR)) co_return;
    if (n < 0 && errno == EAGAIN) {
      auto [ec] = co_await stdin_.fd.async_wait(asio::posix::stream_descriptor::wait_write, kNoThrow);
      if (ec) co_return;
    }
  }
}

void Daemon::Terminate(unsigned grace_ms) {
  if (terminating_ || pgid_ <= 1) return;
  terminating_ = true;
  // Once the exit is recorded the group's id may belong to someone else:
  // only what escaped and is ours (our orphans) is signalled then.
  if (exit_) {
    SignalOrphans(SIGTERM);
  } else {
    ::kill(-pgid_, SIGTERM);
  }
  kill_timer_.expires_after(milliseconds(grace_ms));
  kill_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || pgid_ <= 1) return;
    if (!exit_) ::kill(-pgid_, SIGKILL);
    SweepOrphans();
  });
}

void Daemon::ExitAcknowledged() {
  // The host recorded the exit: nothing left to keep.
  asio::post(io_, [this] { Shutdown(); });
}

void Daemon::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  hold_timer_.cancel();
  abandon_timer_.cancel();
  // Files first: once the attachment closes, the host may look for them.
  RemovePrivateDir(config_.state_dir);
  ::unlink(CancelMarkerPath(config_.state_dir).c_str());
  boost::system::error_code ec;
  acceptor_.close(ec);
  if (auto a = attachment_.lock()) a->Close();
  // After a terminate, what escaped the group is killed and reaped before we
  // leave; the sweep stops the loop when it is done.
  if (terminating_) SweepOrphans();
  if (!sweeping_) io_.stop();
}

void Daemon::SweepOrphans() {
  // Terminate means everything the child started, not only its group. What
  // escaped with setsid is reparented to us only when its parent dies, and
  // its own children only after it died in turn (setsid sh -c '...; sleep':
  // the sleep outlives the killed sh), so one pass misses them: rounds go on
  // until no process has us for its parent, for at most kOrphanSweepMs. A
  // zombie left to an init that never reaps (a sandbox whose pid 1 is
  // `sleep`) would look alive: everything killed is reaped here too.
  if (sweeping_) return;
  sweeping_ = true;
  sweep_deadline_ = steady_clock::now() + kOrphanSweepMs;
  sweep_pause_ = kOrphanSweepFirstPause;
  SweepOrphansRound();
}

void Daemon::SweepOrphansRound() {
  Reap();  // what the last round killed
  if (SignalOrphans(SIGKILL) == 0 || steady_clock::now() >= sweep_deadline_) {
    sweeping_ = false;
    if (shut_down_) io_.stop();
    return;
  }
  sweep_timer_.expires_after(sweep_pause_);
  sweep_pause_ = std::min(2 * sweep_pause_, kOrphanSweepMaxPause);
  sweep_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) return SweepOrphansRound();
    sweeping_ = false;
    if (shut_down_) io_.stop();
  });
}

void Daemon::Fail(wire::ErrorCode code, const absl::Status& why) {
  phase_ = wire::ProcessState::PHASE_FAILED;
  wire::Exit e;
  e.set_failure(code);
  e.set_message(std::string(why.message()));
  e.set_code(absl::IsNotFound(why) ? 127 : 126);  // as a shell reports it
  exit_ = e;
  for (auto& s : streams_) s->eof = true;
  stdin_.closed = true;
  OnExitKnown();
}

void Daemon::Start() {
  const wire::Launch& l = config_.launch;
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
    return Fail(absl::IsInvalidArgument(path.status()) ? wire::ERROR_INVALID_ARGUMENT
                                                       : wire::ERROR_LAUNCH_FAILED,
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
  pid_ = pgid_ = child->pid;
  phase_ = wire::ProcessState::PHASE_RUNNING;
  streams_[0]->fd.assign(child->stdout_fd);
  if (child->stderr_fd >= 0) {
    streams_[1]->fd.assign(child->stderr_fd);
  } else {
    streams_[1]->eof = true;  // a terminal combines everything into stream 0
  }
  if (child->stdin_fd >= 0) {
    stdin_.fd.assign(child->stdin_fd);
  } else {
    stdin_.closed = true;
  }
  for (int i = 0; i < kNumStreams; ++i) {
    if (!streams_[i]->eof) asio::co_spawn(io_, OutputPump(i), RethrowOnError);
  }
  if (!stdin_.closed) asio::co_spawn(io_, StdinPump(), RethrowOnError);
}

awaitable<void> Daemon::OutputPump(int i) {
  Stream& s = *streams_[i];
  while (true) {
    std::span<char> space = s.ring.WritableSpan();
    if (space.empty()) {
      if (generation_ > 0 && attachment_.expired() && !hold_output_) {
        // Detached (after a first attachment; before it, the launch's own
        // Hello is on its way): keep the newest bytes, a page at a time; a
        // reattaching host is told of the evicted range as an OutputGap.
        s.ring.Evict(std::min(s.ring.size(), kMinRingBytes));
        continue;
      }
      co_await s.space.Wait();  // backpressure: the child blocks on its full pipe
      continue;
    }
    const ssize_t n = ::read(s.fd.native_handle(), space.data(), space.size());
    if (n > 0) {
      s.ring.Commit(static_cast<std::size_t>(n));
      WakeAttachment();
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      auto [ec] = co_await s.fd.async_wait(asio::posix::stream_descriptor::wait_read, kNoThrow);
      if (!ec) continue;
    }
    break;  // EOF or a read error: either way nothing more comes
  }
  // A terminal's master stays open until the child is reaped: its last close
  // hangs the terminal up, and a SIGHUP must not reach a child still exiting.
  if (!(config_.launch.has_pty() && i == 0)) {
    boost::system::error_code ec;
    s.fd.close(ec);
  }
  s.eof = true;
  WakeAttachment();
  OnExitKnown();
}

awaitable<void> Daemon::StdinPump() {
  while (true) {
    if (stdin_.buf.empty()) {
      if (stdin_.eof_requested && stdin_.base == stdin_.eof_offset) {
        // A terminal has no pipe to close: EOF is its EOF character, which
        // the line discipline turns into a zero-length read.
        if (config_.launch.has_pty()) co_await WriteTerminalEof();
        break;
      }
      co_await stdin_.data.Wait();
      continue;
    }
    const ssize_t n = ::write(stdin_.fd.native_handle(), stdin_.buf.data(), stdin_.buf.size());
    if (n > 0) {
      stdin_.buf.erase(0, static_cast<std::size_t>(n));
      stdin_.base += static_cast<std::uint64_t>(n);
      if (auto a = attachment_.lock()) a->QueueStdinAck();
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      auto [ec] = co_await stdin_.fd.async_wait(asio::posix::stream_descriptor::wait_write, kNoThrow);
      if (!ec) continue;
    }
    // EPIPE: the child closed its stdin. Later bytes are acknowledged and dropped.
    stdin_.closed_by_child = true;
    stdin_.base += stdin_.buf.size();
    stdin_.buf.clear();
    break;
  }
  boost::system::error_code ec;
  stdin_.fd.close(ec);
  stdin_.closed = true;
  if (auto a = attachment_.lock()) a->QueueStdinAck();
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
    auto a = std::make_shared<Attachment>(*this, std::move(sock), cred.pid);
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
    views.push_back({c.attachment.lock()->authenticated(),
                     ::ioctl(c.fd, FIONREAD, &waiting) == 0 && waiting > 0, c.accepted});
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

awaitable<void> Daemon::Reaper() {
  while (!shut_down_) {
    Reap();
    auto [ec, sig] = co_await sigchld_.async_wait(kNoThrow);
    if (ec) break;
  }
}

void Daemon::Reap() {
  while (true) {
    int status = 0;
    struct rusage ru {};
    const pid_t p = ::wait4(-1, &status, WNOHANG, &ru);
    if (p <= 0) break;
    if (p == pid_) RecordExit(status, ru);
    // Anything else is a descendant reparented to us (we are its subreaper).
  }
}

void Daemon::RecordExit(int status, const struct rusage& ru) {
  raw_status_ = status;
  rusage_ = ru;
  kill_timer_.cancel();
  // Terminate means everything the child started, not only its group.
  if (terminating_) SweepOrphans();
  if (!streams_[0]->eof || !streams_[1]->eof) {
    const unsigned drain = config_.launch.drain_ms() ? config_.launch.drain_ms() : kDefaultDrainMs;
    drain_timer_.expires_after(milliseconds(drain));
    drain_timer_.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      // Descendants still hold the output open: stop reading (they get
      // EPIPE or SIGPIPE on their next write) and report the exit.
      for (auto& st : streams_) {
        if (st->eof) continue;
        output_cut_ = true;
        boost::system::error_code ignored;
        st->fd.close(ignored);
        st->space.Notify();
      }
    });
  }
  OnExitKnown();
}

void Daemon::OnExitKnown() {
  // Exit is ordered after all output: report it only once both streams ended.
  if (!exit_ && raw_status_ && streams_[0]->eof && streams_[1]->eof) {
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
    exit_ = e;
    phase_ = wire::ProcessState::PHASE_EXITED;
    drain_timer_.cancel();
    boost::system::error_code ec;
    streams_[0]->fd.close(ec);  // a pty master kept open until now (see OutputPump)
  }
  if (!exit_) return;
  WakeAttachment();
  // An abandoned run's exit has no reader: clean up at once.
  if (abandoned_ && attachment_.expired()) {
    asio::post(io_, [this] { Shutdown(); });
    return;
  }
  if (attachment_.expired()) ArmLinger();
}

int Daemon::Run() {
  asio::co_spawn(io_, Reaper(), RethrowOnError);
  Start();
  if (cancelled_) {
    Shutdown();
    return 0;
  }
  asio::co_spawn(io_, AcceptLoop(), RethrowOnError);
  if (exit_) OnExitKnown();
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
