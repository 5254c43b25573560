#include "host/cli/interact.h"

#include <fcntl.h>
#include <signal.h>
#include <termios.h>
#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "host/cli/stdio.h"
#include "host/transports/forwarding_transport.h"
#include "tether/errors.h"
#include "tether/providers.h"

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

void PrintError(const absl::Status& st) {
  std::fprintf(stderr, "tether: %s\n", PrintableMessage(st.message()).c_str());
}

int ExitForError(const absl::Status& st) {
  if (absl::IsNotFound(st)) return kExitNotFound;
  if (absl::IsPermissionDenied(st)) return kExitCannotExecute;
  if (absl::IsInvalidArgument(st)) return kExitUsage;
  return kExitTetherFailure;
}

namespace {

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

asio::awaitable<void> PumpStdin(Process& p, AsyncFd& in) {
  std::unique_ptr<char[]> buf(new char[kMaxWriteBytes]);
  while (true) {
    absl::StatusOr<std::size_t> n = co_await in.ReadSome({buf.get(), kMaxWriteBytes});
    if (!n.ok() || *n == 0) break;
    if (!(co_await p.Write(std::string_view(buf.get(), *n))).ok()) co_return;  // input closed
  }
  co_await p.CloseStdin();
}

// Says on stderr what of the output this reader will never see, once: bytes
// the supervisor dropped while nobody was attached (its ring keeps the
// newest 1 MiB per stream), and bytes asked for with --stdout-from or
// --stderr-from that an earlier reader had already taken (the supervisor
// keeps only what nobody acknowledged).
class MissingOutput {
 public:
  MissingOutput(const Process& p, ResumeFrom from) : p_(p), from_(from) {}
  void Report() {
    for (int i = 0; i < 2; ++i) {
      const StreamId id = i == 1 ? StreamId::kStderr : p_.has_pty() ? StreamId::kPty : StreamId::kStdout;
      const char* name = i == 1 ? "stderr" : p_.has_pty() ? "terminal output" : "stdout";
      const OutputMissing m = p_.output_missing(id);
      if (m.dropped > told_[i].dropped) {
        std::fprintf(stderr,
                     "tether: %llu bytes of %s were lost: the supervisor dropped them while nobody was attached "
                     "(it keeps the newest 1 MiB of each stream)\n",
                     static_cast<unsigned long long>(m.dropped - told_[i].dropped), name);
      }
      if (m.read_earlier > told_[i].read_earlier && from_[i]) {
        std::fprintf(stderr,
                     "tether: --%s-from %llu: the next %llu bytes were read by an earlier reader and are no "
                     "longer kept; %s resumes at offset %llu\n",
                     i == 1 ? "stderr" : "stdout", static_cast<unsigned long long>(*from_[i]),
                     static_cast<unsigned long long>(m.read_earlier), name,
                     static_cast<unsigned long long>(*from_[i] + m.dropped + m.read_earlier));
      }
      told_[i] = m;
    }
  }

 private:
  const Process& p_;
  ResumeFrom from_;
  OutputMissing told_[2];
};

}  // namespace

asio::awaitable<int> Interact(Process& p, bool forward_stdin, Role role, CliSignals& signals, ResumeFrom from) {
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

  // (Before each chunk is written: a reattach's gap comes before its output.)
  MissingOutput missing(p, from);
  bool stdout_gone = false, stderr_gone = false;
  int stdout_errno = 0;
  bool detached = false;
  while (true) {
    absl::StatusOr<std::optional<OutputChunk>> chunk = co_await p.Read();
    missing.Report();
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

namespace {

// --supervisor and --no-upload: the transport's own, with the policy added
// (a decorator runs every start through the exec channel and its script).
class SupervisorPolicy final : public internal::ForwardingTransport {
 public:
  SupervisorPolicy(Transport& inner, std::string path, bool upload)
      : ForwardingTransport(inner), path_(std::move(path)), upload_(upload) {}
  ScriptOverrides script_overrides() const override {
    ScriptOverrides o = inner().script_overrides();
    o.supervisor_path = path_;
    o.upload_supervisor = upload_;
    return o;
  }
  boost::asio::awaitable<absl::Status> PutNewFile(std::string path, std::string_view bytes, int mode) override {
    co_return co_await inner().PutNewFile(std::move(path), bytes, mode);
  }

 private:
  std::string path_;
  bool upload_;
};

}  // namespace

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
  ProviderHooks hooks;
  if (::isatty(2)) {
    // Long uploads (slow channels) show their progress.
    hooks.upload_progress = [](std::size_t done, std::size_t total) {
      std::fprintf(stderr, "\rtether: uploading the supervisor: %zu%%", total ? done * 100 / total : 100);
      if (done == total) std::fputs("\r\033[K", stderr);
    };
  }
  absl::StatusOr<std::shared_ptr<Transport>> transport =
      MakeProviderTransport(io.get_executor(), provider.provider, provider.flags, hooks);
  if (!transport.ok()) {
    PrintError(transport.status());
    return kExitTetherFailure;
  }
  if (!provider.supervisor_path.empty() || !provider.upload_supervisor) {
    // The sandbox's supervisor policy, for every start and reopen.
    transport = std::shared_ptr<Transport>(
        std::make_shared<SupervisorPolicy>(**transport, provider.supervisor_path, provider.upload_supervisor));
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

}  // namespace tether::cli
