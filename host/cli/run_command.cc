#include "host/cli/run_command.h"

#include <signal.h>
#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "host/cli/stdio.h"
#include "host/local_transport.h"
#include "host/process.h"

namespace tether::cli {

namespace asio = boost::asio;

namespace {

constexpr unsigned kTerminateGraceMs = 2000;  // when our own output has gone away

void PrintError(const absl::Status& st) {
  std::fprintf(stderr, "tether: %s\n", std::string(st.message()).c_str());
}

int ExitForStartError(const absl::Status& st) {
  if (absl::IsNotFound(st)) return kExitNotFound;
  if (absl::IsPermissionDenied(st)) return kExitCannotExecute;
  if (absl::IsInvalidArgument(st)) return kExitUsage;
  return kExitTetherFailure;
}

asio::awaitable<void> PumpStdin(Process& p, AsyncFd& in) {
  std::unique_ptr<char[]> buf(new char[kMaxWriteBytes]);
  while (true) {
    absl::StatusOr<std::size_t> n = co_await in.ReadSome({buf.get(), kMaxWriteBytes});
    if (!n.ok() || *n == 0) break;
    if (!(co_await p.Write(std::string_view(buf.get(), *n))).ok()) co_return;  // input closed
  }
  co_await p.CloseStdin();
}

asio::awaitable<void> Main(const RunArgs& args, int* exit_code) {
  auto ex = co_await asio::this_coro::executor;
  absl::StatusOr<std::unique_ptr<Transport>> transport = MakeLocalTransport(ex);
  if (!transport.ok()) {
    PrintError(transport.status());
    *exit_code = kExitTetherFailure;
    co_return;
  }
  StartOptions opts;
  opts.argv = args.argv;
  opts.cwd = args.cwd;
  opts.env = args.env;
  opts.stdin_pipe = true;
  absl::StatusOr<std::unique_ptr<Process>> started = co_await Process::Start(**transport, opts);
  if (!started.ok()) {
    PrintError(started.status());
    *exit_code = ExitForStartError(started.status());
    co_return;
  }
  Process& p = **started;

  AsyncFd in(ex, 0), out(ex, 1), err(ex, 2);
  // PumpStdin borrows `p` and `in`: it is joined before they go away.
  bool stdin_done = false;
  asio::steady_timer stdin_joined(ex, asio::steady_timer::time_point::max());
  asio::co_spawn(ex, PumpStdin(p, in), [&](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
    stdin_done = true;
    stdin_joined.cancel();
  });

  // Signals meant for the job go to the child's process group.
  asio::signal_set signals(ex, SIGINT, SIGTERM, SIGHUP);
  std::function<void(boost::system::error_code, int)> on_signal =
      [&](boost::system::error_code ec, int sig) {
        if (ec) return;
        asio::co_spawn(ex, [&p, sig]() -> asio::awaitable<void> { co_await p.Signal(sig); }, asio::detached);
        signals.async_wait(on_signal);
      };
  signals.async_wait(on_signal);

  bool output_gone = false;
  while (true) {
    absl::StatusOr<std::optional<OutputChunk>> chunk = co_await p.Read();
    if (!chunk.ok()) {
      PrintError(chunk.status());
      break;
    }
    if (!*chunk) break;
    if (output_gone) continue;
    AsyncFd& dst = (*chunk)->stream == StreamId::kStdout ? out : err;
    if (!(co_await dst.WriteAll((*chunk)->bytes)).ok()) {
      // Our reader has gone (EPIPE): the job cannot deliver output any more.
      output_gone = true;
      co_await p.Terminate(kTerminateGraceMs);
    }
  }
  absl::StatusOr<ExitStatus> exit = co_await p.Wait();
  if (!exit.ok()) {
    PrintError(exit.status());
    *exit_code = kExitTetherFailure;
  } else {
    *exit_code = exit->ShellStatus();
  }
  boost::system::error_code ignored;
  signals.cancel(ignored);
  in.Cancel();
  while (!stdin_done) co_await stdin_joined.async_wait(asio::as_tuple(asio::use_awaitable));
  // The process handle finishes in the background: its exit acknowledgement
  // reaches the supervisor, which then closes the channel and io.run() ends.
  started->reset();
}

}  // namespace

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
    if (a == "--provider") {
      absl::StatusOr<std::string> v = value(a);
      if (!v.ok()) return v.status();
      if (*v != "local") {
        return absl::InvalidArgumentError(absl::StrCat("unknown provider '", *v, "' (available: local)"));
      }
      r.provider = *v;
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
    } else if (a.size() > 1 && a[0] == '-') {
      return absl::InvalidArgumentError(absl::StrCat("unknown option '", a, "'"));
    } else {
      break;  // ARGV starts at the first non-option
    }
  }
  r.argv.assign(args.begin() + static_cast<std::ptrdiff_t>(std::min(i, args.size())), args.end());
  if (r.argv.empty()) return absl::InvalidArgumentError("no command given after --");
  return r;
}

int RunCommand(const RunArgs& args) {
  ::signal(SIGPIPE, SIG_IGN);
  asio::io_context io(1);
  int exit_code = kExitTetherFailure;
  asio::co_spawn(io, Main(args, &exit_code), [](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  });
  io.run();
  return exit_code;
}

}  // namespace tether::cli
