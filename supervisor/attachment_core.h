// One connection's protocol, sans I/O: the state machine of an attachment.
//
// Owns authentication (the secret, the version range, the reference ticket),
// control attachments, the generation fence, request dispatch, the lease
// decision, and through OutputSender the credit, fairness and zstd policy.
// Never touches a socket, a timer, the child or a clock: the daemon's
// Attachment (attachment.h) moves bytes, passes the time in, performs the
// Actions it returns (signals, resizes, terminate, ...) and writes the
// batches it fills. Tests and the attachment_core fuzzer drive it directly.
//
//   AttachmentCore core(process, steady_clock::now());
//   core.Received(now);                      // bytes arrived: the lease restarts
//   std::vector<Action> actions;
//   while (core.Next(&bytes, ::time(nullptr), &actions) == AttachmentCore::Step::kHandled) {
//     Perform(actions);                      // failures come back through Refused()
//     actions.clear();
//   }
//   core.NextBatch(&batch);                  // empty: nothing to write
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "protocol/envelope.h"
#include "supervisor/output_sender.h"
#include "supervisor/supervised.h"

namespace tether::supervisor {

// Something only the daemon can do, in the order the requests asked for it.
struct Action {
  enum Kind {
    kDisplaced,         // a resent launch's Hello takes the process: close the attachment holding it
    kAttached,          // this attachment now holds the process (Supervised::held, generation)
    kReleased,          // ring `arg` has free space: wake its pump
    kStdinReady,        // stdin bytes or EOF queued: wake the stdin pump
    kSignal,            // kill(-pgid, arg); a failure goes to Refused()
    kResize,            // resize the terminal to `size`; a failure goes to Refused()
    kTerminate,         // terminate the group, `arg` ms of grace
    kExitAcknowledged,  // the host recorded the exit: shut down
  };
  Kind kind;
  int arg = 0;
  wire::PtySize size;
  std::uint64_t request_id = 0;
};

class AttachmentCore {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Step {
    kNeedMore,  // `*in` is consumed
    kHandled,   // one envelope handled: perform the actions, then call again
    kStop,      // a fatal error is queued: read no more; close once it is written
  };

  AttachmentCore(Supervised& process, Clock::time_point now) : p_(process), last_request_(now) {}

  // Bytes arrived at `now`: the lease counts from here.
  void Received(Clock::time_point now) { last_request_ = now; }
  // Decodes and handles at most one envelope from `*in`; `now_s` is the wall
  // clock (seconds since the epoch) for tickets.
  Step Next(std::string_view* in, std::int64_t now_s, std::vector<Action>* actions);
  // The daemon could not perform a kSignal or kResize: tell the host why.
  void Refused(const Action& action, const absl::Status& why);
  // The stdin pump moved stdin: acknowledge it with the next batch.
  void QueueStdinAck();
  // Everything to write next (control replies, the stdin ack, output);
  // empty when there is nothing.
  void NextBatch(OutputBatch* batch);
  // True once since the last call when a batch may have something new.
  bool TakeWake();

  struct Lease {
    bool expired = false;
    bool unless_peer_stopped = false;  // expired, unless the host's process is stopped (paused, not gone)
    Clock::time_point deadline;
  };
  // Whether the lease ran out at `now` (kHelloTimeoutMs before the Hello).
  Lease CheckLease(Clock::time_point now) const;
  // The host is stopped (Ctrl-Z): its lease waits for it from `now`.
  void Paused(Clock::time_point now) { last_request_ = now; }

  bool authenticated() const { return authenticated_; }
  // A control attachment (Hello.control): requests only, beside the one
  // that holds the output.
  bool control() const { return control_; }
  std::uint64_t generation() const { return generation_; }
  // Detached or failed: the writer sends what is queued, then closes.
  bool closing() const { return closing_; }
  // Ended by an explicit detach, not by a lost connection.
  bool deliberate_end() const { return deliberate_end_; }
  const OutputSender& sender() const { return sender_; }

 private:
  absl::Status Handle(const wire::Envelope& env, std::int64_t now_s, std::vector<Action>* actions);
  absl::Status HandleHello(const wire::Envelope& env, std::int64_t now_s, std::vector<Action>* actions);
  absl::Status HandleAck(const wire::Ack& ack, std::vector<Action>* actions);
  void QueueWelcome(std::uint64_t request_id, std::uint64_t stdin_window, std::int64_t now_s);
  void QueueError(wire::ErrorCode code, std::string message, std::uint64_t request_id, bool fatal);
  void Queue(const wire::Envelope& env);

  Supervised& p_;
  protocol::EnvelopeDecoder decoder_;
  wire::Envelope env_;  // the last envelope decoded (a decode error answers its request id)
  OutputSender sender_;
  bool authenticated_ = false;
  bool control_ = false;
  std::uint64_t generation_ = 0;
  bool stdin_ack_dirty_ = false;
  bool closing_ = false;
  bool deliberate_end_ = false;
  bool wake_ = false;
  std::string queued_;  // encoded control frames waiting for the writer
  Clock::time_point last_request_;
};

}  // namespace tether::supervisor
