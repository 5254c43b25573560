// tether: run a process inside a sandbox through the static supervisor.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "host/cli/commands.h"
#include "host/support/trace.h"
#include "tether/errors.h"
#include "tether/providers.h"
#include "tether/protocol/version.h"

namespace {

int Main(int argc, char** argv) {
  namespace cli = tether::cli;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    std::fputs(cli::Usage(), args.empty() ? stderr : stdout);
    return args.empty() ? cli::kExitUsage : 0;
  }
  const std::string cmd = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (cmd == "version" || cmd == "--version") {
    std::printf("tether %s (protocol %u)\n", tether::kTetherVersion, tether::kProtocolVersion);
    return 0;
  }
  if (cmd == "run" || cmd == "start") {
    absl::StatusOr<cli::RunArgs> run = cli::ParseRunArgs(rest);
    if (!run.ok()) {
      std::fprintf(stderr, "tether %s: %s\n%s", cmd.c_str(), tether::PrintableMessage(run.status().message()).c_str(),
                   cli::Usage());
      return cli::kExitUsage;
    }
    return cmd == "run" ? cli::RunCommand(*run) : cli::StartCommand(*run);
  }
  if (cmd == "attach" || cmd == "wait" || cmd == "status" || cmd == "signal" || cmd == "kill") {
    // A reference given in argv is readable by every local user through
    // /proc/PID/cmdline, which shows these very strings: once copied they
    // are overwritten in place (as mysql does with -pPASSWORD), leaving
    // that window open for microseconds instead of the whole wait.
    const auto hide = [argv](std::size_t i) {
      for (char* c = argv[i + 2]; *c != '\0'; ++c) *c = 'x';
    };
    return cli::ReferenceCommand(cmd, rest, hide);
  }
  if (cmd == "conformance") return cli::ConformanceCommand(rest);
  std::fprintf(stderr, "tether: unknown command '%s'\n%s", cmd.c_str(), cli::Usage());
  return cli::kExitUsage;
}

}  // namespace

// Before anything opens a descriptor: closed stdio gets /dev/null. From the
// executable's .preinit_array, which runs before any shared library's
// initializers: gRPC's (linked for the modal provider) opens an eventfd
// before main(), which took a closed fd 0 and was then read as our stdin.
// (Only system calls in it: libc's own state may not be ready yet.)
namespace {
void PrepareStdioEarly(int, char**, char**) { tether::cli::PrepareStdio(); }
}  // namespace
__attribute__((section(".preinit_array"), used)) static void (*const tether_prepare_stdio)(int, char**, char**) =
    PrepareStdioEarly;

int main(int argc, char** argv) {
  // (Again, for a build whose loader skipped .preinit_array: idempotent.)
  tether::cli::PrepareStdio();
  tether::internal::Trace("cli.main");
  // tether ends with exit(): the providers' libraries need not tidy up, and
  // OpenSSL's tidying races with gRPC's threads (tether/providers.h).
  tether::LeaveProviderLibrariesToExit();
  // Signals meant for the job stay pending until our handlers exist (the
  // event loop unblocks them): a signal in the first milliseconds must not
  // kill tether either.
  tether::cli::BlockJobSignals();
  // gRPC (the modal provider) logs its own lines ("E1205 ... Handshake
  // failed") to our stderr before tether reports the same failure as one
  // message. Quiet unless the user asked for its logs (GRPC_VERBOSITY set);
  // read by gRPC when it starts, later than this.
  ::setenv("GRPC_VERBOSITY", "NONE", /*overwrite=*/0);
  try {
    return Main(argc, argv);
  } catch (const std::exception& e) {
    // Resource exhaustion (no descriptors for the event loop, no memory) and
    // anything else unforeseen: a message and 125, never an abort.
    std::fprintf(stderr, "tether: %s\n", tether::PrintableMessage(e.what()).c_str());
  } catch (...) {
    std::fprintf(stderr, "tether: unexpected failure\n");
  }
  return tether::cli::kExitTetherFailure;
}
