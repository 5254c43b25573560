// Probe and supervisor upload for any provider whose sandbox runs a POSIX
// shell: a pure probe script and its parser, and an upload that checks
// sha256 inside the sandbox and installs atomically. Everything goes
// through a ShellRunner ("run this script, this on its stdin, give me its
// stdout"); ExecShellRunner() makes one from any Transport::Exec, and the
// command provider passes its own. A transport overrides PutFile only
// where it has a native file API; Probe can always be ShellProbe.
//
//   ShellRunner run = ExecShellRunner(transport);
//   absl::StatusOr<SandboxInfo> info = co_await ShellProbe(run, "my sandbox", "");
//   absl::Status st = co_await ShellPutFile(run, path, bytes, 0700, {});
//
// The sandbox needs sh, uname, id, mkdir, chmod, mv, cut, head and sha256sum
// (coreutils or busybox); text tunnels also base64.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tether/transport.h"

namespace tether {

inline constexpr std::size_t kMaxScriptOutput = 64 * 1024;  // bytes a setup script may print
inline constexpr std::size_t kMaxSandboxPath = 4096;         // PATH_MAX

struct ScriptResult {
  std::string out;                 // its stdout (at most kMaxScriptOutput)
  std::string diag;                // the channel's stderr tail, for messages
  std::optional<int> exit_code;    // where the channel reports it
  // Not OK when the answer did not end cleanly: the channel's read failed
  // (a cut, or an answer lost after the script ran) after `out`. A caller
  // that finds its marker line in `out` has its answer anyway; one that
  // does not reports this (UNAVAILABLE), not a broken sandbox.
  absl::Status cut;
};

// Runs `script` with sh in the sandbox, `input` on its stdin (then EOF).
// (`input` is a view: the caller awaits the call.)
using ShellRunner =
    std::function<boost::asio::awaitable<absl::StatusOr<ScriptResult>>(std::string script, std::string_view input)>;

// Writes `input` to a channel already running a script (in
// 64 KiB pieces, reporting them to `progress`), sends EOF,
// reads its stdout to the end (at most kMaxScriptOutput) and closes it.
boost::asio::awaitable<absl::StatusOr<ScriptResult>> RunScriptOn(
    Channel& channel, std::string_view input, const std::function<void(std::size_t, std::size_t)>& progress);

// Runs scripts as transport.Exec({"/bin/sh", "-c", script}). `progress`
// (may be empty) sees the input as it is sent. `transport` must outlive it.
ShellRunner ExecShellRunner(Transport& transport,
                            std::function<void(std::size_t, std::size_t)> progress = {});

// The probe: makes the private root $TMPDIR/tether-<uid> (0700, ours, not a
// symlink; /tmp when TMPDIR is unset or relative) with run/ and bin/, and
// prints uname -m, the root and tether-probe-ok.
std::string ProbeScript();

// Parses the probe's output: kUnavailable when it failed or said anything
// malformed (no marker, a relative or unclean root, control characters, an
// architecture that is not a plain word). `arch` overrides the detected
// one; arm64 and amd64 are named aarch64 and x86_64. `where` names the
// sandbox in messages.
absl::StatusOr<SandboxInfo> ParseProbeOutput(std::string_view out, std::string_view arch, std::string_view where);

// ProbeScript through `run`, then ParseProbeOutput.
boost::asio::awaitable<absl::StatusOr<SandboxInfo>> ShellProbe(const ShellRunner& run, std::string where,
                                                               std::string arch);

struct ShellUploadOptions {
  // Binary: exact bytes on stdin. Text: small files as base64 lines on
  // stdin (never in a command line: they may carry a secret), larger ones
  // as base64 pieces in command lines (for channels that carry only text or
  // only one-shot commands).
  TunnelMode tunnel = TunnelMode::kBinary;
  std::function<void(std::size_t, std::size_t)> progress;  // text pieces sent (bytes, total)
  // path + "\n" + sha256 already verified in this sandbox; may be null.
  std::set<std::string>* installed = nullptr;
  // The caller knows the file is not there (a start script said so): no
  // call is spent checking for a copy.
  bool known_missing = false;
};

// Installs `bytes` at `path` with `mode`, atomically and checked with
// sha256 inside the sandbox; a file already there with that content is
// left alone. A failed upload leaves no partial file.
boost::asio::awaitable<absl::Status> ShellPutFile(const ShellRunner& run, std::string path, std::string_view bytes,
                                                  int mode, ShellUploadOptions options);

// For transports with a file API of their own (PutFile through the
// provider, the shell around it). `who` prefixes the error messages
// ("e2b: "). Whether `path` is a regular file, not a symlink, whose sha256
// is `sha256_hex` (kUnavailable when the sandbox's answer is neither):
boost::asio::awaitable<absl::StatusOr<bool>> ShellHasFile(const ShellRunner& run, std::string who,
                                                          std::string path, std::string sha256_hex);
// Moves `tmp` (the provider put it there) to `path` with `mode` when its
// sha256 is `sha256_hex`, else removes it: kDataLoss, nothing at `path`.
// The same script first removes `leftovers` (temporary names of the
// caller's own uploads that failed: what a cut upload may have left).
boost::asio::awaitable<absl::Status> ShellPlaceFile(const ShellRunner& run, std::string who, std::string tmp,
                                                    std::string path, std::string sha256_hex, int mode,
                                                    std::size_t size, std::vector<std::string> leftovers = {});

// Quotes `arg` for a POSIX shell: 'arg' with every ' as '\''.
std::string ShellQuote(std::string_view arg);

}  // namespace tether
