// The start's decisions (host/process/start_flow.h), every path without a
// sandbox: when a Launch is sent again, when it is not, and what the start
// ends as. start_resend_test.cc runs the same paths through the real
// supervisor.
#include "host/process/start_flow.h"

#include <doctest.h>

#include "host/process/launch_by_script.h"
#include "tether/errors.h"

namespace tether::internal {
namespace {

using Next = StartFlow::Next;
using Outcome = StartFlow::Outcome;

const absl::Status kCut = absl::UnavailableError("the channel was cut");
const absl::Status kLost = OutcomeUnknownError("a 502 after the call took effect");
const absl::Status kWelcome = absl::OkStatus();

// Feeds `statuses` as successive attempts, each in time and neither timed
// out nor aborted; returns the Next of the last.
Next Feed(StartFlow& f, std::initializer_list<absl::Status> statuses) {
  Next n = Next::kDone;
  for (const absl::Status& st : statuses) n = f.Attempted(st, false, false, true);
  return n;
}

TEST_CASE("a Welcome on the first attempt attaches, nothing is sent again") {
  StartFlow f(4);
  CHECK(f.Attempted(kWelcome, false, false, true) == Next::kDone);
  CHECK(f.outcome(true) == Outcome::kAttached);
  CHECK(f.resends() == 0);
}

TEST_CASE("a lost answer is sent again, and a later Welcome attaches") {
  for (const absl::Status& lost : {kCut, kLost}) {
    CAPTURE(lost);
    StartFlow f(4);
    CHECK(f.Attempted(lost, false, false, true) == Next::kResend);
    CHECK(f.Attempted(lost, false, false, true) == Next::kResend);
    CHECK(f.Attempted(kWelcome, false, false, true) == Next::kDone);
    CHECK(f.resends() == 2);
    CHECK(f.outcome(true) == Outcome::kAttached);
  }
}

TEST_CASE("answers lost more often than the resends allowed: unknown, with how often it was sent") {
  StartFlow f(4);
  CHECK(Feed(f, {kCut, kCut, kCut, kCut}) == Next::kResend);
  CHECK(f.Attempted(kCut, false, false, true) == Next::kDone);  // the fifth copy: none after it
  CHECK(f.resends() == 4);
  CHECK(f.outcome(true) == Outcome::kUnknown);
  CHECK(f.UnknownReason(1000) == "lost its connection (the launch was sent 5 times): the channel was cut");
}

TEST_CASE("no resend outside the resend window: unknown after one copy") {
  StartFlow f(4);
  CHECK(f.Attempted(kLost, false, false, /*resend_in_time=*/false) == Next::kDone);
  CHECK(f.resends() == 0);
  CHECK(f.outcome(true) == Outcome::kUnknown);
  CHECK(f.UnknownReason(1000) == "lost its connection: OUTCOME_UNKNOWN: a 502 after the call took effect");
}

TEST_CASE("a refusal is never sent again and fails the start") {
  for (const absl::Status& refused :
       {absl::InvalidArgumentError("argv is empty"), absl::PermissionDeniedError("no"),
        MakeError(ErrorCode::kProtocol, "a frame the host cannot read"), absl::NotFoundError("no such sandbox"),
        absl::CancelledError("launch cancelled")}) {
    CAPTURE(refused);
    StartFlow f(4);
    CHECK(f.Attempted(refused, false, false, true) == Next::kDone);
    CHECK(f.outcome(true) == Outcome::kFailed);
    CHECK(f.status() == refused);
  }
}

TEST_CASE("a resent copy that finds the record gone (CANCELLED) or no daemon (NOT_FOUND) is unknown, not a refusal") {
  for (const absl::Status& gone :
       {absl::CancelledError("launch cancelled: its record is gone"), absl::NotFoundError("gone without a record")}) {
    CAPTURE(gone);
    StartFlow f(4);
    CHECK(f.Attempted(kCut, false, false, true) == Next::kResend);
    CHECK(f.Attempted(gone, false, false, true) == Next::kDone);
    CHECK(f.outcome(true) == Outcome::kUnknown);
    CHECK(f.UnknownReason(1000).find("sent 2 times") != std::string::npos);
  }
}

TEST_CASE("an upload that failed between launches sent nothing: not resent, no marker") {
  StartFlow f(4);
  const absl::Status put = NotDispatchedStatus(absl::UnavailableError("upload: connection reset"));
  CHECK(f.Attempted(put, false, false, true) == Next::kDone);  // (UNAVAILABLE, yet never a resend)
  CHECK(f.resends() == 0);
  CHECK(f.outcome(true) == Outcome::kNotDispatched);
}

TEST_CASE("the deadline or an abort with a launch in flight is unknown; while installing, nothing started") {
  {
    StartFlow f(4);
    CHECK(f.Attempted(absl::UnavailableError("setup did not finish"), /*timed_out=*/true, false, true) == Next::kDone);
    CHECK(f.outcome(/*launch_in_flight=*/true) == Outcome::kUnknown);
    CHECK(f.UnknownReason(1500) == "did not finish within 1500 ms");
    CHECK(f.outcome(/*launch_in_flight=*/false) == Outcome::kTimedOutInstalling);
  }
  {
    StartFlow f(4);
    // (aborted: a Welcome that came with the abort is not attached to)
    CHECK(f.Attempted(kWelcome, false, /*aborted=*/true, true) == Next::kDone);
    CHECK(f.outcome(true) == Outcome::kUnknown);
    CHECK(f.UnknownReason(1000) == "was aborted after the launch was dispatched");
    CHECK(f.outcome(false) == Outcome::kAbortedBeforeDispatch);
  }
  {
    // Aborted during a resend's pause: the copies sent may have arrived.
    StartFlow f(4);
    CHECK(f.Attempted(kCut, false, false, true) == Next::kResend);
    f.AbortedWhilePausing();
    CHECK(f.aborted());
    CHECK(f.outcome(true) == Outcome::kUnknown);
  }
}

TEST_CASE("no resends allowed: the first lost answer is final") {
  StartFlow f(0);
  CHECK(f.Attempted(kCut, false, false, true) == Next::kDone);
  CHECK(f.outcome(true) == Outcome::kUnknown);
}

}  // namespace
}  // namespace tether::internal
