// tether: run a process inside a sandbox through the static supervisor.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "host/cli/run_command.h"
#include "tether/protocol/version.h"

namespace {

constexpr char kUsage[] =
    "usage: tether <command> [options]\n"
    "\n"
    "commands:\n"
    "  run [--provider local] [--cwd DIR] [--env NAME=VALUE]... -- ARGV...\n"
    "        run ARGV in the sandbox; stdin, stdout and stderr are forwarded\n"
    "        byte for byte and tether exits with the child's status\n"
    "        (128+N when signal N ended it)\n"
    "  version   print the tether and protocol versions\n";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? tether::cli::kExitUsage : 0;
  }
  if (args[0] == "version" || args[0] == "--version") {
    std::printf("tether %s (protocol %u)\n", tether::kTetherVersion, tether::kProtocolVersion);
    return 0;
  }
  if (args[0] == "run") {
    absl::StatusOr<tether::cli::RunArgs> run = tether::cli::ParseRunArgs({args.begin() + 1, args.end()});
    if (!run.ok()) {
      std::fprintf(stderr, "tether run: %s\n%s", std::string(run.status().message()).c_str(),
                   tether::cli::kRunUsage);
      return tether::cli::kExitUsage;
    }
    return tether::cli::RunCommand(*run);
  }
  std::fprintf(stderr, "tether: unknown command '%s'\n%s", args[0].c_str(), kUsage);
  return tether::cli::kExitUsage;
}
