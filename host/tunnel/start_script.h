// Starting in one native call: the shell scripts a stream tunnel runs in
// the sandbox, and the one line they answer with when they cannot launch.
// Pure (no I/O); tests/host/tunnel/start_script_test.cc runs them with a real sh.
//
// Start (StartScript): one Exec of `sh -c SCRIPT` that
//   1. finds the private state root: the first of $TMPDIR (when absolute),
//      /tmp, /var/tmp, /dev/shm, $HOME/.cache where <dir>/tether-<uid>/run
//      can be made 0700, ours and not a symlink (a read-only /tmp is passed);
//   2. finds a supervisor: the path the caller names, then the preinstalled
//      ones (/usr/local/libexec/tether/tether-supervisor,
//      /usr/libexec/tether/tether-supervisor, tether-supervisor on PATH),
//      each accepted when its --version says protocol 1 and command line
//      revision 2 or later; then our own content-addressed binary in the
//      first root whose bin/ has it (ours, not a symlink, executable, the
//      expected size) or could take it (writable, and a file there runs);
//   3. execs `SUPERVISOR launch [--text] --state-root ROOT/run
//      [--expect-sha256 HASH]`: the supervisor hashes itself (no 1 MB of
//      shell hashing per start) and reads the Launch frame the host wrote.
// Otherwise it prints one line, "tether-start-need WHAT ...", and exits 0:
//   upload ARCH BIN_DIR       nothing usable: install ARCH's binary in
//                             BIN_DIR (writable and executable: the script
//                             tried a file there, so a noexec /tmp is passed)
//   upload-inline ARCH BIN_DIR  the same, and the script takes the binary
//                             on its own stdin, in this call (below)
//   arch MACHINE              no supervisor for this architecture
//   noexec; DIR: why; ...     no root where a file can be made and executed
//   nostate                   no root where a private directory can be made
//   nopreinstalled; why; ...  uploads are off and nothing preinstalled fits
// and `launch --expect-sha256` itself may print "corrupt PATH".
//
// Cold start in the same call (StartScriptOptions::upload_token, binary
// tunnels only): when the script would answer "upload" and its dd reads
// exact byte counts (iflag=count_bytes,fullblock: GNU and busybox 1.24+),
// it answers "upload-inline" and keeps reading its stdin instead of
// exiting. The host writes "\nTOKEN\n", the binary (exactly its size) and
// then again every byte it had written before (the Launch and Hello
// frames). The script reads lines until the token (a fresh random one per
// start, so no frame written before can hold it; `read` takes one byte at
// a time and never reads past it), installs the binary with dd into a
// temporary name in BIN_DIR, checks its sha256 (sha256sum or busybox's;
// with neither, the supervisor's own check is the one), renames it and
// execs the launch with --expect-sha256, which reads the frames written
// again. A binary that fails the check answers a plain "upload" too. A dd that fails
// (a full disk) leaves the stream unsynchronised, so the script then
// answers a plain "upload" and exits: the host uploads the usual way.
// The reattach script answers "gone" (no such state directory) or
// "refused WHY" (a path that no start could have chosen).
//
// Reattach (ReattachScript): one Exec that checks the reference's paths in
// the sandbox (the state directory under one of this user's roots, the
// supervisor one that a start could have chosen) and execs the bridge.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tether::tunnel {

// Where a sandbox's preinstalled supervisors are looked for, in order
// (after a path the caller names; then PATH).
inline constexpr std::string_view kPreinstalledPaths[] = {"/usr/local/libexec/tether/tether-supervisor",
                                                          "/usr/libexec/tether/tether-supervisor"};

// One of our supervisor binaries, as the host would install it.
struct UploadableSupervisor {
  std::string arch;    // "x86_64", "aarch64"
  std::string name;    // tether-supervisor-<version>-<arch>-<hash prefix>
  std::string sha256;  // of the whole binary, hex
  std::uint64_t size = 0;
  // The binary, for an inline upload (the tunnel writes it); may be empty
  // for the script alone.
  std::shared_ptr<const std::string> bytes;
};

struct StartScriptOptions {
  std::vector<UploadableSupervisor> ours;  // the architectures this host can supply
  std::string named;                       // a preinstalled path the caller names, or empty
  bool preinstalled = true;                // look in kPreinstalledPaths and on PATH
  bool allow_upload = true;                // false: "nopreinstalled" instead of "upload"
  bool text = false;                       // launch --text
  std::string arch;                        // forces the architecture (else uname -m)
  std::string emulator;                    // runs every supervisor through it (qemu-aarch64)
  std::string private_root;                // the only candidate root, when set (as is: no tether-<uid>)
  // Set (32+ characters of [0-9a-f]): the stdin carries exact bytes and the
  // host can upload in the same call ("upload-inline"). A fresh one per start.
  std::string upload_token;
};

std::string StartScript(const StartScriptOptions& o);

struct ReattachScriptOptions {
  std::string supervisor;  // from the reference
  std::string state_dir;   // from the reference
  std::string named;       // a preinstalled path the caller names, also accepted
  bool text = false;       // bridge --text
  std::string emulator;
  std::string private_root;
};

std::string ReattachScript(const ReattachScriptOptions& o);

// Writes the cancellation marker <root>/run/<launch_id>.cancel in every
// private root of this user that exists (the host does not know which one
// the abandoned launch used); prints tether-cancel-ok.
std::string CancelScript(std::string_view launch_id, std::string_view private_root = {});

struct StartNeed {
  enum class Kind { kUpload, kArch, kNoExec, kNoState, kNoPreinstalled, kCorrupt, kRefused, kGone };
  Kind kind = Kind::kUpload;
  std::string arch;    // kUpload
  std::string path;    // kUpload: the bin directory; kCorrupt: the binary
  std::string detail;  // the rest of the line, printable
  bool inline_upload = false;  // kUpload: "upload-inline", the script reads the binary now
};

// The status a tunnel's Launch or Reattach ends with when the script
// answered a need line (kFailedPrecondition, the line as a payload), and
// the line back from such a status.
absl::Status StartNeedStatus(std::string line);
std::optional<std::string> StartNeedLineOf(const absl::Status& status);

// An absolute path of printable characters, at most kMaxSandboxPath, with
// no "//", "/./" or "/../": what a need line, a Welcome or a reference may
// name.
bool CleanAbsolute(std::string_view path);

// Parses one "tether-start-need ..." line (without its newline).
// kDataLoss for anything else: a line the sandbox mangled is never guessed at.
absl::StatusOr<StartNeed> ParseStartNeed(std::string_view line);

}  // namespace tether::tunnel
