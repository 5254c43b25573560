// tether-supervisor: parses its command line (protocol/command_line.h) and
// runs the verb. See launcher.h, bridge.h, exchange.h.
#include <cstdio>
#include <string>
#include <variant>
#include <vector>

#include "protocol/command_line.h"
#include "supervisor/bridge.h"
#include "supervisor/exchange.h"
#include "supervisor/launcher.h"
#include "supervisor/proc_scrub.h"
#include "supervisor/selftest.h"
#include "tether/protocol/version.h"

extern char** environ;

namespace {

using namespace tether;

// Runs one parsed command. Only `launch` and `selftest` (TMPDIR, HOME) get
// the ambient environment.
struct Run {
  std::vector<std::string>* ambient;

  int operator()(const protocol::VersionCommand&) const {
    std::printf("tether-supervisor %s (protocol %u, command line %u)\n", kTetherVersion, kProtocolVersion,
                protocol::kCommandLineRevision);
    return 0;
  }
  int operator()(const protocol::LaunchCommand& c) const { return supervisor::LaunchMain(c, std::move(*ambient)); }
  int operator()(const protocol::BridgeCommand& c) const { return supervisor::BridgeMain(c); }
  int operator()(const protocol::RelayCommand& c) const { return supervisor::RelayMain(c); }
  int operator()(const protocol::ExchangePollCommand& c) const { return supervisor::ExchangeMain(c); }
  int operator()(const protocol::ExchangeCloseCommand& c) const { return supervisor::ExchangeCloseMain(c); }
  int operator()(const protocol::SelftestCommand& c) const { return supervisor::SelftestMain(c, *ambient); }
};

}  // namespace

int main(int argc, char** argv) {
  // First of all: copy the arguments and the environment, then erase them
  // from what /proc shows of us (proc_scrub.h). Only the launch call keeps a
  // copy of the environment, to build the child's from it.
  char** const envp = environ;  // as the kernel laid it out: nothing has changed it yet
  const std::vector<std::string> args(argv, argv + argc);
  std::vector<std::string> ambient = supervisor::CopyEnvironment(envp);
  // The transport's exec tag stays with us (in /proc only), never the child's.
  std::erase_if(ambient, [](const std::string& e) { return protocol::IsExecTag(e); });
  supervisor::ScrubProcessStrings(argc, argv, /*keep_args=*/2, envp);
  const absl::StatusOr<protocol::Command> cmd = protocol::ParseCommandLine(args);
  const bool keeps_env = cmd.ok() && (std::holds_alternative<protocol::LaunchCommand>(*cmd) ||
                                      std::holds_alternative<protocol::SelftestCommand>(*cmd));
  if (!keeps_env) supervisor::EraseStrings(&ambient);
  if (!cmd.ok()) {
    std::fprintf(stderr, "tether-supervisor: %s\n%s", std::string(cmd.status().message()).c_str(),
                 std::string(protocol::CommandLineUsage()).c_str());
    return 2;
  }
  return std::visit(Run{&ambient}, *cmd);
}
