#include "host/cli/commands.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "host/cli/interact.h"
#include "host/cli/signals.h"
#include "host/conformance/conformance.h"
#include "tether/errors.h"
#include "tether/process.h"
#include "tether/providers.h"
#include "host/process/reference.h"

namespace tether::cli {

namespace asio = boost::asio;

namespace {

constexpr unsigned kDefaultKillGraceMs = 5000;   // `tether kill` without --grace

std::string SignalName(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return absl::StrCat("signal ", sig);
  }
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

const char* Usage() {
  static const std::string text = [] {
    std::string providers;
    for (const ProviderInfo& p : Providers()) {
      absl::StrAppend(&providers, "  --provider ", std::string(p.name), p.name == "local" ? "  (the default)" : "", "\n");
      const std::vector<std::string> lines = absl::StrSplit(std::string(p.help), '\n');
      for (const std::string& line : lines) absl::StrAppend(&providers, "        ", line, "\n");
      for (const ProviderOption& o : p.options) {
        absl::StrAppend(&providers, "    ", std::string(o.flag), " VALUE: ", std::string(o.help), "\n");
      }
    }
    std::string t = kUsageTemplate;
    t.replace(t.find("%PROVIDERS%"), std::string_view("%PROVIDERS%").size(), providers);
    return t;
  }();
  return text.c_str();
}

absl::StatusOr<std::vector<std::string>> SplitWords(std::string_view line) { return SplitShellWords(line); }

absl::StatusOr<bool> ParseProviderOption(const std::vector<std::string>& args, std::size_t* i,
                                         ProviderArgs* out) {
  const std::string& a = args[*i];
  if (a == "--no-upload") {
    out->upload_supervisor = false;
    return true;
  }
  if (a == "--supervisor") {
    if (*i + 1 >= args.size()) return absl::InvalidArgumentError("--supervisor needs a value");
    out->supervisor_path = args[++*i];
    if (out->supervisor_path.empty() || out->supervisor_path[0] != '/') {
      return absl::InvalidArgumentError(
          absl::StrCat("--supervisor wants the absolute path of a supervisor in the sandbox, got '",
                       absl::CEscape(out->supervisor_path), "'"));
    }
    return true;
  }
  if (a != "--provider" && !IsProviderFlag(a)) return false;
  if (*i + 1 >= args.size()) return absl::InvalidArgumentError(absl::StrCat(a, " needs a value"));
  const std::string& v = args[++*i];
  if (a == "--provider") {
    if (absl::StatusOr<const ProviderInfo*> info = FindProvider(v); !info.ok()) return info.status();
    out->provider = v;
  } else {
    out->flags.emplace_back(a, v);
  }
  return true;
}

absl::Status CheckProviderArgs(const ProviderArgs& p) {
  absl::StatusOr<const ProviderInfo*> info = FindProvider(p.provider);
  if (!info.ok()) return info.status();
  return ParseProviderFlags(**info, p.flags).status();
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
      continue;
    } else if (a == "--cwd") {
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
    if (!(*FindProvider(r.provider.provider))->same_machine) {
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
                   PrintableMessage(p.status().message()).c_str());
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
    co_return co_await Interact(*p, args.stdin_pipe, Role::kOwner, signals, ResumeFrom{});
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
  std::fprintf(stderr, "tether %s: %s\n%s", command.c_str(), PrintableMessage(why.message()).c_str(), Usage());
  return kExitUsage;
}

int ReferenceCommand(const std::string& command, const std::vector<std::string>& all_args,
                     const std::function<void(std::size_t)>& hide) {
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
  // REF comes first after the provider options; inline, it is a secret that
  // /proc/PID/cmdline would show for our whole life. (Copied already.)
  if (first < all_args.size() && all_args[first] != "-" && !all_args[first].starts_with('@') && hide) {
    hide(first);
  }
  if (absl::Status st = CheckProviderArgs(provider); !st.ok()) {
    return UsageError(command, st);
  }
  // REF, then SIGNAL for `signal`, then the command's options.
  const std::vector<std::string> args(all_args.begin() + static_cast<std::ptrdiff_t>(first), all_args.end());
  const std::size_t want = command == "signal" ? 2 : 1;
  const bool kill = command == "kill";
  const bool observe = command == "attach" || command == "wait";
  unsigned grace_ms = kDefaultKillGraceMs;
  ResumeFrom from;
  for (std::size_t i = std::min(want, args.size()); i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool from_flag = observe && (a == "--stdout-from" || a == "--stderr-from");
    if (!(kill && a == "--grace") && !from_flag) {
      return UsageError(command, absl::InvalidArgumentError(
                                     a.starts_with("-") ? absl::StrCat("unknown option '", a, "'")
                                                        : absl::StrCat("expected ", want == 2 ? "REF SIGNAL" : "REF",
                                                                       " and options, got '", a, "' too")));
    }
    if (i + 1 >= args.size()) return UsageError(command, absl::InvalidArgumentError(absl::StrCat(a, " needs a value")));
    const std::string& v = args[++i];
    if (kill) {
      if (!absl::SimpleAtoi(v, &grace_ms)) {
        return UsageError(command, absl::InvalidArgumentError(absl::StrCat("--grace wants milliseconds, got '", v, "'")));
      }
      continue;
    }
    // A byte offset: digits only (no sign, no blanks), within 64 bits.
    std::uint64_t offset = 0;
    if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || !absl::SimpleAtoi(v, &offset)) {
      return UsageError(command, absl::InvalidArgumentError(absl::StrCat(
                                     a, " wants a byte offset (a whole number, 0 or more), got '", absl::CEscape(v), "'")));
    }
    from[a == "--stderr-from" ? 1 : 0] = offset;
  }
  if (args.size() < want) {
    return UsageError(command, absl::InvalidArgumentError(absl::StrCat("expected ", want == 2 ? "REF SIGNAL" : "REF")));
  }
  int sig = 0;
  if (command == "signal") {
    absl::StatusOr<int> s = ParseSignal(args[1]);
    if (!s.ok()) {
      std::fprintf(stderr, "tether signal: %s\n", PrintableMessage(s.status().message()).c_str());
      return kExitUsage;
    }
    sig = *s;
  }
  absl::StatusOr<std::string> ref = ReadReference(args[0]);
  if (!ref.ok()) {
    PrintError(ref.status());
    return kExitUsage;
  }
  return RunLoop(provider, [&](Transport& t, CliSignals& signals) -> asio::awaitable<int> {
    // status, signal and kill use a control attachment: it works beside an
    // `attach` or `wait` and never takes the exit record or any output.
    ReopenOptions ro;
    ro.control = !observe;
    ro.stdout_from = from[0];
    ro.stderr_from = from[1];
    auto ex = co_await asio::this_coro::executor;
    absl::StatusOr<std::unique_ptr<Process>> p = co_await asio::co_spawn(
        ex, Process::Reopen(t, *ref, ro), asio::bind_cancellation_slot(signals.setup_slot(), asio::use_awaitable));
    signals.EndSetup();
    if (!p.ok()) {
      if (const int sig = signals.setup_signal(); sig != 0) {
        std::fprintf(stderr, "tether %s: %s: %s\n", command.c_str(), SignalName(sig).c_str(),
                     PrintableMessage(p.status().message()).c_str());
        co_return 128 + sig;
      }
      if ((from[0] || from[1]) && absl::IsInvalidArgument(p.status()) &&
          absl::StrContains(p.status().message(), "resume offset")) {
        // An offset beyond what the stream has produced: a bad request (the
        // file it came from is not this job's output), nothing was read.
        std::fprintf(stderr, "tether %s: --stdout-from/--stderr-from: %s\n", command.c_str(),
                     std::string(p.status().message()).c_str());
        co_return kExitUsage;
      }
      PrintError(p.status());
      co_return ExitForError(p.status());
    }
    Process& proc = **p;
    if (command == "attach") co_return co_await Interact(proc, true, Role::kObserver, signals, from);
    if (command == "wait") co_return co_await Interact(proc, false, Role::kObserver, signals, from);
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
    if (args[i] == "--rerun-setup-cuts") {
      options.rerun_setup_cuts = true;
      continue;
    }
    std::fprintf(stderr, "tether conformance: unknown argument '%s'\n%s", args[i].c_str(), Usage());
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
