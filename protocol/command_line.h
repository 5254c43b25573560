// The supervisor's command line, typed: one definition of its verbs and
// flags, used by the host to build argv and by `tether-supervisor` to parse
// it. Sans-I/O. The grammar (PROTOCOL.md section 11, pinned by
// tests/protocol/command_line_test.cc):
//
//   --version
//   launch [--text | --direct | --exchange RELAY_ID @INIT_FILE]
//          [--state-root DIR] [--expect-sha256 HEX]
//   bridge [--text] STATE_DIR
//   relay STATE_DIR RELAY_ID @INIT_FILE
//   exchange STATE_DIR RELAY_ID IN_OFFSET OUT_OFFSET [BASE85]
//   exchange STATE_DIR RELAY_ID close
//   selftest
//
// STATE_DIR and INIT_FILE are absolute paths; RELAY_ID is 1..64 of [a-z0-9];
// offsets are decimal u64; BASE85 is the armor alphabet (armor.h). Flags come
// right after the verb; nothing else is accepted.
//
// Host side (a named vector: g++ 12 and braced lists in co_await operands):
//
//   protocol::BridgeCommand bridge{.text = text_tunnel, .state_dir = dir};
//   std::vector<std::string> argv = protocol::ToArgv(bridge, supervisor_path);
//   co_await transport.Exec(std::move(argv));
//
//   // launch, per tunnel: kBinary, kText, kDirect, or kExchange with its relay
//   protocol::LaunchCommand launch{.tunnel = protocol::LaunchTunnel::kExchange,
//                                  .relay_id = id, .init_file = init_path};
//   protocol::RelayCommand relay{.state_dir = dir, .relay_id = id, .init_file = init_path};
//
// Supervisor side:
//
//   absl::StatusOr<protocol::Command> cmd = protocol::ParseCommandLine(args);
//   if (!cmd.ok()) { usage(cmd.status()); return 2; }
//   return std::visit(Dispatch{}, *cmd);
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"

namespace tether::protocol {

inline constexpr std::size_t kMaxRelayIdBytes = 64;

// The command line's own revision, printed by `--version` as
// "tether-supervisor VERSION (protocol P, command line R)": a host that
// runs a supervisor it did not upload (one baked into an image) needs the
// flags of revision 2 (--state-root, --expect-sha256) and checks for it.
inline constexpr unsigned kCommandLineRevision = 2;
inline constexpr std::string_view kStateRootFlag = "--state-root";
inline constexpr std::string_view kExpectSha256Flag = "--expect-sha256";
// The one line a start script (host/tunnel/start_script.h) or a launch
// with --expect-sha256 prints instead of frames when it cannot launch:
// "tether-start-need WHAT [DETAIL...]\n", at most kMaxStartNeedLine bytes.
inline constexpr std::string_view kStartNeedPrefix = "tether-start-need ";
inline constexpr std::size_t kMaxStartNeedLine = 4096;

// `--version`: prints the version and protocol version.
struct VersionCommand {
  bool operator==(const VersionCommand&) const = default;
};

// How `launch` talks to the host once the daemon runs.
enum class LaunchTunnel {
  kBinary,    // frames on stdio; then a bridge
  kText,      // armored lines on stdio (--text); then a text bridge
  kDirect,    // Launch frame on stdin, exit once the daemon listens (--direct)
  kExchange,  // frames in INIT_FILE, a relay instead of a bridge (--exchange)
};

// `launch`: reads a Launch frame (stdin or INIT_FILE) and starts the daemon.
struct LaunchCommand {
  LaunchTunnel tunnel = LaunchTunnel::kBinary;
  std::string relay_id;   // kExchange only
  std::string init_file;  // kExchange only: absolute path (argv has "@" before it)
  // --state-root DIR (binary and text only): the Launch's state_dir is
  // empty and the process's directory is DIR/<launch id>; the supervisor
  // refuses a DIR that is not a private directory of its user.
  std::string state_root;
  // --expect-sha256 HEX: before reading anything, the supervisor hashes its
  // own executable and, when it differs, prints "tether-start-need corrupt"
  // and exits 1 (the host then installs it again).
  std::string expect_sha256;
  bool operator==(const LaunchCommand&) const = default;
};

// `bridge`: relays stdio to the daemon's socket in STATE_DIR.
struct BridgeCommand {
  bool text = false;  // --text: armored lines on stdio
  std::string state_dir;
  bool operator==(const BridgeCommand&) const = default;
};

// `relay`: starts an exchange relay beside a running daemon.
struct RelayCommand {
  std::string state_dir;
  std::string relay_id;
  std::string init_file;  // absolute path of the Hello frame
  bool operator==(const RelayCommand&) const = default;
};

// `exchange ... IN OUT [BASE85]`: one poll of a relay (exchange_format.h).
struct ExchangePollCommand {
  std::string state_dir;
  std::string relay_id;
  std::uint64_t in_offset = 0;
  std::uint64_t out_offset = 0;
  std::string data;  // raw host bytes (<= kMaxExchangePollBytes); base85 in argv, omitted when empty
  bool operator==(const ExchangePollCommand&) const = default;
};

// `exchange ... close`: asks a relay to end.
struct ExchangeCloseCommand {
  std::string state_dir;
  std::string relay_id;
  bool operator==(const ExchangeCloseCommand&) const = default;
};

// `selftest`: checks what the supervisor needs in this image, one line per
// requirement on stdout (supervisor/selftest.h). No operands.
struct SelftestCommand {
  bool operator==(const SelftestCommand&) const = default;
};

using Command = std::variant<VersionCommand, LaunchCommand, BridgeCommand, RelayCommand, ExchangePollCommand,
                             ExchangeCloseCommand, SelftestCommand>;

// argv for `supervisor_path` running `command`. CHECKs (our bug) that the
// command is valid, i.e. that ParseCommandLine accepts the result.
std::vector<std::string> ToArgv(const Command& command, std::string_view supervisor_path);

// Parses argv (argv[0] is the binary and is ignored). kInvalidArgument with
// a message naming the verb and the bad, missing or extra argument.
absl::StatusOr<Command> ParseCommandLine(std::span<const std::string> argv);

// The verb of a command ("launch", "bridge", ...), for messages.
std::string_view VerbName(const Command& command);

// Usage lines for stderr, one per form above.
std::string_view CommandLineUsage();

// RELAY_ID rule: 1..kMaxRelayIdBytes of [a-z0-9].
bool ValidRelayId(std::string_view id);

// The exec tag: an environment entry "TETHER_EXEC_TAG=HEX" (1..64 of
// [0-9a-f]) that a transport may give each command it starts, so that it
// can find the command again inside the sandbox (in /proc/PID/environ)
// and end it when it abandons the command's channel (the docker provider
// does; the Engine API cannot kill an exec). Every verb keeps it visible
// through its scrub of /proc (supervisor/proc_scrub.h: argv past the verb
// and the rest of the environment are zeroed, so a command line cannot
// identify a bridge) and never passes it to the child. Not a secret.
inline constexpr std::string_view kExecTagName = "TETHER_EXEC_TAG";
inline constexpr std::size_t kMaxExecTagBytes = 64;
bool IsExecTag(std::string_view env_entry);
std::string ExecTagEntry(std::string_view hex);  // CHECKs that the result IsExecTag

}  // namespace tether::protocol
