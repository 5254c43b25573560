// The decisions of a start, as one type without I/O: after each launch
// attempt, whether the Launch is sent again (PROTOCOL.md 4.1, 4.5), and
// once no more are sent, what the start's outcome is. Process::StartSetup
// does the I/O (the channel, the timer, the marker) and asks this what
// follows; tests/host/process/start_flow_test.cc walks every path through
// it without a sandbox.
//
//   attempt ──Welcome──────────────────────────────────────> kAttached
//      │  ──answer lost (UNAVAILABLE, OUTCOME_UNKNOWN), resends and
//      │    time left──> pause, send again (a resend Hello)
//      │  ──answer lost, no resend left──────────────────────> kUnknown
//      │  ──refused by the supervisor or the transport───────> kFailed
//      │    (but CANCELLED or NOT_FOUND for a resent copy: the first
//      │     copy may have run, its record is gone──────────> kUnknown)
//      │  ──an upload between launches failed────────────────> kNotDispatched
//      │  ──timed out or aborted, a launch in flight─────────> kUnknown
//      └──timed out or aborted, none in flight (installing)──> kTimedOutInstalling
//                                                              / kAbortedBeforeDispatch
//
// kUnknown is the one outcome that leaves work for the caller: a
// cancellation marker, so that a delayed copy of the launch never starts
// the process, and OUTCOME_UNKNOWN with UnknownReason().
#pragma once

#include <string>

#include "absl/status/status.h"

namespace tether::internal {

class StartFlow {
 public:
  // At most `max_resends` copies after the first Launch.
  explicit StartFlow(int max_resends) : max_resends_(max_resends) {}

  enum class Next { kResend, kDone };
  // How the attempt in flight ended: `status` is OK for a Welcome, else
  // why not; `timed_out` when the setup deadline ended it; `aborted` when
  // the caller cancelled the start during it; `resend_in_time`: a resend
  // after its pause would still be inside the resend window.
  Next Attempted(absl::Status status, bool timed_out, bool aborted, bool resend_in_time);
  // The caller cancelled the start during a resend's pause: nothing more
  // is sent (the copies before it may have arrived).
  void AbortedWhilePausing() { aborted_ = true; }

  enum class Outcome {
    kAttached,               // a Welcome: attach to the process
    kFailed,                 // refused (status()): nothing runs, or it failed to start
    kNotDispatched,          // an upload between launches failed: nothing was sent
    kTimedOutInstalling,     // the deadline came while installing, no launch in flight
    kAbortedBeforeDispatch,  // the caller cancelled while installing, no launch in flight
    kUnknown,                // dispatched, its fate unknown: marker, OUTCOME_UNKNOWN
  };
  // Once Attempted() said kDone. `launch_in_flight`: by script, false
  // while the supervisor was being installed between launches.
  Outcome outcome(bool launch_in_flight) const;

  // The last attempt's status (OK for a Welcome).
  const absl::Status& status() const { return status_; }
  int resends() const { return resends_; }
  bool timed_out() const { return timed_out_; }
  bool aborted() const { return aborted_; }
  // For kUnknown: "was aborted after ...", "did not finish within N ms",
  // "lost its connection (the launch was sent N times): WHY".
  std::string UnknownReason(unsigned setup_timeout_ms) const;

 private:
  const int max_resends_;
  int resends_ = 0;
  absl::Status status_ = absl::UnavailableError("no attempt made");
  bool timed_out_ = false;
  bool aborted_ = false;
};

// A launch's channel ended before the Welcome (UNAVAILABLE), or the
// transport lost the answer to the call that ran it (OUTCOME_UNKNOWN): the
// launch may or may not have happened.
bool LaunchAnswerLost(const absl::Status& st);

}  // namespace tether::internal
