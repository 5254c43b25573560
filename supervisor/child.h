// Starting the one child: environment boundary, executable lookup, and a
// fork/exec with pipes into its own session and process group.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "protocol/limits.h"
#include "tether/protocol/tether.pb.h"

namespace tether::supervisor {

// Search path used when neither the request nor the base environment has PATH.
inline constexpr char kDefaultPath[] = "/usr/local/bin:/usr/bin:/bin";

// The environment boundary: with Launch.inherit_env the child gets the launch
// call's environment except the variables below; variables the Launch names
// explicitly (Launch.env) always pass, whatever their name or value.
//
// A name is scrubbed when, upper-cased, it
//   contains  KEY, SECRET, TOKEN, PASSW (PASSWORD, PASSWD), PASSPHRASE,
//             PASSFILE, CREDENTIAL, AUTH, PRIVATE, COOKIE, DATABASE_URL,
//             CONNECTION_STRING
//   has the word (split at anything but A-Z and 0-9)
//             PASS, PWD, PW, PAT, DSN
//   starts with  AWS_, AZURE_, TETHER_
//   is        KUBECONFIG, DOCKER_CONFIG
// unless it is one of PWD, GIT_AUTHOR_NAME, GIT_AUTHOR_EMAIL,
// GIT_AUTHOR_DATE. A variable is also scrubbed, whatever its name, when its
// value holds a URL with a password (scheme://user:password@host, or
// scheme://:password@host).
//
// So DATABASE_URL, MYSQL_PWD, PGPASSWORD, SMTP_PASS, GH_PAT, SENTRY_DSN,
// GOOGLE_APPLICATION_CREDENTIALS, SSH_AUTH_SOCK, XAUTHORITY, KUBECONFIG,
// DOCKER_AUTH_CONFIG, NPM_CONFIG__AUTH, AWS_PROFILE and AZURE_CLIENT_ID are
// scrubbed; PATH, HOME, USER, LOGNAME, SHELL, TERM, LANG, LC_*, TZ, PWD,
// OLDPWD, TMPDIR, HOSTNAME, EDITOR, PAGER and DISPLAY pass (child.cc holds
// the table with the reason for each pattern).
bool IsCredentialShaped(std::string_view name);

// True when `value` holds a URL that carries a password:
// scheme://[user]:password@host (a non-empty password).
bool HasUrlPassword(std::string_view value);

// Checks env names (non-empty, no '=' or NUL) and builds the child's
// environment: base (the ambient environment less what the boundary above
// scrubs, when inherit is set; else empty) overlaid with `requested`.
// kInvalidArgument on a bad name.
absl::StatusOr<std::vector<std::string>> BuildEnvironment(
    const google::protobuf::RepeatedPtrField<wire::EnvVar>& requested, bool inherit,
    char** ambient);

// Executable lookup: an absolute path is checked (exists, executable); a bare
// name is searched in PATH from `env`; a relative path with a slash is
// rejected unless `allow_relative` (then resolved against `cwd`).
// kNotFound / kPermissionDenied / kInvalidArgument with a clear message.
absl::StatusOr<std::string> ResolveExecutable(const std::string& name,
                                              const std::vector<std::string>& env,
                                              const std::string& cwd, bool allow_relative);

struct ChildSpec {
  std::string path;                // resolved executable
  std::vector<std::string> argv;   // argv[0] as requested
  std::vector<std::string> env;    // "NAME=value"
  std::string cwd;                 // empty: inherit
  bool stdin_pipe = false;         // else /dev/null (ignored with a pty)
  bool pty = false;                // run on a new terminal of cols x rows
  unsigned short cols = 80, rows = 24;
};

struct Child {
  pid_t pid = -1;
  int stdin_fd = -1;   // -1 when stdin is /dev/null; with a pty, a dup of the master
  int stdout_fd = -1;  // with a pty: the master (combined output)
  int stderr_fd = -1;  // -1 with a pty
};

// Limits on a terminal's size (cells): protocol/limits.h.
using protocol::kMaxPtyCells;

// Sets the terminal size of a pty master; the kernel signals SIGWINCH to the
// terminal's foreground process group.
absl::Status ResizePty(int master_fd, unsigned cols, unsigned rows);

// Forks and execs. The child calls setsid (so pid == pgid), resets its signal
// mask and dispositions, and gets exactly argv/env/cwd. With `pty`, its
// stdin, stdout and stderr are the slave of a new pty, which becomes its
// controlling terminal (TIOCSCTTY). Returns once exec has
// succeeded or failed; exec and chdir errors come back as kNotFound /
// kPermissionDenied / kFailedPrecondition. Parent-side fds are non-blocking
// and close-on-exec.
absl::StatusOr<Child> SpawnChild(const ChildSpec& spec);

}  // namespace tether::supervisor
