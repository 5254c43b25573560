#include "host/cli/commands.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "host/cli/stdio.h"
#include "host/command_transport.h"
#include "host/conformance/conformance.h"
#include "host/errors.h"
#include "host/internal/condition.h"
#include "host/local_transport.h"
#include "host/process.h"
#include "host/reference.h"

namespace tether::cli {

namespace asio = boost::asio;

namespace {
bool g_stdout_was_closed = false;
}  // namespace

void PrepareStdio() {
  // A closed 0, 1 or 2 would be taken by the next descriptor we open (the
  // event loop's own eventfd, a socket) and read from or written to as if it
  // were our stdio. /dev/null takes its place first.
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) >= 0 || errno != EBADF) continue;
    if (fd == 1) g_stdout_was_closed = true;
    const int null = ::open("/dev/null", O_RDWR | O_NOCTTY);
    if (null < 0) std::_Exit(kExitTetherFailure);  // cannot even hold our own stdio
    if (null != fd) {
      ::dup2(null, fd);
      ::close(null);
    }
  }
}

bool StdoutWasClosed() { return g_stdout_was_closed; }

namespace {
sigset_t JobSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  return set;
}
}  // namespace

void BlockJobSignals() {
  const sigset_t set = JobSignals();
  ::sigprocmask(SIG_BLOCK, &set, nullptr);
}

namespace {

constexpr unsigned kTerminateGraceMs = 2000;     // when our own output has gone away
constexpr unsigned kDefaultKillGraceMs = 5000;   // `tether kill` without --grace
constexpr std::size_t kMaxPendingSignals = 64;   // queued for the child; more are coalesced

void PrintError(const absl::Status& st) {
  std::fprintf(stderr, "tether: %s\n", std::string(st.message()).c_str());
}

int ExitForError(const absl::Status& st) {
  if (absl::IsNotFound(st)) return kExitNotFound;
  if (absl::IsPermissionDenied(st)) return kExitCannotExecute;
  if (absl::IsInvalidArgument(st)) return kExitUsage;
  return kExitTetherFailure;
}

std::string SignalName(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return absl::StrCat("signal ", sig);
  }
}

// Our own terminal's size, if stdin or stdout is one.
std::optional<std::pair<unsigned, unsigned>> OwnTerminalSize() {
  struct winsize ws {};
  for (int fd : {0, 1, 2}) {
    if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
      return std::make_pair(static_cast<unsigned>(ws.ws_col), static_cast<unsigned>(ws.ws_row));
    }
  }
  return std::nullopt;
}

// Puts our stdin terminal (if it is one) in raw mode for the lifetime of the
// object, so keys reach the remote terminal's line discipline untouched.
class RawTerminal {
 public:
  RawTerminal() {
    if (::isatty(0) && ::tcgetattr(0, &saved_) == 0) {
      struct termios raw = saved_;
      ::cfmakeraw(&raw);
      active_ = ::tcsetattr(0, TCSAFLUSH, &raw) == 0;
    }
  }
  ~RawTerminal() {
    if (active_) ::tcsetattr(0, TCSAFLUSH, &saved_);
  }

 private:
  struct termios saved_ {};
  bool active_ = false;
};

}  // namespace

// The CLI's signals, installed before the transport exists and kept until
// the event loop ends, so SIGINT, SIGTERM and SIGHUP never take their
// default action (which would kill tether and leave a child nobody can
// reach). During setup a signal cancels the start (a cancellation marker
// stops a delayed launch); afterwards signals are queued and one forwarder
// coroutine, joined before the process handle goes away, sends them to the
// child's process group. Handlers never hold a reference to a Process.
class CliSignals {
 public:
  explicit CliSignals(const asio::any_io_executor& ex)
      : set_(ex, SIGINT, SIGTERM, SIGHUP), winch_(ex, SIGWINCH), cond_(ex) {
    Arm();
    ArmWinch();
  }

  // Bind to the setup call: a signal during setup cancels it.
  asio::cancellation_slot setup_slot() { return setup_cancel_.slot(); }
  // Setup is over: later signals are for the child. One that raced with the
  // end of setup is queued for it.
  void EndSetup() {
    if (!in_setup_) return;
    in_setup_ = false;
    if (setup_signal_ != 0) Push(setup_signal_);
  }
  int setup_signal() const { return setup_signal_; }

  // Sends queued signals (and, with a pty, our terminal size changes) to `p`
  // until Stop... is requested; returns once it has stopped.
  asio::awaitable<void> Forward(Process& p) {
    while (!forward_stop_) {
      if (!pending_.empty()) {
        const int sig = pending_.front();
        pending_.pop_front();
        co_await p.Signal(sig);
        continue;
      }
      if (winched_) {
        winched_ = false;
        if (p.has_pty()) {
          if (auto size = OwnTerminalSize()) co_await p.Resize(size->first, size->second);
        }
        continue;
      }
      co_await cond_.Wait();
    }
    forward_stop_ = false;
  }
  void StopForwarding() {
    forward_stop_ = true;
    cond_.NotifyAll();
  }
  // The loop is done: stop listening (io_context::run can then return).
  void Stop() {
    stopped_ = true;
    boost::system::error_code ec;
    set_.cancel(ec);
    winch_.cancel(ec);
    cond_.NotifyAll();
  }

 private:
  void Arm() {
    set_.async_wait([this](boost::system::error_code ec, int sig) {
      if (ec || stopped_) return;
      if (in_setup_) {
        if (setup_signal_ == 0) setup_signal_ = sig;
        setup_cancel_.emit(asio::cancellation_type::terminal);
      } else {
        Push(sig);
      }
      Arm();
    });
  }
  void ArmWinch() {
    winch_.async_wait([this](boost::system::error_code ec, int) {
      if (ec || stopped_) return;
      winched_ = true;
      cond_.NotifyAll();
      ArmWinch();
    });
  }
  void Push(int sig) {
    // A burst of the same signal is one signal, as the kernel's own pending
    // set would make it; the queue stays bounded.
    if (!pending_.empty() && pending_.back() == sig) return;
    if (pending_.size() >= kMaxPendingSignals) return;
    pending_.push_back(sig);
    cond_.NotifyAll();
  }

  asio::signal_set set_;
  asio::signal_set winch_;
  internal::Condition cond_;
  asio::cancellation_signal setup_cancel_;
  std::deque<int> pending_;
  bool in_setup_ = true;
  int setup_signal_ = 0;
  bool winched_ = false;
  bool forward_stop_ = false;
  bool stopped_ = false;
};

namespace {

asio::awaitable<void> PumpStdin(Process& p, AsyncFd& in) {
  std::unique_ptr<char[]> buf(new char[kMaxWriteBytes]);
  while (true) {
    absl::StatusOr<std::size_t> n = co_await in.ReadSome({buf.get(), kMaxWriteBytes});
    if (!n.ok() || *n == 0) break;
    if (!(co_await p.Write(std::string_view(buf.get(), *n))).ok()) co_return;  // input closed
  }
  co_await p.CloseStdin();
}

// Who the CLI is to the process it shows.
enum class Role {
  kOwner,     // `run`: the job lives for this terminal; a dead stdout ends it
  kObserver,  // `attach`, `wait`: a dead stdout only ends the observation
};

// Connects the CLI's stdio to `p` until the exit; returns the CLI status.
asio::awaitable<int> Interact(Process& p, bool forward_stdin, Role role, CliSignals& signals) {
  auto ex = co_await asio::this_coro::executor;
  std::optional<RawTerminal> raw;
  if (p.has_pty()) raw.emplace();
  AsyncFd in(ex, 0), out(ex, 1), err(ex, 2);
  // PumpStdin and the signal forwarder borrow `p` (and `in`): both are
  // joined before this returns.
  int running = 0;
  asio::steady_timer joined(ex, asio::steady_timer::time_point::max());
  const auto on_done = [&](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
    --running;
    joined.cancel();
  };
  if (forward_stdin) {
    ++running;
    asio::co_spawn(ex, PumpStdin(p, in), on_done);
  }
  ++running;
  asio::co_spawn(ex, signals.Forward(p), on_done);

  if (p.output_gap()) std::fputs("tether: output was lost while nobody was attached\n", stderr);
  bool stdout_gone = false, stderr_gone = false;
  int stdout_errno = 0;
  bool detached = false;
  while (true) {
    absl::StatusOr<std::optional<OutputChunk>> chunk = co_await p.Read();
    if (!chunk.ok()) {
      PrintError(chunk.status());
      break;
    }
    if (!*chunk) break;
    const bool is_err = (*chunk)->stream == StreamId::kStderr;
    if (is_err ? stderr_gone : stdout_gone) continue;
    AsyncFd& dst = is_err ? err : out;
    if ((co_await dst.WriteAll((*chunk)->bytes)).ok()) continue;
    if (is_err) {
      stderr_gone = true;  // nowhere left to say anything; stdout goes on
      continue;
    }
    stdout_gone = true;
    stdout_errno = out.error();
    if (role == Role::kObserver) {
      // Only this observation ends: the job keeps running, and its unread
      // output stays with the supervisor for the next reader.
      if (stdout_errno != EPIPE) {
        std::fprintf(stderr, "tether: writing stdout failed: %s; detached, the process keeps running\n",
                     std::strerror(stdout_errno));
      }
      co_await p.Disconnect();
      detached = true;
      break;
    }
    // `run`: nobody can ever read this job's output again, so it ends.
    // Its stderr is still forwarded.
    std::fprintf(stderr, "tether: %s; terminating the process (its stderr is still forwarded)\n",
                 stdout_errno == EPIPE ? "stdout was closed by its reader"
                                       : absl::StrCat("writing stdout failed: ", std::strerror(stdout_errno)).c_str());
    co_await p.Terminate(kTerminateGraceMs);
  }
  int code = kExitTetherFailure;
  if (!detached) {
    absl::StatusOr<ExitStatus> exit = co_await p.Wait();
    if (!exit.ok()) {
      PrintError(exit.status());
    } else {
      code = exit->ShellStatus();
      if (exit->output_cut) {
        std::fputs("tether: background processes kept the output open after the command exited; "
                   "their later output was not collected\n", stderr);
      }
    }
  }
  if (stdout_gone) code = stdout_errno == EPIPE ? kExitStdoutClosed : kExitTetherFailure;
  signals.StopForwarding();
  in.Cancel();
  while (running > 0) co_await joined.async_wait(asio::as_tuple(asio::use_awaitable));
  co_return code;
}

constexpr std::size_t kCliOutputWindowBytes = 1 << 20;

StartOptions ToStartOptions(const RunArgs& args) {
  StartOptions opts;
  opts.argv = args.argv;
  opts.cwd = args.cwd;
  opts.env = args.env;
  opts.inherit_env = !args.clean_env;
  opts.stdin_pipe = args.stdin_pipe;
  opts.lease_ms = args.lease_ms;
  opts.output_mode = OutputMode::kStream;  // a command's whole output, exact
  opts.output_format = OutputFormat::kBytes;
  // The CLI hands output to its own stdout at once, so a 1 MiB window costs
  // at most 1 MiB and keeps a fast producer from waiting on acknowledgement
  // round trips (tests/bench: about twice the throughput of the 64 KiB
  // default).
  opts.output_window_bytes = kCliOutputWindowBytes;
  if (args.pty) {
    StartOptions::PtySize size;
    if (auto own = OwnTerminalSize()) size = {own->first, own->second};
    if (args.cols) size.cols = args.cols;
    if (args.rows) size.rows = args.rows;
    opts.pty = size;
  }
  return opts;
}

absl::StatusOr<std::unique_ptr<Transport>> MakeTransport(asio::any_io_executor ex, const ProviderArgs& p) {
  if (p.provider == "local") return MakeLocalTransport(std::move(ex));
  CommandOptions o;
  o.prefix = p.prefix;
  o.arch = p.arch;
  o.emulator = p.emulator;
  o.tunnel = p.tunnel == "text" ? TunnelMode::kText : p.tunnel == "exchange" ? TunnelMode::kExchange : TunnelMode::kBinary;
  if (::isatty(2)) {
    // Long uploads (slow channels) show their progress.
    o.upload_progress = [](std::size_t done, std::size_t total) {
      std::fprintf(stderr, "\rtether: uploading the supervisor: %zu%%", total ? done * 100 / total : 100);
      if (done == total) std::fputs("\r\033[K", stderr);
    };
  }
  return MakeCommandTransport(std::move(ex), std::move(o));
}

// Runs `body` on a fresh io_context with the chosen transport and returns its
// status. The loop ends when every handle has finished in the background
// (exit acknowledgements delivered).
int RunLoop(const ProviderArgs& provider,
            std::function<asio::awaitable<int>(Transport&, CliSignals&)> body) {
  ::signal(SIGPIPE, SIG_IGN);
  asio::io_context io(1);
  // First of all: from here on a signal never kills tether. Signals that
  // arrived earlier were held pending (BlockJobSignals) and come now.
  CliSignals signals(io.get_executor());
  const sigset_t job_signals = JobSignals();
  ::sigprocmask(SIG_UNBLOCK, &job_signals, nullptr);
  // And to the end: before the handlers go (Asio then restores the default
  // action) the signals are blocked again, and stay pending until we exit.
  struct Reblock {
    sigset_t set;
    ~Reblock() { ::sigprocmask(SIG_BLOCK, &set, nullptr); }
  } reblock{job_signals};
  // The transport outlives the loop: handles finish in the background
  // (exit acknowledgements), and some channels poll through it.
  absl::StatusOr<std::unique_ptr<Transport>> transport = MakeTransport(io.get_executor(), provider);
  if (!transport.ok()) {
    PrintError(transport.status());
    return kExitTetherFailure;
  }
  int exit_code = kExitTetherFailure;
  asio::co_spawn(io, body(**transport, signals), [&](std::exception_ptr e, int code) {
    signals.Stop();
    if (e) std::rethrow_exception(e);
    exit_code = code;
  });
  io.run();
  return exit_code;
}

// A reference given as JSON, @FILE or - (stdin), read up to the limit plus
// one byte: never more, whatever the file is.
absl::StatusOr<std::string> ReadReference(const std::string& arg) {
  const auto too_big = [](const std::string& from) {
    return absl::InvalidArgumentError(
        absl::StrCat("the reference from ", from, " is larger than ", kMaxReferenceBytes, " bytes"));
  };
  if (arg != "-" && (arg.empty() || arg[0] != '@')) {
    if (arg.size() > kMaxReferenceBytes) return too_big("the command line");
    return arg;
  }
  const std::string from = arg == "-" ? "stdin" : arg.substr(1);
  int fd = 0;
  if (arg != "-") {
    fd = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return absl::InvalidArgumentError(absl::StrCat("cannot read ", from, ": ", std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    if (fd != 0) ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(from, " is a directory, not a reference"));
  }
  std::string text(kMaxReferenceBytes + 1, '\0');
  std::size_t got = 0;
  int err = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) break;
    if (errno == EINTR) continue;
    if (errno == EAGAIN) {  // a non-blocking stdin shared with someone else
      pollfd pfd{fd, POLLIN, 0};
      ::poll(&pfd, 1, -1);
      continue;
    }
    err = errno;
    break;
  }
  if (fd != 0) ::close(fd);
  if (err != 0) return absl::InvalidArgumentError(absl::StrCat("cannot read ", from, ": ", std::strerror(err)));
  if (got > kMaxReferenceBytes) return too_big(from);
  text.resize(got);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return text;
}

absl::StatusOr<int> ParseSignal(const std::string& s) { return SignalNumber(s); }

}  // namespace

absl::StatusOr<std::vector<std::string>> SplitWords(std::string_view line) {
  std::vector<std::string> words;
  std::string cur;
  bool in_word = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::move(cur));
      cur.clear();
      in_word = false;
    } else if (c == '\'') {
      const std::size_t end = line.find('\'', i + 1);
      if (end == std::string_view::npos) return absl::InvalidArgumentError("unterminated ' in --prefix");
      cur.append(line.substr(i + 1, end - i - 1));
      i = end;
      in_word = true;
    } else if (c == '"') {
      ++i;
      for (; i < line.size() && line[i] != '"'; ++i) {
        if (line[i] == '\\' && i + 1 < line.size()) ++i;
        cur.push_back(line[i]);
      }
      if (i >= line.size()) return absl::InvalidArgumentError("unterminated \" in --prefix");
      in_word = true;
    } else if (c == '\\' && i + 1 < line.size()) {
      cur.push_back(line[++i]);
      in_word = true;
    } else {
      cur.push_back(c);
      in_word = true;
    }
  }
  if (in_word) words.push_back(std::move(cur));
  return words;
}

absl::StatusOr<bool> ParseProviderOption(const std::vector<std::string>& args, std::size_t* i,
                                         ProviderArgs* out) {
  const std::string& a = args[*i];
  if (a != "--provider" && a != "--prefix" && a != "--arch" && a != "--emulator" && a != "--tunnel") return false;
  if (*i + 1 >= args.size()) return absl::InvalidArgumentError(absl::StrCat(a, " needs a value"));
  const std::string& v = args[++*i];
  if (a == "--provider") {
    if (v != "local" && v != "command") {
      return absl::InvalidArgumentError(absl::StrCat("unknown provider '", v, "' (available: local, command)"));
    }
    out->provider = v;
  } else if (a == "--prefix") {
    absl::StatusOr<std::vector<std::string>> words = SplitWords(v);
    if (!words.ok()) return words.status();
    out->prefix = *std::move(words);
  } else if (a == "--arch") {
    out->arch = v;
  } else if (a == "--tunnel") {
    if (v != "binary" && v != "text" && v != "exchange") {
      return absl::InvalidArgumentError("--tunnel is binary, text or exchange");
    }
    out->tunnel = v;
  } else {
    out->emulator = v;
  }
  return true;
}

absl::Status CheckProviderArgs(const ProviderArgs& p) {
  if (p.provider == "command" && p.prefix.empty()) {
    return absl::InvalidArgumentError("--provider command needs --prefix 'CMD...' (e.g. 'ssh -T host')");
  }
  if (p.provider == "local" && (!p.prefix.empty() || !p.arch.empty() || !p.emulator.empty() || p.tunnel != "binary")) {
    return absl::InvalidArgumentError("--prefix, --arch, --emulator and --tunnel are for --provider command");
  }
  if (!p.arch.empty() && p.arch != "x86_64" && p.arch != "aarch64") {
    return absl::InvalidArgumentError(absl::StrCat("--arch must be x86_64 or aarch64, not '", p.arch, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<RunArgs> ParseRunArgs(const std::vector<std::string>& args) {
  RunArgs r;
  std::size_t i = 0;
  auto value = [&](const std::string& flag) -> absl::StatusOr<std::string> {
    if (i + 1 >= args.size()) return absl::InvalidArgumentError(absl::StrCat(flag, " needs a value"));
    return args[++i];
  };
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      ++i;
      break;
    }
    absl::StatusOr<bool> provider = ParseProviderOption(args, &i, &r.provider);
    if (!provider.ok()) return provider.status();
    if (*provider) {
      continue;    } else if (a == "--cwd") {
      absl::StatusOr<std::string> v = value(a);
      if (!v.ok()) return v.status();
      r.cwd = *v;
    } else if (a == "--env") {
      absl::StatusOr<std::string> v = value(a);
      if (!v.ok()) return v.status();
      const std::size_t eq = v->find('=');
      if (eq == std::string::npos || eq == 0) {
        return absl::InvalidArgumentError(absl::StrCat("--env wants NAME=VALUE, got '", *v, "'"));
      }
      r.env.emplace_back(v->substr(0, eq), v->substr(eq + 1));
    } else if (a == "--pty") {
      r.pty = true;
    } else if (a == "--cols" || a == "--rows") {
      absl::StatusOr<std::string> v = value(a);
      if (!v.ok()) return v.status();
      unsigned n = 0;
      if (!absl::SimpleAtoi(*v, &n) || n == 0 || n > kMaxTerminalCells) {
        return absl::InvalidArgumentError(absl::StrCat(a, " wants 1..", kMaxTerminalCells, ", got '", *v, "'"));
      }
      (a == "--cols" ? r.cols : r.rows) = n;
    } else if (a == "--lease-ms") {
      absl::StatusOr<std::string> v = value(a);
      if (!v.ok()) return v.status();
      if (!absl::SimpleAtoi(*v, &r.lease_ms) || r.lease_ms < kMinLeaseMs || r.lease_ms > kMaxLeaseMs) {
        return absl::InvalidArgumentError(
            absl::StrCat("--lease-ms wants ", kMinLeaseMs, "..", kMaxLeaseMs, ", got '", *v, "'"));
      }
    } else if (a == "--clean-env") {
      r.clean_env = true;
    } else if (a == "--no-stdin") {
      r.stdin_pipe = false;
    } else if (a == "--stdin") {
      r.stdin_pipe = true;
    } else if (a.size() > 1 && a[0] == '-') {
      return absl::InvalidArgumentError(absl::StrCat("unknown option '", a, "'"));
    } else {
      break;  // ARGV starts at the first non-option
    }
  }
  r.argv.assign(args.begin() + static_cast<std::ptrdiff_t>(std::min(i, args.size())), args.end());
  if (r.argv.empty()) return absl::InvalidArgumentError("no command given after --");
  if ((r.cols || r.rows) && !r.pty) return absl::InvalidArgumentError("--cols and --rows need --pty");
  if (absl::Status st = CheckProviderArgs(r.provider); !st.ok()) return st;
  if (!r.cwd.empty() && r.cwd[0] != '/') {
    if (r.provider.provider != "local") {
      return absl::InvalidArgumentError(absl::StrCat(
          "--cwd '", r.cwd, "' is relative; with --provider ", r.provider.provider,
          " give an absolute path inside the sandbox"));
    }
    // This machine: relative to where tether was started, as a shell would.
    char buf[4096];
    if (::getcwd(buf, sizeof buf) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("--cwd '", r.cwd, "' is relative and our own directory is gone"));
    }
    r.cwd = absl::StrCat(buf, std::string_view(buf) == "/" ? "" : "/", r.cwd);
  }
  return r;
}

namespace {

// Starts the process with setup cancelled by a signal (see CliSignals).
// On failure prints why and returns the CLI status in *code.
asio::awaitable<std::unique_ptr<Process>> StartWithSignals(Transport& t, StartOptions opts, CliSignals& signals,
                                                           int* code) {
  auto ex = co_await asio::this_coro::executor;
  absl::StatusOr<std::unique_ptr<Process>> p = co_await asio::co_spawn(
      ex, Process::Start(t, std::move(opts)), asio::bind_cancellation_slot(signals.setup_slot(), asio::use_awaitable));
  signals.EndSetup();
  if (!p.ok()) {
    if (const int sig = signals.setup_signal(); sig != 0) {
      std::fprintf(stderr, "tether: %s during setup: %s\n", SignalName(sig).c_str(),
                   std::string(p.status().message()).c_str());
      *code = 128 + sig;
    } else {
      PrintError(p.status());
      *code = ExitForError(p.status());
    }
    co_return nullptr;
  }
  co_return *std::move(p);
}

// Writes all of `text` to fd 1 (blocking or not); the errno on failure.
int WriteStdout(std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(1, text.data(), text.size());
    if (n > 0) {
      text.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      pollfd pfd{1, POLLOUT, 0};
      ::poll(&pfd, 1, 1000);
      continue;
    }
    return n < 0 ? errno : EIO;
  }
  return 0;
}

}  // namespace

int RunCommand(const RunArgs& args) {
  return RunLoop(args.provider, [&](Transport& t, CliSignals& signals) -> asio::awaitable<int> {
    StartOptions opts = ToStartOptions(args);
    // Nobody else can ever reach a run's process (no reference is issued):
    // it ends when we are gone for good, and a broken channel (or a stop
    // longer than the lease) is reattached, losing nothing.
    opts.end_with_host = true;
    opts.reconnect = true;
    int code = kExitTetherFailure;
    std::unique_ptr<Process> p = co_await StartWithSignals(t, std::move(opts), signals, &code);
    if (!p) co_return code;
    co_return co_await Interact(*p, args.stdin_pipe, Role::kOwner, signals);
  });
}

int StartCommand(const RunArgs& args) {
  if (StdoutWasClosed()) {
    // The reference would go nowhere, and without it nobody could reach
    // the process: start nothing.
    std::fputs("tether start: stdout is closed; the reference would be lost, so nothing was started\n", stderr);
    return kExitTetherFailure;
  }
  return RunLoop(args.provider, [&](Transport& t, CliSignals& signals) -> asio::awaitable<int> {
    int code = kExitTetherFailure;
    std::unique_ptr<Process> p = co_await StartWithSignals(t, ToStartOptions(args), signals, &code);
    if (!p) co_return code;
    absl::StatusOr<std::string> ref = p->Reference();
    int err = ref.ok() ? WriteStdout(*ref + "\n") : 0;
    if (!ref.ok() || err != 0) {
      // Nobody can ever reach the process without its reference: end it.
      if (!ref.ok()) {
        PrintError(ref.status());
      } else {
        std::fprintf(stderr, "tether start: writing the reference to stdout failed: %s; terminating the process\n",
                     std::strerror(err));
      }
      co_await p->Terminate(kTerminateGraceMs);
      (void)co_await p->Wait();
      co_return kExitTetherFailure;
    }
    co_await p->Disconnect();
    co_return 0;
  });
}

// Prints "tether COMMAND: why" and the usage; returns kExitUsage.
int UsageError(const std::string& command, const absl::Status& why) {
  std::fprintf(stderr, "tether %s: %s\n%s", command.c_str(), std::string(why.message()).c_str(), kUsage);
  return kExitUsage;
}

int ReferenceCommand(const std::string& command, const std::vector<std::string>& all_args) {
  ProviderArgs provider;
  std::size_t first = 0;
  while (first < all_args.size()) {
    absl::StatusOr<bool> p = ParseProviderOption(all_args, &first, &provider);
    if (!p.ok()) {
      return UsageError(command, p.status());
    }
    if (!*p) break;
    ++first;
  }
  if (absl::Status st = CheckProviderArgs(provider); !st.ok()) {
    return UsageError(command, st);
  }
  const std::vector<std::string> args(all_args.begin() + static_cast<std::ptrdiff_t>(first), all_args.end());
  const std::size_t want = command == "signal" ? 2 : 1;
  const bool kill = command == "kill";
  unsigned grace_ms = kDefaultKillGraceMs;
  if (kill && args.size() == 3 && args[1] == "--grace") {
    if (!absl::SimpleAtoi(args[2], &grace_ms)) {
      std::fprintf(stderr, "tether kill: --grace wants milliseconds, got '%s'\n%s", args[2].c_str(), kUsage);
      return kExitUsage;
    }
  } else if (args.size() != want) {
    std::fprintf(stderr, "tether %s: expected %s\n%s", command.c_str(),
                 want == 2 ? "REF SIGNAL" : "REF", kUsage);
    return kExitUsage;
  }
  int sig = 0;
  if (command == "signal") {
    absl::StatusOr<int> s = ParseSignal(args[1]);
    if (!s.ok()) {
      std::fprintf(stderr, "tether signal: %s\n", std::string(s.status().message()).c_str());
      return kExitUsage;
    }
    sig = *s;
  }
  absl::StatusOr<std::string> ref = ReadReference(args[0]);
  if (!ref.ok()) {
    PrintError(ref.status());
    return kExitUsage;
  }
  const bool observe = command == "attach" || command == "wait";
  return RunLoop(provider, [&](Transport& t, CliSignals& signals) -> asio::awaitable<int> {
    // status, signal and kill use a control attachment: it works beside an
    // `attach` or `wait` and never takes the exit record or any output.
    ReopenOptions ro;
    ro.control = !observe;
    auto ex = co_await asio::this_coro::executor;
    absl::StatusOr<std::unique_ptr<Process>> p = co_await asio::co_spawn(
        ex, Process::Reopen(t, *ref, ro), asio::bind_cancellation_slot(signals.setup_slot(), asio::use_awaitable));
    signals.EndSetup();
    if (!p.ok()) {
      if (const int sig = signals.setup_signal(); sig != 0) {
        std::fprintf(stderr, "tether %s: %s: %s\n", command.c_str(), SignalName(sig).c_str(),
                     std::string(p.status().message()).c_str());
        co_return 128 + sig;
      }
      PrintError(p.status());
      co_return ExitForError(p.status());
    }
    Process& proc = **p;
    if (command == "attach") co_return co_await Interact(proc, true, Role::kObserver, signals);
    if (command == "wait") co_return co_await Interact(proc, false, Role::kObserver, signals);
    int code = 0;
    absl::StatusOr<ProcessStatus> status = co_await proc.Status();
    if (!status.ok()) {
      PrintError(status.status());
      code = ExitForError(status.status());
    } else if (command == "status") {
      const ProcessStatus& st = *status;
      switch (st.state) {
        case ProcessStatus::State::kRunning:
          std::printf("running pid %d\n", proc.pid());
          break;
        case ProcessStatus::State::kExited:
          if (st.exit->signal) {
            std::printf("exited signal %d\n", *st.exit->signal);
          } else {
            std::printf("exited %d\n", *st.exit->code);
          }
          break;
        case ProcessStatus::State::kUnknown:
          std::printf("unknown\n");
          code = kExitTetherFailure;
          break;
      }
      if (std::fflush(stdout) != 0 && code == 0) code = kExitTetherFailure;
    } else if (command == "signal" && status->state == ProcessStatus::State::kExited) {
      std::fprintf(stderr, "tether signal: the process has exited; nothing was sent\n");
      code = kExitSignalExited;
    } else {
      // kill after the exit still ends what the child left behind.
      absl::Status st = kill ? co_await proc.Terminate(grace_ms) : co_await proc.Signal(sig);
      if (!st.ok()) {
        PrintError(st);
        code = ExitForError(st);
      }
    }
    co_await proc.Disconnect();
    co_return code;
  });
}

}  // namespace tether::cli

namespace tether::cli {

int ConformanceCommand(const std::vector<std::string>& args) {
  ProviderArgs provider;
  ConformanceOptions options;
  for (std::size_t i = 0; i < args.size(); ++i) {
    absl::StatusOr<bool> p = ParseProviderOption(args, &i, &provider);
    if (!p.ok()) {
      return UsageError("conformance", p.status());
    }
    if (*p) continue;
    if (args[i] == "--only" && i + 1 < args.size()) {
      options.only = args[++i];
      continue;
    }
    std::fprintf(stderr, "tether conformance: unknown argument '%s'\n%s", args[i].c_str(), kUsage);
    return kExitUsage;
  }
  if (absl::Status st = CheckProviderArgs(provider); !st.ok()) {
    return UsageError("conformance", st);
  }
  std::printf("%-32s %-8s %-12s %8s  %s\n", "case", "needs", "result", "seconds", "detail");
  std::fflush(stdout);
  options.on_result = [](const ConformanceResult& r) {
    const char* outcome = r.outcome == ConformanceResult::Outcome::kPass        ? "pass"
                          : r.outcome == ConformanceResult::Outcome::kUnsupported ? "unsupported"
                                                                                  : "FAIL";
    std::printf("%-32s %-8s %-12s %8.2f  %s\n", r.name.c_str(), r.capability.c_str(), outcome, r.seconds,
                r.detail.c_str());
    std::fflush(stdout);
  };
  return RunLoop(provider, [&](Transport& t, CliSignals&) -> asio::awaitable<int> {
    std::vector<ConformanceResult> results = co_await RunConformance(t, options);
    int pass = 0, fail = 0, unsupported = 0;
    for (const ConformanceResult& r : results) {
      if (r.outcome == ConformanceResult::Outcome::kPass) ++pass;
      if (r.outcome == ConformanceResult::Outcome::kFail) ++fail;
      if (r.outcome == ConformanceResult::Outcome::kUnsupported) ++unsupported;
    }
    std::printf("%s %s: %d passed, %d failed, %d unsupported\n", std::string(t.name()).c_str(),
                t.sandbox_id().c_str(), pass, fail, unsupported);
    co_return fail == 0 && !results.empty() ? 0 : 1;
  });
}

}  // namespace tether::cli
