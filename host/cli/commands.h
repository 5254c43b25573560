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

// Which sandbox: the local provider, or the command provider through a
// native channel command (see host/command_transport.h).
struct ProviderArgs {
  std::string provider = "local";
  std::vector<std::string> prefix;  // --prefix 'ssh -T host' (split like a shell)
  std::string arch, emulator;       // --arch, --emulator
  std::string tunnel = "binary";    // --tunnel binary|text|exchange
};

// Consumes a provider option at args[*i] (advancing *i past its value).
// False when args[*i] is not one; kInvalidArgument for a bad one.
absl::StatusOr<bool> ParseProviderOption(const std::vector<std::string>& args, std::size_t* i,
                                         ProviderArgs* out);
// Checks a complete set of provider options.
absl::Status CheckProviderArgs(const ProviderArgs& p);

// Splits a command line into words: whitespace separates, '...' and "..."
// quote, backslash escapes (outside single quotes).
absl::StatusOr<std::vector<std::string>> SplitWords(std::string_view line);

struct RunArgs {
  ProviderArgs provider;
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
// (provider options may come first)
int ReferenceCommand(const std::string& command, const std::vector<std::string>& args);
// conformance [provider options] [--only SUBSTRING]
int ConformanceCommand(const std::vector<std::string>& args);

inline constexpr char kUsage[] =
    "usage: tether <command> [options]\n"
    "\n"
    "  run   [PROVIDER] [--cwd DIR] [--env NAME=VALUE]... [--no-stdin]\n"
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
    "  conformance [PROVIDER] [--only TEXT]\n"
    "        run the conformance cases against the provider; prints a table of\n"
    "        pass / fail / unsupported and exits 1 on any failure\n"
    "  version             print the tether and protocol versions\n"
    "\n"
    "PROVIDER (before REF for the reference commands):\n"
    "  --provider local    this machine, a private directory (the default)\n"
    "  --provider command --prefix 'CMD...'\n"
    "        any command that runs a shell command line inside the sandbox with\n"
    "        stdio connected, e.g. 'ssh -T host', 'docker exec -i CTR sh -c',\n"
    "        'kubectl exec -i POD -- sh -c'\n"
    "  --arch x86_64|aarch64 --emulator PROG   (command) skip detection and run\n"
    "        the supervisor under PROG, e.g. qemu-aarch64\n"
    "  --tunnel binary|text|exchange   (command) text: the channel carries only\n"
    "        text lines; frames go as armored lines and a failed channel is\n"
    "        reattached. exchange: only one-shot commands; tether polls a relay\n";

}  // namespace tether::cli
