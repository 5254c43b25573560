#include "host/process/start_flow.h"

#include "absl/strings/str_cat.h"
#include "host/process/launch_by_script.h"
#include "tether/errors.h"

namespace tether::internal {

bool LaunchAnswerLost(const absl::Status& st) {
  return absl::IsUnavailable(st) || ErrorCodeOf(st) == ErrorCode::kOutcomeUnknown;
}

StartFlow::Next StartFlow::Attempted(absl::Status status, bool timed_out, bool aborted, bool resend_in_time) {
  status_ = std::move(status);
  timed_out_ = timed_out;
  aborted_ = aborted;
  if (timed_out || aborted || status_.ok() || !LaunchAnswerLost(status_) || NotDispatched(status_)) {
    return Next::kDone;
  }
  if (resends_ >= max_resends_ || !resend_in_time) return Next::kDone;
  ++resends_;
  return Next::kResend;
}

StartFlow::Outcome StartFlow::outcome(bool launch_in_flight) const {
  if ((timed_out_ || aborted_) && !launch_in_flight) {
    return aborted_ ? Outcome::kAbortedBeforeDispatch : Outcome::kTimedOutInstalling;
  }
  if (!status_.ok() && NotDispatched(status_)) return Outcome::kNotDispatched;
  // A transport that lost the answer to the call that ran the launch says
  // OUTCOME_UNKNOWN itself (a 5xx after the call may have taken effect).
  // So did a resent copy that found the launch's record gone, a tombstone
  // in its place (it arrived after the first copy's daemon ended), or its
  // daemon gone without one (killed), or never listening (NOT_FOUND): the
  // process may have run once, and its output is gone with the record.
  const ErrorCode code = ErrorCodeOf(status_);
  const bool lost = !status_.ok() && (LaunchAnswerLost(status_) ||
                                      (resends_ > 0 && (code == ErrorCode::kCancelled || code == ErrorCode::kNotFound)));
  if (timed_out_ || aborted_ || lost) return Outcome::kUnknown;
  return status_.ok() ? Outcome::kAttached : Outcome::kFailed;
}

std::string StartFlow::UnknownReason(unsigned setup_timeout_ms) const {
  if (aborted_) return "was aborted after the launch was dispatched";
  if (timed_out_) return absl::StrCat("did not finish within ", setup_timeout_ms, " ms");
  return absl::StrCat("lost its connection",
                      resends_ ? absl::StrCat(" (the launch was sent ", 1 + resends_, " times)") : "", ": ",
                      std::string(status_.message()));
}

}  // namespace tether::internal
