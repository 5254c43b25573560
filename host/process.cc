#include "host/process.h"

#include <sys/random.h>

#include <csignal>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <deque>
#include <limits>
#include <list>
#include <map>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "host/errors.h"
#include "host/internal/armored_channel.h"
#include "host/internal/exchange_channel.h"
#include "protocol/armor.h"
#include "host/internal/condition.h"
#include "host/output_helpers.h"
#include "host/reference.h"
#include "host/session.h"
#include "host/supervisor_binary.h"

namespace tether {

namespace asio = boost::asio;

namespace {

constexpr std::size_t kSecretBytes = 32;
constexpr auto kStatusTimeout = std::chrono::seconds(30);  // a dispatched status check
constexpr unsigned kDefaultLeaseMs = 30 * 1000;  // the supervisor's kLeaseMs
constexpr std::size_t kLaunchIdBytes = 16;
constexpr std::size_t kMinOutputWindowBytes = 16 * 1024;
constexpr std::size_t kMaxOutputWindowBytes = 64u << 20;
constexpr std::size_t kMinRingBytes = 4096;       // the supervisor's limits
constexpr std::size_t kMaxRingBytes = 64u << 20;
// After the exit is acknowledged the daemon closes the attachment; if it does
// not within this time the channel is closed from our side.
constexpr auto kCloseAfterExitTimeout = std::chrono::seconds(5);

std::string RandomBytes(std::size_t n) {
  std::string out(n, '\0');
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = ::getrandom(out.data() + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) std::abort();  // no randomness: cannot make a secret; our environment is broken
    got += static_cast<std::size_t>(r);
  }
  return out;
}

absl::Status ValidateOptions(const StartOptions& o) {
  if (o.argv.empty()) return absl::InvalidArgumentError("argv is empty: nothing to run");
  if (o.argv[0].empty()) return absl::InvalidArgumentError("argv[0] is empty");
  for (std::size_t i = 0; i < o.argv.size(); ++i) {
    if (o.argv[i].find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("argv[", i, "] contains a NUL byte"));
    }
  }
  if (o.cwd.find('\0') != std::string::npos) return absl::InvalidArgumentError("cwd contains a NUL byte");
  if (!o.cwd.empty() && o.cwd[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "cwd '", absl::CEscape(o.cwd), "' is relative; give an absolute path inside the sandbox"));
  }
  for (const auto& [k, v] : o.env) {
    if (k.empty()) return absl::InvalidArgumentError("environment variable with an empty name");
    if (k.find('=') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("environment name '", k, "' contains '='"));
    }
    if (k.find('\0') != std::string::npos || v.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("environment variable '", absl::CEscape(k), "' contains a NUL byte"));
    }
  }
  if (o.pty) {
    if (absl::Status st = CheckTerminalSize(o.pty->cols, o.pty->rows); !st.ok()) return st;
  }
  if (o.setup_timeout_ms == 0) return absl::InvalidArgumentError("setup_timeout_ms must be positive");
  if (o.output_window_bytes < kMinOutputWindowBytes || o.output_window_bytes > kMaxOutputWindowBytes) {
    return absl::InvalidArgumentError(absl::StrCat("output_window_bytes must be ", kMinOutputWindowBytes,
                                                   "..", kMaxOutputWindowBytes));
  }
  if (o.output_mode == OutputMode::kStream && o.max_output_bytes != 0) {
    return absl::InvalidArgumentError("max_output_bytes limits finite output; it cannot be combined with stream mode");
  }
  if (o.max_output_bytes > kMaxFiniteOutputBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_output_bytes must be 1..", kMaxFiniteOutputBytes, " (or 0 for the maximum)"));
  }
  if (o.ring_bytes != 0 && (o.ring_bytes < kMinRingBytes || o.ring_bytes > kMaxRingBytes)) {
    return absl::InvalidArgumentError(absl::StrCat("ring_bytes must be ", kMinRingBytes, "..", kMaxRingBytes,
                                                   " (or 0 for 1 MiB)"));
  }
  return absl::OkStatus();
}

// kNotFound and kPermissionDenied from Start mean the child's executable or
// cwd (the CLI's 127 and 126); a setup step that fails that way (a missing
// supervisor binary, a refused directory) is tether's failure instead.
absl::Status SetupError(absl::Status st) {
  if (absl::IsNotFound(st) || absl::IsPermissionDenied(st)) {
    return absl::FailedPreconditionError(st.message());
  }
  return st;
}

absl::Status LaunchFailure(const wire::Exit& e) {
  const std::string msg = e.message().empty() ? "the process could not be started" : e.message();
  switch (e.failure()) {
    case wire::ERROR_INVALID_ARGUMENT: return absl::InvalidArgumentError(msg);
    case wire::ERROR_CANCELLED: return absl::CancelledError(msg);
    case wire::ERROR_RESOURCE_EXHAUSTED: return absl::ResourceExhaustedError(msg);
    default: return e.code() == 126 ? absl::PermissionDeniedError(msg) : absl::NotFoundError(msg);
  }
}

ExitStatus ToExitStatus(const wire::Exit& e) {
  ExitStatus s;
  if (e.how_case() == wire::Exit::kSignal) {
    s.signal = e.signal();
  } else {
    s.code = e.code();
  }
  s.core_dumped = e.core_dumped();
  s.output_cut = e.output_cut();
  s.user_us = e.rusage().user_us();
  s.system_us = e.rusage().system_us();
  s.max_rss_kib = e.rusage().max_rss_kib();
  return s;
}

// Runs `op` until `deadline`; past it the operation is cancelled (every
// channel stops at cancellation) and the result is kDeadlineExceeded.
template <typename T>
asio::awaitable<absl::StatusOr<T>> WithDeadline(asio::awaitable<absl::StatusOr<T>> op,
                                                std::chrono::steady_clock::time_point deadline,
                                                std::string_view what) {
  using namespace asio::experimental::awaitable_operators;
  asio::steady_timer timer(co_await asio::this_coro::executor, deadline);
  auto raced = co_await (std::move(op) || timer.async_wait(asio::as_tuple(asio::use_awaitable)));
  if (raced.index() == 0) co_return std::get<0>(std::move(raced));
  co_return absl::UnavailableError(absl::StrCat(std::string(what), " did not finish within the time limit"));
}

// Checks that a reference names this sandbox's own private paths: the state
// directory directly under the private state root with a launch id for its
// name, and a supervisor installed in the private bin directory. A holder
// who edits the JSON cannot make the host run another program or touch
// another directory.
absl::Status CheckReferencePaths(const ProcessReference& ref, const SandboxInfo& info) {
  const auto split = [](const std::string& path) {
    const std::size_t slash = path.rfind('/');
    if (slash == std::string::npos) return std::make_pair(std::string(), path);
    return std::make_pair(path.substr(0, slash), path.substr(slash + 1));
  };
  const auto name_ok = [](const std::string& name, std::size_t max) {
    if (name.empty() || name.size() > max || name == "." || name == "..") return false;
    for (char c : name) {
      if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
            c == '_' || c == '.')) {
        return false;
      }
    }
    return true;
  };
  const auto [state_parent, launch_id] = split(ref.state_dir);
  if (state_parent != info.state_root || !name_ok(launch_id, 64) || launch_id.find('.') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "process reference: state_dir '", absl::CEscape(ref.state_dir), "' is not a process directory under ",
        info.state_root, " (the reference was altered or is for another sandbox)"));
  }
  const auto [bin_parent, bin_name] = split(ref.supervisor);
  if (bin_parent != info.bin_dir || !name_ok(bin_name, 200) ||
      bin_name.rfind("tether-supervisor-", 0) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "process reference: supervisor '", absl::CEscape(ref.supervisor), "' is not a supervisor installed in ",
        info.bin_dir, " (the reference was altered or is for another sandbox)"));
  }
  return absl::OkStatus();
}

// Our index of a wire stream: 0 is stdout, or the terminal with a pty.
int StreamIndex(wire::Stream s, bool pty) {
  if (s == wire::STREAM_STDERR) return 1;
  if (s == (pty ? wire::STREAM_PTY : wire::STREAM_STDOUT)) return 0;
  return -1;
}

}  // namespace

absl::StatusOr<int> SignalNumber(std::string_view s) {
  static constexpr std::pair<std::string_view, int> kNames[] = {
      {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"KILL", SIGKILL}, {"USR1", SIGUSR1},
      {"USR2", SIGUSR2}, {"TERM", SIGTERM}, {"CONT", SIGCONT}, {"STOP", SIGSTOP}, {"TSTP", SIGTSTP},
      {"ALRM", SIGALRM}, {"PIPE", SIGPIPE}, {"WINCH", SIGWINCH}, {"ABRT", SIGABRT}, {"TTIN", SIGTTIN},
      {"TTOU", SIGTTOU}};
  int n = 0;
  if (absl::SimpleAtoi(std::string(s), &n) && n > 0 && n < 65) return n;
  const std::string_view name = s.substr(0, 3) == "SIG" ? s.substr(3) : s;
  for (const auto& [k, v] : kNames) {
    if (name == k) return v;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown signal '", absl::CEscape(std::string(s)), "'"));
}

absl::Status CheckTerminalSize(unsigned cols, unsigned rows) {
  if (cols == 0 || rows == 0 || cols > kMaxTerminalCells || rows > kMaxTerminalCells) {
    return absl::InvalidArgumentError(
        absl::StrCat("terminal size ", cols, "x", rows, " is outside 1..", kMaxTerminalCells));
  }
  return absl::OkStatus();
}

struct Process::State : std::enable_shared_from_this<Process::State> {
  explicit State(const asio::any_io_executor& ex) : cond(ex), close_timer(ex), ping_timer(ex) {}

  absl::Status InputAllowed() const;
  asio::awaitable<bool> Reconnect();
  void ResendAfterReconnect(const wire::Welcome& welcome);
  asio::awaitable<absl::Status> AwaitInputTurn(std::size_t bytes, bool is_close);
  OutputChunk TakeBytes();
  std::optional<OutputChunk> DecodeCarry(int i, bool final);
  bool NothingQueued(int i) const;

  std::shared_ptr<Session> session;
  internal::Condition cond;  // notified on every state change
  asio::steady_timer close_timer;
  asio::steady_timer ping_timer;  // cancelled at exit or failure
  std::int32_t pid = -1;
  std::chrono::milliseconds ping_interval{10000};

  // Output, per stream index 0 (stdout) and 1 (stderr).
  std::deque<OutputChunk> queue;
  std::uint64_t received[2] = {0, 0};
  // The highest offset per stream the supervisor sent on this attachment
  // (from the Hello's resume offsets on): what its window counts.
  std::uint64_t seen[2] = {0, 0};
  std::uint64_t consumed[2] = {0, 0};
  std::uint64_t acked[2] = {0, 0};
  bool eof[2] = {false, false};
  std::size_t window = kDefaultOutputWindowBytes;  // credit, shared by both streams
  std::size_t unread_limit = kDefaultOutputWindowBytes;  // without backpressure
  std::size_t queued_bytes = 0;                          // in `queue`
  bool backpressure = true;
  bool text = false;
  std::uint64_t output_left = std::numeric_limits<std::uint64_t>::max();  // finite mode's cap
  std::uint64_t finite_limit = 0;  // finite mode's cap; 0 in stream mode
  // Set once output observation stops (OUTPUT_CAPACITY); later output is
  // discarded but still acknowledged, so the child never blocks on us.
  absl::Status output_error;
  // Text mode: raw bytes taken from the queue but not yet decoded (an
  // incomplete character, or what did not fit in the last chunk).
  std::string carry[2];
  std::uint64_t carry_offset[2] = {0, 0};

  // Stdin.
  bool stdin_pipe = false;
  bool pty = false;
  std::uint64_t stdin_sent = 0;
  std::uint64_t stdin_acked = 0;
  std::uint64_t stdin_window = 0;
  bool stdin_eof_sent = false;
  bool stdin_eof_acked = false;
  bool stdin_closed_by_child = false;
  // Writes (and a close) waiting their turn, in call order.
  std::list<std::uint64_t> input_queue;
  std::uint64_t next_ticket = 0;
  std::size_t input_queue_bytes = 0;
  // OUTCOME_UNKNOWN once the connection failed with input unacknowledged.
  absl::Status input_error;

  std::optional<ExitStatus> exit;
  wire::Ticket ticket;  // the newest reference ticket (Welcome, Pong)
  bool exit_acked = false;
  bool ack_exit_on_arrival = false;  // the handle was dropped with everything read
  bool control = false;  // a control handle (ReopenOptions::control)
  absl::Status failed;  // the attachment broke (set once)
  bool disconnected = false;
  bool output_gap = false;

  // What a reference needs to find this process again.
  std::string provider, sandbox, supervisor, state_dir, secret;

  // The one terminate request of this handle and, once known, its outcome.
  std::optional<std::uint64_t> terminate_id;
  std::optional<absl::Status> terminate_result;
  std::shared_ptr<asio::steady_timer> terminate_deadline;

  // Replies to StatusRequest, by request id (one entry per waiting caller);
  // a request re-sent after a reconnect answers under its first id.
  std::map<std::uint64_t, wire::ProcessState> status_replies;
  std::map<std::uint64_t, std::uint64_t> status_alias;  // new request id -> first id
  unsigned terminate_grace_ms = 0;

  // Reconnecting: when the channel fails before the exit, attach again
  // through a new bridge and continue where the acknowledged offsets stand.
  Transport* transport = nullptr;
  bool reconnect = false;
  std::chrono::milliseconds reconnect_timeout{30000};
  std::uint64_t reconnects = 0;
  // Copies of sent, unacknowledged input (offsets stdin_copy_base..stdin_sent),
  // for a resend after a reconnect.
  std::string stdin_unacked;
  std::uint64_t stdin_copy_base = 0;

  void Fail(absl::Status st) {
    if (failed.ok()) failed = std::move(st);
    if (input_error.ok() && (stdin_sent != stdin_acked || (stdin_eof_sent && !stdin_eof_acked))) {
      input_error = OutcomeUnknownError(absl::StrCat(
          "the connection failed with ", stdin_sent - stdin_acked, " bytes of input",
          stdin_eof_sent && !stdin_eof_acked ? " and EOF" : "",
          " unacknowledged; whether they reached the process is unknown, and input is disabled (never retried): ",
          std::string(failed.message())));
    }
    ping_timer.cancel();
    session->Close();
    cond.NotifyAll();
  }

  // What we acknowledge: what the application consumed, or, without
  // backpressure or once observation stopped, everything received.
  // (Never below an earlier ack: a gap moves acked past what was consumed.)
  std::uint64_t AckPosition(int i) const {
    return std::max(acked[i], backpressure && output_error.ok() ? consumed[i] : received[i]);
  }

  void SendAck(bool exit_ack) {
    wire::Envelope env;
    wire::Ack* a = env.mutable_ack();
    acked[0] = AckPosition(0);
    acked[1] = AckPosition(1);
    if (pty) {
      a->set_pty_offset(acked[0]);
    } else {
      a->set_stdout_offset(acked[0]);
    }
    a->set_stderr_offset(acked[1]);
    a->set_window_bytes(window);
    a->set_exit(exit_ack);
    session->Send(std::move(env));
  }

  // The exit reached its reader: the supervisor may clean up. It closes the
  // attachment once it has the ack; if it does not, we do.
  void AckExit() {
    if (exit_acked || !exit || session->closed()) return;
    exit_acked = true;
    ping_timer.cancel();
    SendAck(true);
    close_timer.expires_after(kCloseAfterExitTimeout);
    close_timer.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (!ec) self->session->Close();
    });
  }

  // Returns credit in quarter-window steps (few acks), and whenever the
  // consumer has caught up (so the ring never waits on a partial step).
  void MaybeAck() {
    if (exit || !failed.ok() || disconnected) return;
    const std::uint64_t unacked = AckPosition(0) - acked[0] + AckPosition(1) - acked[1];
    if (unacked > 0 && (unacked >= window / 4 || queue.empty())) SendAck(false);
  }

  void StopOutput(absl::Status why) {
    if (output_error.ok()) output_error = std::move(why);
  }

  // Queues received output for Read(), within the unread limits.
  // Takes `data` by value: a received frame's data is moved, not copied.
  void Enqueue(int i, std::uint64_t offset, std::string data) {
    if (!output_error.ok() || data.empty()) return;  // observation stopped: discarded
    if (data.size() > output_left) {
      data.resize(static_cast<std::size_t>(output_left));
      Enqueue(i, offset, std::move(data));
      StopOutput(OutputCapacityError(absl::StrCat(
          "finite output reached its limit of ", finite_limit,
          " bytes; the rest is discarded and the process keeps running (start it in stream mode to read "
          "all of its output)")));
      return;
    }
    if (!backpressure && (queued_bytes + data.size() > unread_limit || queue.size() >= kMaxUnreadChunks)) {
      StopOutput(OutputCapacityError(absl::StrCat(
          "more than ", unread_limit, " bytes or ", kMaxUnreadChunks,
          " chunks of output went unread; observation stopped after the queued chunks (the process keeps "
          "running; read faster or start it with backpressure)")));
      return;
    }
    output_left -= data.size();
    queued_bytes += data.size();
    const StreamId stream = i == 1 ? StreamId::kStderr : pty ? StreamId::kPty : StreamId::kStdout;
    if (queue.size() + 2 >= kMaxUnreadChunks) {
      // Keep the chunk count bounded: join the newest chunk of this stream
      // (stdout and stderr are not ordered against each other).
      for (auto it = queue.rbegin(); it != queue.rend(); ++it) {
        if (it->stream == stream) {
          it->bytes.append(data);
          return;
        }
      }
    }
    queue.push_back(OutputChunk{stream, offset, std::move(data)});
  }

  absl::Status HandleOutput(wire::Output& o) {
    const int i = StreamIndex(o.stream(), pty);
    if (i < 0) return absl::DataLossError(absl::StrCat("output on unknown stream ", o.stream()));
    const std::uint64_t end = o.offset() + o.data().size();
    if (eof[i] && end > received[i]) return absl::DataLossError("output after the stream's EOF");
    if (o.offset() > received[i]) {
      return absl::DataLossError(absl::StrCat("output at offset ", o.offset(), " skips bytes after ",
                                              received[i], " without reporting a gap"));
    }
    seen[i] = std::max(seen[i], end);
    if (end > received[i]) {
      const std::size_t skip = static_cast<std::size_t>(received[i] - o.offset());  // replayed prefix
      // The supervisor may run at most `window` ahead of our last acks, both
      // streams together, counting what it sent on this attachment (after a
      // reattach it resends from our acks, and we may hold more than that).
      const std::uint64_t other = seen[1 - i] > acked[1 - i] ? seen[1 - i] - acked[1 - i] : 0;
      if (end - acked[i] + other > window) {
        return absl::DataLossError(absl::StrCat(
            "supervisor sent beyond the ", window, "-byte output window it was granted"));
      }
      const std::uint64_t start = received[i];
      received[i] = end;
      std::string data = std::move(*o.mutable_data());
      if (skip > 0) data.erase(0, skip);
      Enqueue(i, start, std::move(data));
      MaybeAck();
    }
    if (o.eof()) {
      if (end != received[i]) return absl::DataLossError("output EOF at an offset before the received end");
      eof[i] = true;
    }
    return absl::OkStatus();
  }

  absl::Status Handle(wire::Envelope& env) {
    if (env.generation() < session->generation()) {
      return absl::OkStatus();  // replayed by a text channel from an earlier attachment
    }
    if (env.generation() != session->generation()) {
      return absl::DataLossError(absl::StrCat("frame of generation ", env.generation(), " on attachment ",
                                              session->generation()));
    }
    switch (env.body_case()) {
      case wire::Envelope::kOutput:
        return HandleOutput(*env.mutable_output());
      case wire::Envelope::kStdinAck: {
        const wire::StdinAck& a = env.stdin_ack();
        if (a.offset() < stdin_acked) return absl::OkStatus();  // an old ack, replayed
        if (a.offset() > stdin_sent) {
          return absl::DataLossError(absl::StrCat("stdin ack at ", a.offset(), ", but ", stdin_sent,
                                                  " bytes were sent and ", stdin_acked, " acked"));
        }
        if (a.offset() > stdin_copy_base) {
          const std::uint64_t drop = std::min<std::uint64_t>(a.offset() - stdin_copy_base, stdin_unacked.size());
          stdin_unacked.erase(0, static_cast<std::size_t>(drop));
          stdin_copy_base += drop;
        }
        stdin_acked = a.offset();
        stdin_eof_acked = stdin_eof_acked || a.eof();
        stdin_closed_by_child = stdin_closed_by_child || a.closed_by_child();
        return absl::OkStatus();
      }
      case wire::Envelope::kExit:
        if (!eof[0] || !eof[1]) return absl::DataLossError("exit before the end of output");
        if (!exit) {
          exit = ToExitStatus(env.exit());
          if (terminate_deadline) terminate_deadline->cancel();
          // Acknowledged only once delivered to a reader (Wait), so that the
          // supervisor keeps it, with any output, for whoever reads it.
          if (ack_exit_on_arrival) AckExit();
        }
        return absl::OkStatus();
      case wire::Envelope::kOutputGap: {
        const wire::OutputGap& g = env.output_gap();
        const int i = StreamIndex(g.stream(), pty);
        // (After a reconnect the supervisor resumes from our acknowledged
        // offset, which may be behind what we already hold.)
        if (i < 0 || g.from() < acked[i] || g.from() > received[i] || g.to() < g.from()) {
          return absl::DataLossError("output gap that does not start where our output ends");
        }
        if (g.to() <= received[i]) return absl::OkStatus();  // nothing we lack
        // Bytes evicted while nobody was attached: lost, and said so.
        if (queue.empty() && carry[i].empty()) consumed[i] = g.to();
        received[i] = acked[i] = std::max(acked[i], g.to());
        output_gap = true;
        return absl::OkStatus();
      }
      case wire::Envelope::kError:
        if (env.error().fatal()) return StatusFromWireError(env.error());
        if (env.error().code() == wire::ERROR_INPUT_CLOSED) stdin_closed_by_child = true;
        return absl::OkStatus();
      case wire::Envelope::kStatus:
        if (auto a = status_alias.find(env.request_id()); a != status_alias.end()) {
          if (auto it = status_replies.find(a->second); it != status_replies.end()) it->second = env.status();
        }
        if (auto it = status_replies.find(env.request_id()); it != status_replies.end()) {
          it->second = env.status();
        }
        if (terminate_id && env.request_id() == *terminate_id && !terminate_result) {
          terminate_result = absl::OkStatus();
          if (terminate_deadline) terminate_deadline->cancel();
        }
        return absl::OkStatus();
      case wire::Envelope::kPong:
        if (env.pong().ticket().expires_at() > ticket.expires_at()) ticket = env.pong().ticket();
        return absl::OkStatus();
      case wire::Envelope::kWelcome:
        return absl::OkStatus();  // this attachment's welcome again: a text channel's replay
      default:
        return absl::DataLossError(absl::StrCat("unexpected ", std::string(protocol::BodyName(env)),
                                                " from the supervisor"));
    }
  }

  // Common to Start and Reopen once the Welcome is in.
  absl::Status Begin(const wire::Welcome& welcome) {
    pid = welcome.state().pid();
    if (welcome.has_ticket()) ticket = welcome.ticket();
    stdin_window = welcome.stdin_window_bytes();
    if (stdin_pipe && stdin_window < kMaxWriteBytes) {
      return absl::DataLossError(absl::StrCat("supervisor offers a stdin window of ", stdin_window,
                                              " bytes, below one write"));
    }
    auto ex = close_timer.get_executor();
    asio::co_spawn(ex, Pump(), asio::detached);
    asio::co_spawn(ex, Keepalive(), asio::detached);
    return absl::OkStatus();
  }

  // The supervisor frees an attachment that is silent for a lease; a quiet
  // process (nothing to ack, no input) must not lose its attachment.
  asio::awaitable<void> Keepalive() {
    auto self = shared_from_this();
    std::uint64_t nonce = 0;
    while (!session->closed() && !exit_acked) {
      ping_timer.expires_after(ping_interval);
      co_await ping_timer.async_wait(asio::as_tuple(asio::use_awaitable));
      if (session->closed() || exit_acked) break;
      wire::Envelope env;
      env.mutable_ping()->set_nonce(++nonce);
      session->Send(std::move(env));
    }
  }

  asio::awaitable<void> Pump() {
    auto self = shared_from_this();
    while (true) {
      absl::StatusOr<wire::Envelope> env = co_await session->Receive();
      if (!env.ok()) {
        // The channel ending after a confirmed exit is the normal end.
        if (exit) break;
        if (reconnect && !disconnected && absl::IsUnavailable(env.status()) && co_await Reconnect()) continue;
        Fail(env.status());
        break;
      }
      if (absl::Status st = Handle(*env); !st.ok()) {
        Fail(st);
        break;
      }
      cond.NotifyAll();
    }
    close_timer.cancel();
    ping_timer.cancel();
    if (terminate_deadline) terminate_deadline->cancel();
    session->Close();
    cond.NotifyAll();
  }
};

namespace {
asio::awaitable<absl::StatusOr<wire::Welcome>> Attach(Transport& transport, Process::State& state,
                                                      std::vector<std::string> command,
                                                      std::string first, wire::Hello hello);
}  // namespace

asio::awaitable<bool> Process::State::Reconnect() {
  auto self = shared_from_this();
  const auto deadline = std::chrono::steady_clock::now() + reconnect_timeout;
  auto backoff = std::chrono::milliseconds(20);
  absl::Status last;
  while (std::chrono::steady_clock::now() < deadline && !disconnected && !exit) {
    std::vector<std::string> command;
    command.push_back(supervisor);
    command.push_back("bridge");
    if (transport->tunnel() == TunnelMode::kText) command.push_back("--text");
    command.push_back(state_dir);
    wire::Hello hello;
    hello.set_secret(secret);
    hello.set_zstd(!transport->can_connect());
    if (pty) {
      hello.set_pty_offset(acked[0]);
    } else {
      hello.set_stdout_offset(acked[0]);
    }
    hello.set_stderr_offset(acked[1]);
    hello.set_window_bytes(window);
    *hello.mutable_ticket() = ticket;
    absl::StatusOr<wire::Welcome> welcome =
        co_await Attach(*transport, *this, std::move(command), std::string(), std::move(hello));
    if (welcome.ok()) {
      ++reconnects;
      if (welcome->has_ticket()) ticket = welcome->ticket();
      ResendAfterReconnect(*welcome);
      cond.NotifyAll();
      co_return true;
    }
    last = welcome.status();
    if (absl::IsNotFound(last) || absl::IsUnauthenticated(last)) break;  // gone: nothing to reattach to
    asio::steady_timer t(close_timer.get_executor(), backoff);
    co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
  (void)last;
  co_return false;
}

// The new attachment knows what the supervisor holds: send again what it
// lacks (it drops what it already has, by offset and id).
void Process::State::ResendAfterReconnect(const wire::Welcome& welcome) {
  stdin_window = welcome.stdin_window_bytes();
  const std::uint64_t have = std::max(welcome.state().stdin_received(), stdin_copy_base);
  for (std::uint64_t off = have; off < stdin_sent;) {
    const std::size_t from = static_cast<std::size_t>(off - stdin_copy_base);
    const std::size_t n = std::min<std::size_t>(kMaxWriteBytes, stdin_unacked.size() - from);
    if (n == 0) break;
    wire::Envelope env;
    env.mutable_stdin_data()->set_offset(off);
    env.mutable_stdin_data()->set_data(stdin_unacked.substr(from, n));
    session->Send(std::move(env));
    off += n;
  }
  if (stdin_eof_sent && !welcome.state().stdin_eof_received()) {
    wire::Envelope env;
    env.mutable_stdin_eof()->set_offset(stdin_sent);
    session->Send(std::move(env));
  }
  if (terminate_id && !terminate_result) {
    wire::Envelope env;
    env.mutable_terminate()->set_grace_ms(terminate_grace_ms);
    terminate_id = session->Send(std::move(env));
  }
  for (auto& [id, reply] : status_replies) {
    if (reply.phase() != wire::ProcessState::PHASE_UNSPECIFIED) continue;
    wire::Envelope env;
    env.mutable_status_request();
    status_alias[session->Send(std::move(env))] = id;
  }
  // Credit as it stands (the Hello carried our acknowledged offsets).
  SendAck(false);
}

Process::Process(std::shared_ptr<State> state) : state_(std::move(state)) {}

Process::~Process() {
  State& s = *state_;
  s.reconnect = false;  // nobody holds this attachment any more: never reattach it
  if (!s.failed.ok() || s.session->closed() || s.exit_acked) return;  // finishing, or finished
  if (s.control) {
    s.session->Close();  // requests only: nothing to finish
    return;
  }
  const bool all_read = s.queue.empty() && s.carry[0].empty() && s.carry[1].empty();
  if (s.eof[0] && s.eof[1] && all_read && !s.disconnected) {
    // Every byte was read; the exit record is here or follows the output.
    // The application is done with it: acknowledge it (so the supervisor
    // cleans up now, not after its linger), within a bound.
    if (s.exit) {
      s.AckExit();
      return;
    }
    s.ack_exit_on_arrival = true;
    auto state = state_;
    s.close_timer.expires_after(kCloseAfterExitTimeout);
    s.close_timer.async_wait([state](boost::system::error_code ec) {
      if (!ec) state->session->Close();
    });
    return;
  }
  // Otherwise dropping the handle ends only this attachment; the child (or
  // its exit record and unread output) stays for a later reopen.
  s.session->Close();
}

std::int32_t Process::pid() const { return state_->pid; }
bool Process::output_gap() const { return state_->output_gap; }
bool Process::has_pty() const { return state_->pty; }
std::size_t Process::unread_bytes() const { return state_->queued_bytes; }
std::uint64_t Process::reconnects() const { return state_->reconnects; }
std::size_t Process::unread_chunks() const { return state_->queue.size(); }

namespace {

// Runs `command` (launch or bridge) through the transport, sends `first`
// (the Launch frame, or nothing), and performs the handshake.
asio::awaitable<absl::StatusOr<wire::Welcome>> Attach(Transport& transport, Process::State& state,
                                                      std::vector<std::string> command,
                                                      std::string first, wire::Hello hello) {
  state.seen[0] = state.pty ? hello.pty_offset() : hello.stdout_offset();
  state.seen[1] = hello.stderr_offset();
  if (transport.tunnel() == TunnelMode::kExchange) {
    // One-shot commands only: start a relay (with the launch, or beside the
    // daemon) and poll it. The frames that carry the secret (the Launch and
    // the Hello) go in a private file, never in a command line (provider
    // logs, /proc/PID/cmdline); the supervisor reads it once and removes it.
    const std::string id = absl::BytesToHexString(RandomBytes(8));
    state.session = Session::Create(
        transport.executor(), internal::MakeExchangeChannel(transport, state.supervisor, state.state_dir, id));
    const std::string init_path = absl::StrCat(state.state_dir, ".x-", id, ".init");
    std::string init = first;
    init += state.session->PrepareHello(std::move(hello));
    if (absl::Status st = co_await transport.PutFile(init_path, init, 0600); !st.ok()) co_return st;
    std::vector<std::string> start;
    start.push_back(state.supervisor);
    if (!first.empty()) {
      start.push_back("launch");
      start.push_back("--exchange");
      start.push_back(id);
    } else {
      start.push_back("relay");
      start.push_back(state.state_dir);
      start.push_back(id);
    }
    start.push_back("@" + init_path);
    absl::StatusOr<std::string> out = co_await internal::RunOneShot(transport, std::move(start));
    if (!out.ok()) co_return out.status();
    if (!absl::StrContains(*out, "tether-relay-ok")) {
      // The launcher reports a refused launch as an armored error frame.
      protocol::ArmorDecoder dec(protocol::ArmorDirection::kToHost);
      std::string_view text = *out;
      std::string frame;
      while (dec.Decode(&text, &frame) == protocol::DecodeResult::kFrame) {
        absl::StatusOr<std::string> payload = protocol::DecodeWholeFrame(frame);
        if (!payload.ok()) continue;
        absl::StatusOr<wire::Envelope> env = protocol::ParseEnvelope(*payload);
        if (env.ok() && env->has_error()) co_return StatusFromWireError(env->error());
      }
      if (absl::StrContains(*out, "tether-relay-gone")) co_return absl::NotFoundError("the process is gone");
      co_return absl::UnavailableError(absl::StrCat("could not start the exchange relay: ", *out));
    }
    co_return co_await state.session->AwaitWelcome();
  }
  if (transport.can_connect() && transport.tunnel() == TunnelMode::kBinary) {
    // This machine: `launch --direct` starts the daemon and exits, and we
    // connect to its socket ourselves (no bridge process in the data path).
    std::unique_ptr<Channel> launcher;
    if (!first.empty()) {
      command.push_back("--direct");
      absl::StatusOr<std::unique_ptr<Channel>> l = co_await transport.Exec(std::move(command));
      if (!l.ok()) co_return l.status();
      launcher = *std::move(l);
      if (absl::Status st = co_await launcher->Write(first); !st.ok()) co_return st;
      // Nothing on success; an error frame when the launch was refused.
      protocol::EnvelopeDecoder dec;
      char buf[4096];
      while (true) {
        absl::StatusOr<std::size_t> n = co_await launcher->ReadSome({buf, sizeof buf});
        if (!n.ok()) co_return n.status();
        if (*n == 0) {
          if (!dec.idle()) co_return absl::DataLossError("launch --direct ended in the middle of a frame");
          break;
        }
        std::string_view in(buf, *n);
        wire::Envelope env;
        absl::StatusOr<bool> got = dec.Next(&in, &env);
        if (got.ok() && *got && env.has_error()) co_return StatusFromWireError(env.error());
        if (!got.ok() || *got) co_return absl::DataLossError("launch --direct wrote something other than an error");
      }
    }
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await transport.Connect(state.state_dir);
    if (!ch.ok()) {
      if (!launcher) co_return ch.status();
      const std::string diag = launcher->Diagnostics();
      co_return absl::Status(ch.status().code(),
                             absl::StrCat("the launch left no supervisor to connect to: ",
                                          std::string(ch.status().message()),
                                          diag.empty() ? "" : absl::StrCat("; its stderr: ", diag)));
    }
    state.session = Session::Create(transport.executor(), *std::move(ch));
    co_return co_await state.session->Handshake(std::move(hello));
  }
  absl::StatusOr<std::unique_ptr<Channel>> channel = co_await transport.Exec(std::move(command));
  if (!channel.ok()) co_return channel.status();
  if (transport.tunnel() == TunnelMode::kText) {
    // Frames as armored lines, also the Launch frame.
    *channel = internal::MakeArmoredChannel(*std::move(channel));
  }
  state.session = Session::Create(transport.executor(), *std::move(channel));
  if (!first.empty()) state.session->SendFrame(std::move(first));
  co_return co_await state.session->Handshake(std::move(hello));
}

}  // namespace

namespace {

asio::awaitable<bool> Cancelled() {
  asio::cancellation_state cs = co_await asio::this_coro::cancellation_state;
  co_return cs.cancelled() != asio::cancellation_type::none;
}

// Waits for `deadline`; when it passes, also closes the session, so that a
// channel that ignores cancellation still ends its pending read (the
// Channel contract: Close() always ends pending operations).
asio::awaitable<void> CloseAtDeadline(asio::steady_timer& deadline, Process::State& state) {
  auto [ec] = co_await deadline.async_wait(asio::as_tuple(asio::use_awaitable));
  if (!ec && state.session) state.session->Close();
}

}  // namespace

asio::awaitable<absl::StatusOr<std::unique_ptr<Process>>> Process::Start(Transport& transport,
                                                                           StartOptions options) {
  if (absl::Status st = ValidateOptions(options); !st.ok()) co_return st;
  // Setup runs as its own coroutine so that an abort (the caller's
  // cancellation, forwarded by co_spawn) can be answered without touching
  // the caller's cancellation settings.
  auto ex = co_await asio::this_coro::executor;
  co_return co_await asio::co_spawn(ex, StartSetup(transport, std::move(options)), asio::use_awaitable);
}

asio::awaitable<absl::StatusOr<std::unique_ptr<Process>>> Process::StartSetup(Transport& transport,
                                                                                StartOptions options) {
  co_await asio::this_coro::throw_if_cancelled(false);
  const auto aborted_before_dispatch = [] {
    return WaitAbortedError("start was aborted before the launch was dispatched; nothing was started");
  };
  // Every native call of the setup (probe, upload, launch, handshake) is
  // inside the one setup timeout.
  const auto setup_deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options.setup_timeout_ms);
  absl::StatusOr<SandboxInfo> info =
      co_await WithDeadline(transport.Probe(), setup_deadline, "probing the sandbox");
  if (co_await Cancelled()) co_return aborted_before_dispatch();
  if (!info.ok()) co_return SetupError(info.status());
  absl::StatusOr<std::string> supervisor =
      co_await WithDeadline(InstallSupervisor(transport, *info), setup_deadline, "installing the supervisor");
  if (co_await Cancelled()) co_return aborted_before_dispatch();
  if (!supervisor.ok()) co_return SetupError(supervisor.status());

  const std::string secret = RandomBytes(kSecretBytes);
  wire::Envelope launch_env;
  wire::Launch* l = launch_env.mutable_launch();
  const std::string launch_id = absl::BytesToHexString(RandomBytes(kLaunchIdBytes));
  l->set_launch_id(launch_id);
  l->set_secret(secret);
  for (const std::string& a : options.argv) l->add_argv(a);
  l->set_cwd(options.cwd);
  for (const auto& [k, v] : options.env) {
    wire::EnvVar* e = l->add_env();
    e->set_name(k);
    e->set_value(v);
  }
  l->set_inherit_env(options.inherit_env);
  l->set_stdin_mode(options.stdin_pipe ? wire::STDIN_PIPE : wire::STDIN_CLOSED);
  if (options.pty) {
    l->mutable_pty()->set_cols(options.pty->cols);
    l->mutable_pty()->set_rows(options.pty->rows);
  }
  l->set_state_dir(absl::StrCat(info->state_root, "/", launch_id));
  l->set_lease_ms(options.lease_ms);
  l->set_linger_ms(options.linger_ms);
  l->set_ring_bytes(options.ring_bytes);
  l->set_end_with_host(options.end_with_host);
  if (launch_env.ByteSizeLong() + 64 > protocol::kMaxPayloadBytes) {
    co_return absl::InvalidArgumentError(absl::StrCat(
        "argv, cwd and environment take ", launch_env.ByteSizeLong(), " bytes; the limit is ",
        protocol::kMaxPayloadBytes - 64));
  }

  auto state = std::make_shared<State>(transport.executor());
  state->provider = std::string(transport.name());
  state->sandbox = transport.sandbox_id();
  state->supervisor = *supervisor;
  state->state_dir = l->state_dir();
  state->secret = secret;
  // (a named vector: g++ 12 miscompiles braced temporaries in co_await operands)
  std::vector<std::string> command;
  command.push_back(*supervisor);
  command.push_back("launch");
  if (transport.tunnel() == TunnelMode::kText) command.push_back("--text");
  wire::Hello hello;
  hello.set_secret(secret);
  // zstd where it pays: channels off this machine (the supervisor sends
  // frames that do not shrink raw, and stops trying on incompressible output).
  hello.set_zstd(!transport.can_connect());
  // The credit is shared by both streams.
  const std::size_t window = options.output_window_bytes;
  hello.set_window_bytes(window);
  // Setup deadline: the attach races a timer; whichever loses is cancelled
  // (the channel's pending read with it), so a stuck channel cannot hold us.
  absl::StatusOr<wire::Welcome> welcome = absl::UnavailableError("setup not finished");
  bool timed_out = false;
  {
    using namespace asio::experimental::awaitable_operators;
    asio::steady_timer deadline(transport.executor(), setup_deadline);
    auto raced = co_await (Attach(transport, *state, std::move(command), protocol::EncodeEnvelope(launch_env),
                                  std::move(hello)) ||
                           CloseAtDeadline(deadline, *state));
    if (raced.index() == 0) {
      welcome = std::get<0>(std::move(raced));
    } else {
      timed_out = true;
    }
  }
  const bool aborted = co_await Cancelled();
  if (aborted) {
    // Abandoned after dispatch: the marker below must still be written.
    co_await asio::this_coro::reset_cancellation_state();
  }
  if ((timed_out || aborted) && state->session) state->session->Close();
  if (timed_out || aborted || (!welcome.ok() && absl::IsUnavailable(welcome.status()))) {
    // The Launch was dispatched and its fate is unknown: make sure a delayed
    // one never starts the child. Never launch again.
    absl::Status marker = co_await transport.PutFile(state->state_dir + ".cancel", "", 0600);
    co_return OutcomeUnknownError(absl::StrCat(
        "setup ",
        aborted     ? std::string("was aborted after the launch was dispatched")
        : timed_out ? absl::StrCat("did not finish within ", options.setup_timeout_ms, " ms")
                    : absl::StrCat("lost its connection: ", std::string(welcome.status().message())),
        marker.ok() ? "; a cancellation marker stops a delayed launch from starting the process"
                    : absl::StrCat("; the cancellation marker could not be written: ",
                                   std::string(marker.message())),
        "; it was not started again"));
  }
  if (!welcome.ok()) co_return SetupError(welcome.status());

  if (welcome->state().phase() == wire::ProcessState::PHASE_FAILED) {
    // Nothing runs; acknowledge the record so the daemon cleans up now.
    wire::Envelope ack;
    ack.mutable_ack()->set_exit(true);
    while (true) {
      absl::StatusOr<wire::Envelope> env = co_await state->session->Receive();
      if (!env.ok()) break;
      if (env->has_exit()) {
        state->session->Send(ack);
        co_await state->session->Drain(std::chrono::duration_cast<std::chrono::milliseconds>(kCloseAfterExitTimeout));
        break;
      }
    }
    co_return LaunchFailure(welcome->state().exit());
  }
  state->window = window;
  state->unread_limit = options.output_window_bytes;
  state->backpressure = options.backpressure;
  state->text = options.output_format == OutputFormat::kText;
  if (options.output_mode == OutputMode::kFinite) {
    state->finite_limit = state->output_left = options.max_output_bytes ? options.max_output_bytes : kMaxFiniteOutputBytes;
  }
  state->pty = options.pty.has_value();
  state->stdin_pipe = options.stdin_pipe || state->pty;
  state->transport = &transport;
  state->reconnect = options.reconnect || transport.tunnel() != TunnelMode::kBinary;
  state->ping_interval = std::chrono::milliseconds((options.lease_ms ? options.lease_ms : kDefaultLeaseMs) / 3);
  if (absl::Status st = state->Begin(*welcome); !st.ok()) co_return st;
  co_return std::unique_ptr<Process>(new Process(std::move(state)));
}

asio::awaitable<absl::StatusOr<std::unique_ptr<Process>>> Process::Reopen(Transport& transport,
                                                                            std::string_view reference,
                                                                            ReopenOptions options) {
  // A caller's abort (per-operation cancellation) is answered with
  // WAIT_ABORTED, never an exception.
  co_await asio::this_coro::throw_if_cancelled(false);
  const std::int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                               std::chrono::system_clock::now().time_since_epoch()).count();
  absl::StatusOr<ProcessReference> ref = ParseReference(reference, now);
  if (!ref.ok()) co_return ref.status();
  if (ref->provider != transport.name() || ref->sandbox != transport.sandbox_id()) {
    co_return absl::InvalidArgumentError(absl::StrCat(
        "process reference is for provider '", ref->provider, "' sandbox '", ref->sandbox,
        "', not '", std::string(transport.name()), "' sandbox '", transport.sandbox_id(), "'"));
  }
  if (options.timeout_ms == 0) co_return absl::InvalidArgumentError("reopen: timeout_ms must be positive");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(options.timeout_ms);
  // The sandbox's own layout decides what may run and where: never the
  // reference's paths alone.
  absl::StatusOr<SandboxInfo> info = co_await WithDeadline(transport.Probe(), deadline, "probing the sandbox");
  if (co_await Cancelled()) co_return WaitAbortedError("reopen was aborted; nothing was attached");
  if (!info.ok()) co_return info.status();
  if (absl::Status st = CheckReferencePaths(*ref, *info); !st.ok()) co_return st;
  auto state = std::make_shared<State>(transport.executor());
  state->control = options.control;
  state->provider = ref->provider;
  state->sandbox = ref->sandbox;
  state->supervisor = ref->supervisor;
  state->state_dir = ref->state_dir;
  state->secret = ref->secret;
  state->stdin_pipe = ref->stdin_pipe;
  state->pty = ref->pty;
  state->text = ref->text;
  state->backpressure = ref->backpressure;
  state->unread_limit = ref->window_bytes ? ref->window_bytes : kDefaultOutputWindowBytes;
  state->window = state->unread_limit;
  if (ref->output_left >= 0) {
    state->finite_limit = state->output_left = static_cast<std::uint64_t>(ref->output_left);
  }
  state->received[0] = state->consumed[0] = state->acked[0] = ref->stdout_offset;
  state->received[1] = state->consumed[1] = state->acked[1] = ref->stderr_offset;
  std::vector<std::string> command;
  command.push_back(ref->supervisor);
  command.push_back("bridge");
  if (transport.tunnel() == TunnelMode::kText) command.push_back("--text");
  command.push_back(ref->state_dir);
  wire::Hello hello;
  hello.set_secret(ref->secret);
  hello.set_zstd(!transport.can_connect());
  if (ref->pty) {
    hello.set_pty_offset(ref->stdout_offset);
  } else {
    hello.set_stdout_offset(ref->stdout_offset);
  }
  hello.set_stderr_offset(ref->stderr_offset);
  hello.set_window_bytes(state->window);
  hello.set_control(options.control);
  hello.mutable_ticket()->set_expires_at(static_cast<std::uint64_t>(ref->expires_at));
  hello.mutable_ticket()->set_mac(ref->ticket_mac);
  state->ticket = hello.ticket();
  absl::StatusOr<wire::Welcome> welcome = co_await WithDeadline(
      Attach(transport, *state, command, std::string(), hello), deadline, "attaching to the process");
  if (!welcome.ok() && absl::IsUnavailable(welcome.status()) && ErrorCodeOf(welcome.status()) != ErrorCode::kBusy &&
      !(co_await Cancelled())) {
    // The connection ended without an answer: a supervisor that was ending
    // (it removes its directory first) or had just died, or one that could
    // not take the connection. One more look tells them apart: gone now
    // (NOT_FOUND), or still there and refusing (UNAVAILABLE, never "gone").
    if (state->session) state->session->Close();
    asio::steady_timer pause(transport.executor(), std::chrono::milliseconds(100));
    co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
    welcome = co_await WithDeadline(Attach(transport, *state, std::move(command), std::string(), std::move(hello)),
                                    deadline, "attaching to the process");
  }
  if (co_await Cancelled()) {
    if (state->session) state->session->Close();
    co_return WaitAbortedError("reopen was aborted; nothing was attached");
  }
  if (!welcome.ok()) {
    if (state->session) state->session->Close();
    if (absl::IsNotFound(welcome.status())) {
      co_return absl::NotFoundError(absl::StrCat("the process is gone (it exited and was cleaned up, or its sandbox was reset): ",
                                                 std::string(welcome.status().message())));
    }
    if (ErrorCodeOf(welcome.status()) == ErrorCode::kBusy || absl::IsDeadlineExceeded(welcome.status()) ||
        absl::IsUnauthenticated(welcome.status())) {
      co_return welcome.status();  // BUSY, EXPIRED, a wrong secret: the supervisor's own answer
    }
    // Refused or unreachable: the process may well be alive. Never "gone".
    co_return absl::Status(welcome.status().code(),
                           absl::StrCat("could not reach the process's supervisor: ",
                                        std::string(welcome.status().message())));
  }
  if (options.control) {
    // Requests only: no stdin, no output, no exit record, no reattach.
    state->stdin_pipe = false;
    state->pid = welcome->state().pid();
    state->transport = &transport;
    state->reconnect = false;
    asio::co_spawn(state->close_timer.get_executor(), state->Pump(), asio::detached);
    asio::co_spawn(state->close_timer.get_executor(), state->Keepalive(), asio::detached);
    co_return std::unique_ptr<Process>(new Process(std::move(state)));
  }
  // Input continues where the supervisor's stdin stands: after every byte
  // it accepted (some may still wait for the child), and EOF may be sent.
  state->stdin_acked = welcome->state().stdin_acked();
  state->stdin_sent = std::max(welcome->state().stdin_received(), state->stdin_acked);
  state->stdin_eof_sent = welcome->state().stdin_closed() || welcome->state().stdin_eof_received();
  state->stdin_eof_acked = welcome->state().stdin_closed();
  state->transport = &transport;
  state->reconnect = transport.tunnel() != TunnelMode::kBinary;
  // What the supervisor holds but has not written yet it keeps: no copies.
  state->stdin_copy_base = state->stdin_sent;
  if (absl::Status st = state->Begin(*welcome); !st.ok()) co_return st;
  co_return std::unique_ptr<Process>(new Process(std::move(state)));
}

// Why input is not allowed now, or OK.
absl::Status Process::State::InputAllowed() const {
  if (control) return InputClosedError("a control handle sends no input");
  if (disconnected) return MakeError(ErrorCode::kInputClosed, "this handle was disconnected; reopen the process");
  if (!stdin_pipe) return InputClosedError("the process has no stdin pipe");
  if (stdin_eof_sent) return InputClosedError("stdin was already closed");
  if (stdin_closed_by_child) return InputClosedError("the process closed its stdin");
  if (!input_error.ok()) return input_error;
  if (!failed.ok()) return failed;
  if (exit) return InputClosedError("the process has exited");
  return absl::OkStatus();
}

// Takes a place in the input queue and waits until it is first and `bytes`
// fit the supervisor's stdin window. On success the caller sends at once.
asio::awaitable<absl::Status> Process::State::AwaitInputTurn(std::size_t bytes, bool is_close) {
  // A close is never refused for a full queue: it is how a writer finishes.
  if (!is_close &&
      (input_queue.size() >= kMaxWriteQueueCalls || input_queue_bytes + bytes > kMaxWriteQueueBytes)) {
    co_return absl::ResourceExhaustedError(absl::StrCat(
        "input queue full: ", input_queue.size(), " calls and ", input_queue_bytes,
        " bytes are waiting (limits ", kMaxWriteQueueCalls, " and ", kMaxWriteQueueBytes,
        "); await earlier writes first"));
  }
  auto self = shared_from_this();
  const std::uint64_t ticket = next_ticket++;
  input_queue.push_back(ticket);
  input_queue_bytes += bytes;
  absl::Status result;
  while (true) {
    result = InputAllowed();
    if (!result.ok()) break;
    if (input_queue.front() == ticket && stdin_sent + bytes - stdin_acked <= stdin_window) break;
    if (!co_await cond.Wait()) {
      result = WaitAbortedError("the write was aborted while queued; nothing of it was sent");
      break;
    }
  }
  input_queue.remove(ticket);
  input_queue_bytes -= bytes;
  cond.NotifyAll();  // the next in line
  co_return result;
}

asio::awaitable<absl::Status> Process::Write(std::string_view bytes) {
  State& s = *state_;
  if (bytes.size() > kMaxWriteBytes) {
    co_return absl::InvalidArgumentError(
        absl::StrCat("write of ", bytes.size(), " bytes exceeds ", kMaxWriteBytes, "; split it"));
  }
  if (absl::Status st = s.InputAllowed(); !st.ok() || bytes.empty()) co_return st;
  // The bytes are copied: the caller's buffer need not outlive the wait.
  std::string data(bytes);
  if (absl::Status st = co_await s.AwaitInputTurn(data.size(), false); !st.ok()) co_return st;
  if (s.reconnect) s.stdin_unacked.append(data);  // for a resend after a reconnect
  wire::Envelope env;
  env.mutable_stdin_data()->set_offset(s.stdin_sent);
  env.mutable_stdin_data()->set_data(std::move(data));
  s.stdin_sent += env.stdin_data().data().size();
  s.session->Send(std::move(env));
  co_return absl::OkStatus();
}

asio::awaitable<absl::Status> Process::CloseStdin() {
  State& s = *state_;
  if (s.disconnected) co_return MakeError(ErrorCode::kInputClosed, "this handle was disconnected; reopen the process");
  if (!s.stdin_pipe || s.stdin_eof_sent) co_return absl::OkStatus();
  // EOF follows every write called before it.
  if (absl::Status st = co_await s.AwaitInputTurn(0, true); !st.ok()) {
    co_return s.stdin_eof_sent ? absl::OkStatus() : st;
  }
  s.stdin_eof_sent = true;
  s.cond.NotifyAll();
  wire::Envelope env;
  env.mutable_stdin_eof()->set_offset(s.stdin_sent);
  s.session->Send(std::move(env));
  co_return absl::OkStatus();
}

// The next chunk of queued output (bytes mode), at most kMaxChunkBytes.
OutputChunk Process::State::TakeBytes() {
  OutputChunk c;
  OutputChunk& front = queue.front();
  if (front.bytes.size() > kMaxChunkBytes) {
    // Deliver at most kMaxChunkBytes; the rest stays first in line.
    c = OutputChunk{front.stream, front.offset, front.bytes.substr(0, kMaxChunkBytes)};
    front.bytes.erase(0, kMaxChunkBytes);
    front.offset += kMaxChunkBytes;
  } else {
    c = std::move(front);
    queue.pop_front();
  }
  queued_bytes -= c.bytes.size();
  consumed[c.stream == StreamId::kStderr ? 1 : 0] = c.offset + c.bytes.size();  // (a gap jumps)
  return c;
}

// Text mode: decodes what stream i holds back; empty when it must wait for
// more bytes (an incomplete character that is not the stream's end).
std::optional<OutputChunk> Process::State::DecodeCarry(int i, bool final) {
  Utf8Prefix d = DecodeUtf8Prefix(carry[i], kMaxChunkBytes, final);
  if (d.used == 0) return std::nullopt;
  OutputChunk c{i == 1 ? StreamId::kStderr : pty ? StreamId::kPty : StreamId::kStdout, carry_offset[i],
                std::move(d.text)};
  carry[i].erase(0, d.used);
  carry_offset[i] += d.used;
  return c;
}

// True when no queued chunk belongs to stream i.
bool Process::State::NothingQueued(int i) const {
  for (const OutputChunk& c : queue) {
    if ((c.stream == StreamId::kStderr) == (i == 1)) return false;
  }
  return true;
}

asio::awaitable<absl::StatusOr<std::optional<OutputChunk>>> Process::Read() {
  State& s = *state_;
  if (s.control) co_return absl::UnimplementedError("read: a control handle receives no output; reopen it fully");
  while (true) {
    if (s.text) {
      // What a stream holds back goes first: a chunk's undecoded rest, or at
      // the stream's end an incomplete character (as U+FFFD).
      for (int i = 0; i < 2; ++i) {
        if (s.carry[i].empty()) continue;
        const bool final = (s.eof[i] || !s.output_error.ok()) && s.NothingQueued(i);
        if (std::optional<OutputChunk> c = s.DecodeCarry(i, final)) co_return c;
      }
    }
    if (!s.queue.empty()) {
      std::optional<OutputChunk> c;
      if (s.text) {
        const int i = s.queue.front().stream == StreamId::kStderr ? 1 : 0;
        OutputChunk raw = s.TakeBytes();
        if (s.carry[i].empty()) s.carry_offset[i] = raw.offset;
        s.carry[i] += raw.bytes;
        c = s.DecodeCarry(i, false);
      } else {
        c = s.TakeBytes();
      }
      s.MaybeAck();
      if (c) co_return c;
      continue;  // only part of a character so far
    }
    if (!s.output_error.ok()) co_return s.output_error;
    if (s.eof[0] && s.eof[1]) co_return std::optional<OutputChunk>();
    if (!s.failed.ok()) co_return s.failed;
    if (!co_await s.cond.Wait()) co_return WaitAbortedError("the read was aborted; no output was taken");
  }
}

asio::awaitable<absl::StatusOr<ExitStatus>> Process::Wait() {
  State& s = *state_;
  if (s.control) {
    co_return absl::FailedPreconditionError("wait: a control handle never takes the exit; use Status() or reopen fully");
  }
  while (true) {
    if (s.exit) {
      ExitStatus e = *s.exit;
      // Complete only once every byte reached the consumer, with no gap.
      e.output_complete = s.eof[0] && s.eof[1] && s.queue.empty() && s.carry[0].empty() &&
                          s.carry[1].empty() && s.output_error.ok() && !s.output_gap && !e.output_cut;
      // Delivered: every output byte is here already (the exit follows the
      // output), so the supervisor need keep nothing more.
      if (!s.disconnected) s.AckExit();
      co_return e;
    }
    if (!s.failed.ok()) {
      co_return absl::UnavailableError(absl::StrCat("exit not observed: ", std::string(s.failed.message())));
    }
    if (!co_await s.cond.Wait()) co_return WaitAbortedError("the wait was aborted; the process was not touched");
  }
}

}  // namespace tether

namespace tether {

asio::awaitable<absl::Status> Process::Signal(int signal) {
  State& s = *state_;
  if (signal <= 0 || signal >= 65) co_return absl::InvalidArgumentError(absl::StrCat(signal, " is not a signal"));
  if (s.disconnected) co_return MakeError(ErrorCode::kInputClosed, "this handle was disconnected; reopen the process");
  if (s.exit) co_return absl::NotFoundError("the process has exited");
  if (!s.failed.ok()) co_return s.failed;
  wire::Envelope env;
  env.mutable_signal()->set_signal(signal);
  s.session->Send(std::move(env));
  co_return absl::OkStatus();
}

asio::awaitable<absl::Status> Process::Signal(std::string_view name) {
  absl::StatusOr<int> n = SignalNumber(name);
  if (!n.ok()) co_return n.status();
  co_return co_await Signal(*n);
}

asio::awaitable<absl::Status> Process::Terminate(unsigned grace_ms) {
  State& s = *state_;
  if (s.terminate_result) co_return *s.terminate_result;
  if (s.disconnected) co_return MakeError(ErrorCode::kInputClosed, "this handle was disconnected; reopen the process");
  if (s.exit) co_return absl::OkStatus();
  if (!s.failed.ok()) co_return s.failed;
  if (!s.terminate_id) {
    wire::Envelope env;
    env.mutable_terminate()->set_grace_ms(grace_ms);
    s.terminate_grace_ms = grace_ms;
    s.terminate_id = s.session->Send(std::move(env));
    // Only the first caller arms the deadline; the others share its outcome.
    auto state = state_;
    auto deadline = std::make_shared<asio::steady_timer>(co_await asio::this_coro::executor, kStatusTimeout);
    deadline->async_wait([state, deadline](boost::system::error_code ec) {
      if (ec || state->terminate_result || state->exit) return;
      state->terminate_result = OutcomeUnknownError(
          "the terminate request was not acknowledged within 30 s; it is not sent again");
      state->cond.NotifyAll();
    });
    s.terminate_deadline = deadline;
  }
  while (!s.terminate_result && !s.exit && s.failed.ok()) {
    if (!co_await s.cond.Wait()) {
      co_return WaitAbortedError("this caller stopped waiting; the terminate request stands");
    }
  }
  if (s.terminate_result) co_return *s.terminate_result;
  if (s.exit) co_return absl::OkStatus();  // it exited: the request did its work or was moot
  // The connection failed with the request in flight: we cannot tell.
  s.terminate_result = OutcomeUnknownError(absl::StrCat(
      "the connection failed before the terminate request was acknowledged: ",
      std::string(s.failed.message())));
  co_return *s.terminate_result;
}

asio::awaitable<absl::StatusOr<ProcessStatus>> Process::Status() {
  State& s = *state_;
  ProcessStatus st;
  st.observed_at = std::chrono::system_clock::now();
  if (s.exit) {
    st.state = ProcessStatus::State::kExited;
    st.exit = s.exit;
    co_return st;
  }
  if (s.disconnected || !s.failed.ok()) co_return st;  // unknown: no evidence either way
  wire::Envelope env;
  env.mutable_status_request();
  const std::uint64_t id = s.session->Send(std::move(env));
  s.status_replies[id];  // phase UNSPECIFIED until the reply lands
  asio::steady_timer deadline(co_await asio::this_coro::executor, kStatusTimeout);
  bool timed_out = false;
  deadline.async_wait([&timed_out, &s](boost::system::error_code ec) {
    if (ec) return;
    timed_out = true;
    s.cond.NotifyAll();
  });
  bool aborted = false;
  while (s.status_replies[id].phase() == wire::ProcessState::PHASE_UNSPECIFIED && !timed_out &&
         s.failed.ok() && !s.exit) {
    if (!co_await s.cond.Wait()) {
      aborted = true;
      break;
    }
  }
  deadline.cancel();
  if (aborted) {
    s.status_replies.erase(id);
    co_return WaitAbortedError("the status check was aborted");
  }
  const wire::ProcessState reply = s.status_replies[id];
  s.status_replies.erase(id);
  st.observed_at = std::chrono::system_clock::now();
  if (s.exit) {
    st.state = ProcessStatus::State::kExited;
    st.exit = s.exit;
  } else if (reply.phase() == wire::ProcessState::PHASE_RUNNING) {
    st.state = ProcessStatus::State::kRunning;
  } else if (reply.phase() == wire::ProcessState::PHASE_EXITED && reply.has_exit()) {
    // The supervisor reaped it; its output may still be unread.
    st.state = ProcessStatus::State::kExited;
    st.exit = ToExitStatus(reply.exit());
  }
  co_return st;
}

absl::StatusOr<std::string> Process::Reference() const {
  const State& s = *state_;
  if (s.control) return absl::FailedPreconditionError("a control handle issues no references");
  if (!s.input_error.ok()) return s.input_error;
  if (s.stdin_sent != s.stdin_acked || (s.stdin_eof_sent && !s.stdin_eof_acked && !s.exit)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "input delivery is pending (", s.stdin_sent - s.stdin_acked, " bytes",
        s.stdin_eof_sent && !s.stdin_eof_acked ? " and EOF" : "", " not yet acknowledged); retry once they are"));
  }
  ProcessReference r;
  r.provider = s.provider;
  r.sandbox = s.sandbox;
  r.supervisor = s.supervisor;
  r.state_dir = s.state_dir;
  r.secret = s.secret;
  r.pid = s.pid;
  r.stdin_pipe = s.stdin_pipe;
  r.pty = s.pty;
  r.text = s.text;
  r.backpressure = s.backpressure;
  r.window_bytes = s.window;
  r.output_left = s.finite_limit != 0 ? static_cast<std::int64_t>(s.output_left) : -1;
  // Bytes consumed but held back undecoded (text) are not delivered yet.
  r.stdout_offset = s.consumed[0] - s.carry[0].size();
  r.stderr_offset = s.consumed[1] - s.carry[1].size();
  // The supervisor's ticket decides how long the reference lives.
  if (s.ticket.expires_at() == 0 || s.ticket.mac().size() != 32) {
    return absl::FailedPreconditionError("the supervisor issued no reference ticket");
  }
  r.expires_at = static_cast<std::int64_t>(s.ticket.expires_at());
  r.ticket_mac = s.ticket.mac();
  return EncodeReference(r);
}

asio::awaitable<absl::Status> Process::Disconnect() {
  State& s = *state_;
  if (s.disconnected) co_return absl::OkStatus();
  s.disconnected = true;
  s.ping_timer.cancel();
  s.cond.NotifyAll();
  if (s.session->closed()) co_return absl::OkStatus();
  // Unread output stays in the supervisor's ring for the next attachment.
  wire::Envelope env;
  env.mutable_detach();
  s.session->Send(std::move(env));
  co_await s.session->Drain(std::chrono::duration_cast<std::chrono::milliseconds>(kCloseAfterExitTimeout));
  co_return absl::OkStatus();
}

asio::awaitable<absl::Status> Process::Detach() {
  State& s = *state_;
  absl::Status st = co_await Disconnect();
  s.queue.clear();
  s.queued_bytes = 0;
  s.carry[0].clear();
  s.carry[1].clear();
  s.eof[0] = s.eof[1] = true;  // Read() ends: nothing more for this handle
  s.cond.NotifyAll();
  co_return st;
}

asio::awaitable<absl::Status> Process::Resize(unsigned cols, unsigned rows) {
  State& s = *state_;
  if (!s.pty) co_return absl::UnimplementedError("resize: this process has no terminal");
  if (absl::Status st = CheckTerminalSize(cols, rows); !st.ok()) co_return st;
  if (s.disconnected) co_return MakeError(ErrorCode::kInputClosed, "this handle was disconnected; reopen the process");
  if (s.exit) co_return absl::OkStatus();
  if (!s.failed.ok()) co_return s.failed;
  wire::Envelope env;
  env.mutable_resize()->mutable_size()->set_cols(cols);
  env.mutable_resize()->mutable_size()->set_rows(rows);
  s.session->Send(std::move(env));
  co_return absl::OkStatus();
}

}  // namespace tether
