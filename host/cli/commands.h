// The CLI's commands. `run` runs ARGV with the CLI's own stdio attached
// exactly (bytes, stdin EOF) and exits with the child's status; `start`
// leaves it running and prints a reference that `attach`, `status`,
// `signal`, `kill` and `wait` take.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tether/providers.h"

namespace tether::cli {

// Exit statuses of the CLI itself (the child's own status passes through).
inline constexpr int kExitSignalExited = 1;     // `signal` on a process that has exited
inline constexpr int kExitUsage = 2;            // bad invocation
inline constexpr int kExitTetherFailure = 125;  // tether could not do its part
inline constexpr int kExitCannotExecute = 126;
inline constexpr int kExitNotFound = 127;
// Our stdout's reader went away (EPIPE), as a shell reports a command that
// SIGPIPE ended: `run` terminated its process, `attach`/`wait` detached.
inline constexpr int kExitStdoutClosed = 141;

// The supervisor's lease as `--lease-ms` may set it.
inline constexpr unsigned kMinLeaseMs = 200;
inline constexpr unsigned kMaxLeaseMs = 3600 * 1000;

// Call first in main(): opens /dev/null on any of fds 0-2 that is closed.
void PrepareStdio();
// Blocks SIGINT, SIGTERM and SIGHUP until the event loop's handlers are
// installed (they are unblocked then).
void BlockJobSignals();
// True when fd 1 was closed when tether started.
bool StdoutWasClosed();

// Which sandbox: a registered provider (include/tether/providers.h) and its options.
struct ProviderArgs {
  std::string provider = "local";
  ProviderFlags flags;  // --prefix 'ssh -T host', --arch, ... as given
  std::string supervisor_path;    // --supervisor PATH
  bool upload_supervisor = true;  // --no-upload: false
};

// Consumes a provider option at args[*i] (advancing *i past its value):
// --provider NAME or a flag some provider takes. False when args[*i] is not
// one; kInvalidArgument for a bad one (an unknown provider lists the known).
absl::StatusOr<bool> ParseProviderOption(const std::vector<std::string>& args, std::size_t* i,
                                         ProviderArgs* out);
// Checks a complete set of provider options with the provider's parser.
absl::Status CheckProviderArgs(const ProviderArgs& p);

// Splits a command line into words: whitespace separates, '...' and "..."
// quote, backslash escapes (outside single quotes).
absl::StatusOr<std::vector<std::string>> SplitWords(std::string_view line);

struct RunArgs {
  ProviderArgs provider;
  std::string cwd;
  std::vector<std::pair<std::string, std::string>> env;
  bool stdin_pipe = true;
  bool clean_env = false;  // the child's environment is exactly --env
  unsigned lease_ms = 0;   // 0: the supervisor's default (30 s)
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
// (provider options may come first). A reference given inline (not @FILE
// or -) is copied, then `hide(i)` is called with its index in `args`, so
// that main() can overwrite the process's own copy of it.
int ReferenceCommand(const std::string& command, const std::vector<std::string>& args,
                     const std::function<void(std::size_t)>& hide);
// conformance [provider options] [--only SUBSTRING]
int ConformanceCommand(const std::vector<std::string>& args);

// The usage text with %PROVIDERS% in place of the providers; see Usage().
inline constexpr char kUsageTemplate[] =
    "usage: tether <command> [options]\n"
    "\n"
    "  run   [PROVIDER] [--cwd DIR] [--env NAME=VALUE]... [--clean-env] [--no-stdin]\n"
    "        [--lease-ms MS] [--pty [--cols N] [--rows N]] -- ARGV...\n"
    "        run ARGV in the sandbox; stdin, stdout and stderr are forwarded byte\n"
    "        for byte, SIGINT/SIGTERM/SIGHUP go to the child's process group, and\n"
    "        tether exits with the child's status (128+N when signal N ended it).\n"
    "        If our stdout's reader goes away the process is terminated, stderr\n"
    "        is still forwarded, and tether exits 141 (125 for another write\n"
    "        error such as a full disk). A signal during setup cancels the start\n"
    "        (exit 128+N). The process ends if tether is gone for good (no\n"
    "        reattach within the lease); a Ctrl-Z'd tether keeps it.\n"
    "        --cwd: absolute, or on the local provider relative to where tether\n"
    "        runs (default there: tether's own directory)\n"
    "        --clean-env: the child gets only the --env variables, nothing\n"
    "        inherited. Otherwise it inherits the sandbox's environment minus\n"
    "        credential-shaped names (see docs/cli.md, 'What the child inherits')\n"
    "        --lease-ms: the supervisor's lease (200..3600000, default 30000)\n"
    "        --pty runs it on a terminal (size from ours, or 80x24; our size\n"
    "        changes follow; our terminal is raw meanwhile)\n"
    "  start [same options as run] -- ARGV...\n"
    "        start ARGV and leave it running; prints a reference (private JSON,\n"
    "        valid 24 h) for the commands below. If the reference cannot be\n"
    "        written the process is terminated and tether exits 125.\n"
    "        Keep REF in a private file and pass it as @FILE (or - for stdin):\n"
    "        a reference in argv is readable by every local user\n"
    "  attach @FILE [--stdout-from N] [--stderr-from N]\n"
    "                      reattach stdin, stdout and stderr; exits as run does;\n"
    "                      if our stdout's reader goes away it detaches (141)\n"
    "  wait @FILE [--stdout-from N] [--stderr-from N]\n"
    "                      print the remaining output and exit with its status\n"
    "                      (detaches, exit 141, if our stdout's reader goes away)\n"
    "        Output starts at the oldest byte no reader has taken, or with\n"
    "        --stdout-from/--stderr-from at that byte offset of the stream\n"
    "        (a terminal's output is stdout), so that after a killed reader\n"
    "          tether wait @FILE --stdout-from $(stat -c %s out) >> out\n"
    "        is exact. An offset beyond what the stream has produced is an\n"
    "        error (exit 2); bytes from it that are no longer kept are skipped\n"
    "        and counted on stderr. While nobody is attached the supervisor\n"
    "        keeps the newest 1 MiB of each stream: what it dropped is\n"
    "        counted on stderr.\n"
    "  status @FILE        print running pid N, exited CODE|signal SIG, or unknown;\n"
    "                      repeatable: it never takes the exit from wait/attach\n"
    "  signal @FILE SIGNAL send SIGNAL (name like TERM or SIGTERM, or number);\n"
    "                      exits 1 if the process has already exited\n"
    "  kill @FILE [--grace MS]  SIGTERM, then SIGKILL after MS (default 5000);\n"
    "                      then every descendant left, even in new sessions\n"
    "        status, signal and kill work while an attach or wait is running.\n"
    "        REF is @FILE, - (read from stdin) or the JSON itself\n"
    "  conformance [PROVIDER] [--only TEXT] [--rerun-setup-cuts]\n"
    "        run the conformance cases against the provider; prints a table of\n"
    "        pass / fail / unsupported and exits 1 on any failure\n"
    "        --rerun-setup-cuts: (fault-injection targets) a case whose start\n"
    "        lost its setup to a cut (OUTCOME_UNKNOWN) runs once more, marked\n"
    "        so in its row\n"
    "  version             print the tether and protocol versions\n"
    "\n"
    "PROVIDER (before REF for the reference commands):\n"
    "%PROVIDERS%"
    "  and for any provider whose channel runs commands (not local):\n"
    "    --supervisor PATH: a supervisor preinstalled in the sandbox, tried\n"
    "        before /usr/local/libexec/tether/, /usr/libexec/tether/ and PATH\n"
    "    --no-upload: never upload the supervisor; fail naming what was found\n"
    "\n"
    "Exit statuses of tether itself: 2 bad usage, 125 tether could not do its\n"
    "part (setup, resources, a lost connection), 126/127 the command could not\n"
    "be executed / was not found (and 127: the process is gone), 141 stdout\n"
    "closed; otherwise the child's own status.\n";

// The usage text, the providers' section made from the registry.
const char* Usage();

}  // namespace tether::cli
