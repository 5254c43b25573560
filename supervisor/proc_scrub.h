// Keeping secrets out of /proc/PID/environ and /proc/PID/cmdline.
//
// The supervisor's long-lived processes (the daemon, every bridge, the launch
// call that turns into the first bridge, the exchange relay) run as the same
// uid as the child, so the child can read their /proc/PID/environ, and any uid
// can read their /proc/PID/cmdline. The environment they were started with
// holds exactly what the environment boundary scrubs from the child (API keys,
// tokens, passwords; see IsCredentialShaped in child.h), and in exchange mode
// argv carries the Launch frame with its secret.
//
// clearenv() or a new `environ` is not enough: the kernel reads those files
// from the process's original argument and environment block on its stack
// (mm->arg_start..arg_end and env_start..env_end), whatever `environ` points
// to now. So main() captures argv and environ before anything changes them,
// copies what it needs, and ScrubProcessStrings zeroes the original strings
// where they lie (the setproctitle technique) and points `environ` at an
// empty array. What /proc then shows is argv[0] and the mode (argv[1]),
// followed by NUL bytes, and an environment of NUL bytes but for the exec
// tag, when the transport gave one (protocol/command_line.h): how a
// transport that abandons a command's channel finds the command again.
//
//   int main(int argc, char** argv) {
//     char** const envp = environ;  // as the kernel laid it out
//     std::vector<std::string> args(argv, argv + argc);
//     std::vector<std::string> ambient = CopyEnvironment(envp);
//     ScrubProcessStrings(argc, argv, /*keep_args=*/2, envp);
//     ...  // args and ambient from here on; getenv() finds nothing
#pragma once

#include <string>
#include <vector>

namespace tether::supervisor {

// The "NAME=value" strings of `envp` (NULL-terminated; null means none).
std::vector<std::string> CopyEnvironment(char** envp);

// Zeroes the strings argv[keep_args..argc) and every string of `envp` but
// an exec tag in place, wherever each lies, and points `environ` at an
// empty environment. The argv and envp pointer arrays stay valid: the
// zeroed strings are now empty.
void ScrubProcessStrings(int argc, char** argv, int keep_args, char** envp);

// Zeroes the bytes of each string in `strings` and empties it: for copies of
// the ambient environment once they have served.
void EraseStrings(std::vector<std::string>* strings);

}  // namespace tether::supervisor
