// `tether-supervisor selftest`: for image builders. Checks what the
// supervisor needs in this image and prints one line per requirement, then
// exits 0 when every line is ok and 1 otherwise:
//
//   ok proc: /proc/self/stat parsed, /proc/self/exe -> /usr/libexec/tether/tether-supervisor
//   ok private-dir: /var/tmp/tether-1000 (refused: /tmp: noexec)
//   missing pty: posix_openpt: No such file or directory (mount devpts at /dev/pts ...)
//
// Requirements: proc, pty, private-dir, subreaper, signals, exec. The
// private directory is looked for in the host's candidate roots, in order
// (CandidateRoots); the first that works is the one a launch would use, and
// the line says why each earlier one was refused. Nothing is left behind:
// what a check creates it removes (the root `<candidate>/tether-<uid>` too,
// when the check made it).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/command_line.h"

namespace tether::supervisor {

inline constexpr int kSelftestChildTimeoutMs = 5000;  // any child a check starts

// One requirement's verdict.
struct SelftestCheck {
  bool ok = false;
  std::string name;    // "proc", "pty", "private-dir", ...
  std::string detail;  // what was found; when missing, why and what to change
};

// "ok NAME: detail" or "missing NAME: detail", without a newline.
std::string FormatCheck(const SelftestCheck& check);

// 0 when every check is ok, else 1.
int SelftestExitStatus(const std::vector<SelftestCheck>& checks);

// The value of NAME in "NAME=value" strings; nullopt when absent.
std::optional<std::string> EnvValue(const std::vector<std::string>& env, std::string_view name);

// The candidate roots of the private directory, in the host's order: $TMPDIR
// (absolute only), /tmp, /var/tmp, /dev/shm, $HOME/.cache (absolute HOME only).
// Duplicates are dropped (TMPDIR=/tmp). The private root is "<candidate>/tether-<uid>".
std::vector<std::string> CandidateRoots(const std::optional<std::string>& tmpdir,
                                        const std::optional<std::string>& home);

// A short reason for an errno that refused a candidate: "read-only" (EROFS),
// "noexec" (EACCES from exec on a noexec mount), "no space", ...
std::string RefusalReason(int err);

// How one candidate fared.
struct RootVerdict {
  std::string candidate;  // e.g. "/tmp"
  std::string root;       // "<candidate>/tether-<uid>"
  std::string refused;    // empty when usable, else why ("noexec", "read-only", ...)
};

// The private-dir line from the candidates tried in order (the last usable
// one, if any, ends the list). Pure.
SelftestCheck PrivateDirCheck(const std::vector<RootVerdict>& tried);

// Tries `candidate` as a launch would: creates "<candidate>/tether-<uid>"
// (0700, not a symlink, ours), binds a Unix socket in a directory inside it,
// and executes a copy of `exe` (an executable to copy; the running binary)
// from there. Removes what it created.
RootVerdict ProbeRoot(const std::string& candidate, const std::string& exe);

// The other requirements, each on this process.
SelftestCheck CheckProc();
SelftestCheck CheckPty();
SelftestCheck CheckSubreaper();
SelftestCheck CheckSignals();
SelftestCheck CheckShell(const std::string& shell);  // "/bin/sh" in the selftest

// All checks, in the order printed. `env` is the ambient environment.
std::vector<SelftestCheck> RunSelftest(const std::vector<std::string>& env);

// Entry point: prints the lines on stdout, returns the exit status.
int SelftestMain(const protocol::SelftestCommand& cmd, const std::vector<std::string>& env);

}  // namespace tether::supervisor
