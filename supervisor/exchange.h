// Exchange tunnel mode, for providers that can only run one-shot commands
// and return their output (no stdin, no streaming).
//
// A relay process holds the attachment to the daemon (like a bridge) and
// keeps the two byte streams with offsets: what the host sent (deduplicated
// by offset) and what the daemon sent (kept until the host's next poll says
// it has it). Each poll is one short command,
//
//   tether-supervisor exchange STATE_DIR RELAY_ID IN_OFFSET OUT_OFFSET [BASE85]
//
// carrying host bytes from IN_OFFSET in its argv and printing one armored
// line with the daemon's bytes from OUT_OFFSET (the format is
// protocol/exchange_format.h; the command line protocol/command_line.h);
// `exchange STATE_DIR RELAY_ID close` ends the relay. A poll lost on the way
// is simply made again with the same offsets: nothing is applied twice and
// nothing is lost. The relay listens in its own private directory
// STATE_DIR.x-RELAY_ID and ends with the daemon or after a minute without
// polls.
//
// The relay never blocks on a peer: the daemon's socket and every poll's
// connection are non-blocking and served from one poll() loop, and a poll
// that does not deliver its request (or take its reply) in time is dropped.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "protocol/command_line.h"

namespace tether::supervisor {

inline constexpr std::size_t kRelayBufferBytes = 4 << 20;
inline constexpr int kRelayIdleMs = 60 * 1000;
inline constexpr int kExchangeWaitMs = 100;  // a poll waits this long for output
// A poll's connection must deliver its request, and take its reply, within
// this long (ms); a healthy `exchange` does both in well under 100 ms.
inline constexpr int kRelayPeerTimeoutMs = 2000;
// Poll connections served at once; more are closed at once (same uid only:
// the relay's directory is private).
inline constexpr std::size_t kMaxRelayConnections = 8;
// `exchange` gives up on a relay that has not answered within this long (ms).
inline constexpr int kExchangeReplyTimeoutMs = 2000;

// Secrets never travel in a command line (provider logs, /proc/PID/cmdline
// of a long-lived relay or daemon): the host puts the frames that carry one
// (the Launch, the Hello) in a private file and names it as @PATH. The file
// must be a regular 0600 file of ours, never a link; it is read once and
// removed at once.
inline constexpr std::size_t kMaxInitFileBytes = 2 << 20;
// Reads and removes such a file (an absolute path, without the '@').
// kInvalidArgument / kNotFound with why.
absl::StatusOr<std::string> TakeInitFile(const std::string& path);

// `relay STATE_DIR RELAY_ID @INIT`: starts a relay attached to the daemon
// that first sends the daemon the frames in INIT (the host's Hello), prints
// "tether-relay-ok" and returns (the relay runs on, detached).
int RelayMain(const protocol::RelayCommand& cmd);
// Starts the relay for an already connected daemon socket; `initial` goes
// to the daemon first and is not part of the host's polled byte stream.
int StartRelay(int daemon_sock, const std::string& state_dir, const std::string& id, std::string initial);
// One poll; prints the armored reply.
int ExchangeMain(const protocol::ExchangePollCommand& cmd);
// Asks the relay to end; prints protocol::kRelayClosedLine (exit 0) once
// it is ending or gone, nothing (exit 1) when that is not known.
int ExchangeCloseMain(const protocol::ExchangeCloseCommand& cmd);

}  // namespace tether::supervisor
