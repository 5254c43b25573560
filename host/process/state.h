// Process::State: the I/O shell around one process's protocol core.
//
// The protocol itself (offsets, windows, acks, input, requests, the exit
// record) is core::ProcessCore, which does no I/O. State adds what needs an
// executor: the Session that carries frames, the receive pump that feeds the
// core, keepalive pings, timers, the condition waiting callers sleep on,
// and reattaching through the tunnel when the channel fails.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>
#include <string>

#include "host/core/process_core.h"
#include "host/support/condition.h"
#include "host/support/random.h"
#include "protocol/limits.h"
#include "tether/process.h"
#include "host/tunnel/session.h"
#include "host/tunnel/tunnel.h"

namespace tether {

// After the exit is acknowledged (or a final Detach sent) the daemon closes
// the attachment; if it does not within this time the channel is closed
// from our side.
inline constexpr auto kCloseAfterExitTimeout = std::chrono::seconds(5);
// How long a Signal or Resize waits for the supervisor to act on it.
inline constexpr auto kActedTimeout = std::chrono::seconds(30);
// Each reconnect attempt (the native exec, the Hello, the Welcome) gets
// reconnect_timeout / kReconnectAttemptShare (10 s of the default 30 s, far
// above a working channel's handshake), and the last one that fits gets
// all that remains: a silent channel is given up, and a slow one still
// has most of the time.
inline constexpr int kReconnectAttemptShare = 3;
// The keepalive gives an attachment up (closes its session, which the pump
// then reattaches or fails as a lost channel) when this many pings in a
// row got nothing back, not even their Pongs, and nothing arrived for at
// least kSilentFloor: a channel that stays open and delivers nothing (a
// half-open connection, a provider stream stuck without an error) would
// otherwise hold every call on the handle forever. Counted per ping sent,
// so a host that was itself stopped (SIGSTOP, a suspended laptop) does not
// mistake its own pause for a silent channel.
inline constexpr int kSilentPings = 3;
inline constexpr auto kSilentFloor = std::chrono::seconds(5);

struct Process::State : std::enable_shared_from_this<Process::State> {
  State(std::shared_ptr<Transport> owner, core::OutputConfig output, bool stdin_pipe)
      : transport(std::move(owner)),
        core(output, stdin_pipe, /*keep_copies=*/false),
        cond(transport->executor()),
        close_timer(transport->executor()),
        ping_timer(transport->executor()) {}

  // Starts the receive pump and the keepalive once the Welcome is in.
  absl::Status Begin(const wire::Welcome& welcome);
  boost::asio::awaitable<void> Pump();
  boost::asio::awaitable<void> Keepalive();
  // Attaches again after the channel failed with `lost`; OK once attached,
  // else the status the handle fails with (UNAVAILABLE). Every attempt is
  // bounded (kReconnectAttemptShare), and so is the whole
  // (reconnect_timeout): a channel that opens and stays silent is closed
  // and the next attempt made.
  boost::asio::awaitable<absl::Status> Reconnect(const absl::Status& lost);
  // Reattaches through the tunnel with `hello` until `deadline`; past it the
  // attempt is cancelled and the session closed too (CloseSessionAt), and
  // the result is kUnavailable "... within the time limit (`limit`)".
  boost::asio::awaitable<absl::StatusOr<wire::Welcome>> ReattachUntil(wire::Hello hello,
                                                                       std::chrono::steady_clock::time_point deadline,
                                                                       std::string_view limit);
  // Waits for `timer`; when it fires, also closes the session, so that a
  // channel that ignores cancellation still ends its pending read (the
  // Channel contract: Close() always ends pending operations).
  boost::asio::awaitable<void> CloseSessionAt(boost::asio::steady_timer& timer);
  // The Hello that resumes at the acknowledged offsets.
  wire::Hello ResumeHello() const;
  void Fail(absl::Status st);
  // A frame arrived: the attachment is alive.
  void Heard();
  // Sends an Ack when credit is due; less waits for the keepalive, which
  // calls AckConsumed just before its ping (both go in one write).
  void MaybeAck();
  // Sends whatever consumption is unacknowledged (never after the exit, a
  // failure or a disconnect).
  void AckConsumed();
  // Sends an Ack of what was consumed, if anything was (before a Detach).
  void FlushAck();
  // The exit reached its reader: acknowledge it so the supervisor cleans up.
  void AckExit();
  // Sends a Signal or Resize (`request`; `what` names it in errors) and
  // waits until the supervisor acted on it (core::Requests::ActedSent) or
  // refused it. While the channel is being reattached it waits for the new
  // attachment; a request that never left this host when its attachment
  // broke is sent again on the next one. One that did leave may or may
  // not have been acted on, and the supervisor does not deduplicate
  // requests (PROTOCOL.md Open point 6): it is never sent again and the
  // result is OUTCOME_UNKNOWN, as when no answer comes within 30 s; unless
  // it is `idempotent` (a Resize: the same size set twice is the same
  // size), which is sent again on the next attachment until acknowledged.
  // If the exit arrives first the result is `after_exit`.
  boost::asio::awaitable<absl::Status> SendActed(wire::Envelope request, const char* what,
                                                 absl::Status after_exit, bool idempotent = false);
  // Why input is refused now, or OK.
  absl::Status InputAllowed() const;
  // Takes a place in the input queue and waits until it is first and
  // `bytes` fit the supervisor's stdin window.
  boost::asio::awaitable<absl::Status> AwaitInputTurn(std::size_t bytes, bool is_close);

  // Declared first, destroyed last: everything below may use it.
  std::shared_ptr<Transport> transport;
  core::ProcessCore core;
  std::shared_ptr<Session> session;
  internal::Condition cond;  // notified on every state change
  boost::asio::steady_timer close_timer;
  boost::asio::steady_timer ping_timer;  // cancelled at exit or failure
  std::chrono::milliseconds ping_interval{10000};
  // The keepalive's view of the attachment (kSilentPings): pings sent since
  // a frame last arrived, and when one last arrived.
  int unanswered_pings = 0;
  std::chrono::steady_clock::time_point last_heard = std::chrono::steady_clock::now();
  bool pumping = false;  // the receive pump runs (the keepalive ends with it)
  // Set when the keepalive gave the attachment up for silence: the reason
  // the pump reports instead of the closed session's own.
  absl::Status silenced;

  bool exit_acked = false;
  bool ack_exit_on_arrival = false;  // the handle was dropped with everything read
  bool control = false;              // a control handle (ReopenOptions::control)
  absl::Status failed;               // the attachment broke (set once)
  bool disconnected = false;
  // A Reconnect is under way: input waits until the new attachment has been
  // sent again what it lacks (else new bytes could reach it before the
  // resent ones and leave a hole).
  bool reattaching = false;
  std::shared_ptr<boost::asio::steady_timer> terminate_deadline;

  // What a reference needs to find this process again.
  std::string provider, sandbox, secret;
  // This handle's own id (Hello.handle), drawn once: any of its Hellos
  // takes the process from an attachment of its own that it gave up and
  // the supervisor has not yet seen end, instead of getting BUSY for a
  // lease (PROTOCOL.md 5.4).
  const std::string handle_id = internal::RandomBytes(protocol::kHandleIdBytes);
  tunnel::Target target;

  // Reconnecting: when the channel fails before the exit, attach again
  // through the tunnel and continue where the acknowledged offsets stand.
  std::unique_ptr<tunnel::Tunnel> tunnel;
  bool reconnect = false;
  std::chrono::milliseconds reconnect_timeout{30000};
  std::uint64_t reconnects = 0;
};

}  // namespace tether
