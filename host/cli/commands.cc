#include "host/cli/commands.h"

#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "host/cli/stdio.h"
#include "host/command_transport.h"
#include "host/conformance.h"
#include "host/local_transport.h"
#include "host/process.h"

namespace tether::cli {

namespace asio = boost::asio;

namespace {

constexpr unsigned kTerminateGraceMs = 2000;     // when our own output has gone away
constexpr unsigned kDefaultKillGraceMs = 5000;   // `tether kill` without --grace

void PrintError(const absl::Status& st) {
  std::fprintf(stderr, "tether: %s\n", std::string(st.message()).c_str());
}

int ExitForError(const absl::Status& st) {
  if (absl::IsNotFound(st)) return kExitNotFound;
  if (absl::IsPermissionDenied(st)) return kExitCannotExecute;
  if (absl::IsInvalidArgument(st)) return kExitUsage;
  return kExitTetherFailure;
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

asio::awaitable<void> PumpStdin(Process& p, AsyncFd& in) {
  std::unique_ptr<char[]> buf(new char[kMaxWriteBytes]);
  while (true) {
    absl::StatusOr<std::size_t> n = co_await in.ReadSome({buf.get(), kMaxWriteBytes});
    if (!n.ok() || *n == 0) break;
    if (!(co_await p.Write(std::string_view(buf.get(), *n))).ok()) co_return;  // input closed
  }
  co_await p.CloseStdin();
}

// Connects the CLI's stdio to `p` until the exit; returns the CLI status.
asio::awaitable<int> Interact(Process& p, bool forward_stdin) {
  auto ex = co_await asio::this_coro::executor;
  std::optional<RawTerminal> raw;
  if (p.has_pty()) raw.emplace();
  // Our terminal's size changes follow to the remote one.
  asio::signal_set winch(ex);
  std::function<void(boost::system::error_code, int)> on_winch = [&](boost::system::error_code ec, int) {
    if (ec) return;
    if (auto size = OwnTerminalSize()) {
      asio::co_spawn(ex, [&p, size]() -> asio::awaitable<void> { co_await p.Resize(size->first, size->second); },
                     asio::detached);
    }
    winch.async_wait(on_winch);
  };
  if (p.has_pty()) {
    winch.add(SIGWINCH);
    winch.async_wait(on_winch);
  }
  AsyncFd in(ex, 0), out(ex, 1), err(ex, 2);
  // PumpStdin borrows `p` and `in`: it is joined before they go away.
  bool stdin_done = !forward_stdin;
  asio::steady_timer stdin_joined(ex, asio::steady_timer::time_point::max());
  if (forward_stdin) {
    asio::co_spawn(ex, PumpStdin(p, in), [&](std::exception_ptr e) {
      if (e) std::rethrow_exception(e);
      stdin_done = true;
      stdin_joined.cancel();
    });
  }

  // Signals meant for the job go to the child's process group.
  asio::signal_set signals(ex, SIGINT, SIGTERM, SIGHUP);
  std::function<void(boost::system::error_code, int)> on_signal =
      [&](boost::system::error_code ec, int sig) {
        if (ec) return;
        asio::co_spawn(ex, [&p, sig]() -> asio::awaitable<void> { co_await p.Signal(sig); }, asio::detached);
        signals.async_wait(on_signal);
      };
  signals.async_wait(on_signal);

  if (p.output_gap()) std::fputs("tether: output was lost while nobody was attached\n", stderr);
  bool output_gone = false;
  while (true) {
    absl::StatusOr<std::optional<OutputChunk>> chunk = co_await p.Read();
    if (!chunk.ok()) {
      PrintError(chunk.status());
      break;
    }
    if (!*chunk) break;
    if (output_gone) continue;
    AsyncFd& dst = (*chunk)->stream == StreamId::kStderr ? err : out;
    if (!(co_await dst.WriteAll((*chunk)->bytes)).ok()) {
      // Our reader has gone (EPIPE): the job cannot deliver output any more.
      output_gone = true;
      co_await p.Terminate(kTerminateGraceMs);
    }
  }
  int code = kExitTetherFailure;
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
  boost::system::error_code ignored;
  signals.cancel(ignored);
  winch.cancel(ignored);
  in.Cancel();
  while (!stdin_done) co_await stdin_joined.async_wait(asio::as_tuple(asio::use_awaitable));
  co_return code;
}

constexpr std::size_t kCliOutputWindowBytes = 1 << 20;

StartOptions ToStartOptions(const RunArgs& args) {
  StartOptions opts;
  opts.argv = args.argv;
  opts.cwd = args.cwd;
  opts.env = args.env;
  opts.stdin_pipe = args.stdin_pipe;
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
int RunLoop(const ProviderArgs& provider, std::function<asio::awaitable<int>(Transport&)> body) {
  ::signal(SIGPIPE, SIG_IGN);
  asio::io_context io(1);
  // The transport outlives the loop: handles finish in the background
  // (exit acknowledgements), and some channels poll through it.
  absl::StatusOr<std::unique_ptr<Transport>> transport = MakeTransport(io.get_executor(), provider);
  if (!transport.ok()) {
    PrintError(transport.status());
    return kExitTetherFailure;
  }
  int exit_code = kExitTetherFailure;
  asio::co_spawn(io, body(**transport), [&](std::exception_ptr e, int code) {
    if (e) std::rethrow_exception(e);
    exit_code = code;
  });
  io.run();
  return exit_code;
}

absl::StatusOr<std::string> ReadReference(const std::string& arg) {
  if (arg == "-" || (!arg.empty() && arg[0] == '@')) {
    std::string text;
    if (arg == "-") {
      text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    } else {
      std::ifstream f(arg.substr(1), std::ios::binary);
      if (!f) return absl::InvalidArgumentError(absl::StrCat("cannot read ", arg.substr(1)));
      text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    }
    return text;
  }
  return arg;
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
  return r;
}

int RunCommand(const RunArgs& args) {
  return RunLoop(args.provider, [&](Transport& t) -> asio::awaitable<int> {
    absl::StatusOr<std::unique_ptr<Process>> p = co_await Process::Start(t, ToStartOptions(args));
    if (!p.ok()) {
      PrintError(p.status());
      co_return ExitForError(p.status());
    }
    co_return co_await Interact(**p, args.stdin_pipe);
  });
}

int StartCommand(const RunArgs& args) {
  return RunLoop(args.provider, [&](Transport& t) -> asio::awaitable<int> {
    absl::StatusOr<std::unique_ptr<Process>> p = co_await Process::Start(t, ToStartOptions(args));
    if (!p.ok()) {
      PrintError(p.status());
      co_return ExitForError(p.status());
    }
    absl::StatusOr<std::string> ref = (*p)->Reference();
    if (!ref.ok()) {
      PrintError(ref.status());
      co_return kExitTetherFailure;
    }
    co_await (*p)->Disconnect();
    std::printf("%s\n", ref->c_str());
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
  return RunLoop(provider, [&](Transport& t) -> asio::awaitable<int> {
    absl::StatusOr<std::unique_ptr<Process>> p = co_await Process::Reopen(t, *ref);
    if (!p.ok()) {
      PrintError(p.status());
      co_return ExitForError(p.status());
    }
    Process& proc = **p;
    if (command == "attach") co_return co_await Interact(proc, true);
    if (command == "wait") co_return co_await Interact(proc, false);
    int code = 0;
    if (command == "status") {
      absl::StatusOr<ProcessStatus> status = co_await proc.Status();
      if (!status.ok()) {
        PrintError(status.status());
        co_return ExitForError(status.status());
      }
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
    } else {
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
  return RunLoop(provider, [&](Transport& t) -> asio::awaitable<int> {
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
