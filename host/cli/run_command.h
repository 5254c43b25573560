// `tether run`: run ARGV in a sandbox with the CLI's own stdio attached
// exactly (bytes, stdin EOF), and exit with the child's status.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace tether::cli {

// Exit statuses of the CLI itself (the child's own status passes through).
inline constexpr int kExitUsage = 2;          // bad invocation
inline constexpr int kExitTetherFailure = 125;  // tether could not do its part
inline constexpr int kExitCannotExecute = 126;
inline constexpr int kExitNotFound = 127;

struct RunArgs {
  std::string provider = "local";
  std::string cwd;
  std::vector<std::pair<std::string, std::string>> env;
  std::vector<std::string> argv;
};

// Parses the arguments after `run`. kInvalidArgument with a usage message.
absl::StatusOr<RunArgs> ParseRunArgs(const std::vector<std::string>& args);

// Runs and returns the CLI's exit status.
int RunCommand(const RunArgs& args);

inline constexpr char kRunUsage[] =
    "usage: tether run [--provider local] [--cwd DIR] [--env NAME=VALUE]... -- ARGV...\n";

}  // namespace tether::cli
