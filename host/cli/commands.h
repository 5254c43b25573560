// The CLI's commands. `run` runs ARGV with the CLI's own stdio attached
// exactly (bytes, stdin EOF) and exits with the child's status; `start`
// leaves it running and prints a reference that `attach`, `status`,
// `signal`, `kill` and `wait` take.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace tether::cli {

// Exit statuses of the CLI itself (the child's own status passes through).
inline constexpr int kExitUsage = 2;            // bad invocation
inline constexpr int kExitTetherFailure = 125;  // tether could not do its part
inline constexpr int kExitCannotExecute = 126;
inline constexpr int kExitNotFound = 127;

struct RunArgs {
  std::string provider = "local";
  std::string cwd;
  std::vector<std::pair<std::string, std::string>> env;
  bool stdin_pipe = true;
  bool pty = false;
  unsigned cols = 0, rows = 0;  // 0: from our own terminal, else 80x24
  std::vector<std::string> argv;
};

// Parses the arguments after `run` or `start`. kInvalidArgument with the reason.
absl::StatusOr<RunArgs> ParseRunArgs(const std::vector<std::string>& args);

// Each returns the CLI's exit status. `args` are the words after the command.
int RunCommand(const RunArgs& args);
int StartCommand(const RunArgs& args);
// attach REF | status REF | signal REF SIG | kill REF [--grace MS] | wait REF
int ReferenceCommand(const std::string& command, const std::vector<std::string>& args);

inline constexpr char kUsage[] =
    "usage: tether <command> [options]\n"
    "\n"
    "  run   [--provider local] [--cwd DIR] [--env NAME=VALUE]... [--no-stdin]\n"
    "        [--pty [--cols N] [--rows N]] -- ARGV...\n"
    "        run ARGV in the sandbox; stdin, stdout and stderr are forwarded byte\n"
    "        for byte, SIGINT/SIGTERM/SIGHUP go to the child's process group, and\n"
    "        tether exits with the child's status (128+N when signal N ended it).\n"
    "        --pty runs it on a terminal (size from ours, or 80x24; our size\n"
    "        changes follow; our terminal is raw meanwhile)\n"
    "  start [same options as run] -- ARGV...\n"
    "        start ARGV and leave it running; prints a reference (private JSON,\n"
    "        valid 24 h) for the commands below. REF is that JSON, @FILE or -\n"
    "  attach REF          reattach stdin, stdout and stderr; exits as run does\n"
    "  wait REF            print the remaining output and exit with its status\n"
    "  status REF          print running, exited CODE|signal SIG, or unknown\n"
    "  signal REF SIGNAL   send SIGNAL (name like TERM or SIGTERM, or number)\n"
    "  kill REF [--grace MS]  SIGTERM, then SIGKILL after MS (default 5000)\n"
    "  version             print the tether and protocol versions\n";

}  // namespace tether::cli
