#include "tether/errors.h"

#include <doctest.h>

#include "host/session.h"
#include "host/wire_errors.h"

namespace tether {
namespace {

TEST_CASE("a failed precondition that is not input-closed has no public INPUT_CLOSED") {
  // Before: every kFailedPrecondition was INPUT_CLOSED (a missing
  // supervisor binary, a refused private directory, ...).
  CHECK(ErrorCodeOf(absl::FailedPreconditionError("cannot read /x/tether-supervisor-x86_64")) ==
        ErrorCode::kInternal);
  CHECK(ErrorCodeOf(absl::FailedPreconditionError("input closed: looks like it, but nobody said so")) ==
        ErrorCode::kInternal);
  CHECK(ErrorCodeOf(InputClosedError("stdin was already closed")) == ErrorCode::kInputClosed);
  CHECK(InputClosedError("stdin was already closed").message() == "input closed: stdin was already closed");
  CHECK(absl::IsFailedPrecondition(InputClosedError("x")));
}

TEST_CASE("an unknown error is OUTCOME_UNKNOWN only when made as one") {
  CHECK(ErrorCodeOf(absl::UnknownError("OUTCOME_UNKNOWN: the text alone proves nothing")) == ErrorCode::kInternal);
  const absl::Status st = OutcomeUnknownError("setup did not finish");
  CHECK(ErrorCodeOf(st) == ErrorCode::kOutcomeUnknown);
  CHECK(absl::IsUnknown(st));
  CHECK(st.message() == "OUTCOME_UNKNOWN: setup did not finish");
}

TEST_CASE("BUSY is the attached code, never the word in a message") {
  CHECK(ErrorCodeOf(BusyError("another attachment holds the process")) == ErrorCode::kBusy);
  CHECK(ErrorCodeOf(absl::UnavailableError("supervisor: BUSY")) == ErrorCode::kUnavailable);
  CHECK(absl::IsUnavailable(BusyError("held")));  // what the CLI's exit status rests on
}

TEST_CASE("every public code survives MakeError with its canonical code and name") {
  for (int i = static_cast<int>(ErrorCode::kInvalidArgument); i <= static_cast<int>(ErrorCode::kInternal); ++i) {
    const auto code = static_cast<ErrorCode>(i);
    const absl::Status st = MakeError(code, "m");
    CAPTURE(ErrorCodeName(code));
    CHECK(!st.ok());
    CHECK(st.code() == CanonicalCodeOf(code));
    CHECK(ErrorCodeOf(st) == code);
  }
  CHECK(MakeError(ErrorCode::kOk, "m").ok());
  CHECK(ErrorCodeOf(absl::OkStatus()) == ErrorCode::kOk);
}

TEST_CASE("the named helpers keep their codes and messages") {
  CHECK(ErrorCodeOf(WaitAbortedError("w")) == ErrorCode::kWaitAborted);
  CHECK(WaitAbortedError("w").message() == "WAIT_ABORTED: w");
  CHECK(absl::IsCancelled(WaitAbortedError("w")));
  CHECK(ErrorCodeOf(OutputCapacityError("o")) == ErrorCode::kOutputCapacity);
  CHECK(absl::IsResourceExhausted(OutputCapacityError("o")));
  CHECK(MakeError(ErrorCode::kInputClosed, "this handle was disconnected").message() ==
        "this handle was disconnected");
}

TEST_CASE("canonical codes with one meaning still map without an attachment") {
  CHECK(ErrorCodeOf(absl::NotFoundError("x")) == ErrorCode::kNotFound);
  CHECK(ErrorCodeOf(absl::PermissionDeniedError("x")) == ErrorCode::kPermissionDenied);
  CHECK(ErrorCodeOf(absl::InvalidArgumentError("x")) == ErrorCode::kInvalidArgument);
  CHECK(ErrorCodeOf(absl::UnimplementedError("x")) == ErrorCode::kUnsupported);
  CHECK(ErrorCodeOf(absl::DataLossError("x")) == ErrorCode::kProtocol);
  CHECK(ErrorCodeOf(absl::DeadlineExceededError("x")) == ErrorCode::kExpired);
}

TEST_CASE("every wire error code maps to one public code, and back") {
  const wire::ErrorCode all[] = {
      wire::ERROR_PROTOCOL,     wire::ERROR_STALE_GENERATION, wire::ERROR_BUSY,
      wire::ERROR_UNAUTHENTICATED, wire::ERROR_INVALID_ARGUMENT, wire::ERROR_INPUT_CLOSED,
      wire::ERROR_RESOURCE_EXHAUSTED, wire::ERROR_NOT_FOUND,  wire::ERROR_LAUNCH_FAILED,
      wire::ERROR_CANCELLED,    wire::ERROR_UNSUPPORTED,      wire::ERROR_INTERNAL,
      wire::ERROR_EXPIRED};
  for (wire::ErrorCode w : all) {
    CAPTURE(static_cast<int>(w));
    const absl::Status st = StatusFromWire(w, "supervisor: m");
    CHECK(ErrorCodeOf(st) == ErrorCodeFromWire(w));
    CHECK(ErrorCodeFromWire(WireCodeOf(ErrorCodeOf(st))) == ErrorCodeOf(st));
  }
  CHECK(ErrorCodeOf(StatusFromWire(wire::ERROR_INPUT_CLOSED, "m")) == ErrorCode::kInputClosed);
  CHECK(ErrorCodeOf(StatusFromWire(wire::ERROR_BUSY, "m")) == ErrorCode::kBusy);
  CHECK(absl::IsUnavailable(StatusFromWire(wire::ERROR_BUSY, "m")));
  CHECK(absl::IsNotFound(StatusFromWire(wire::ERROR_LAUNCH_FAILED, "m")));
  CHECK(absl::IsUnauthenticated(StatusFromWire(wire::ERROR_UNAUTHENTICATED, "m")));
  CHECK(absl::IsAborted(StatusFromWire(wire::ERROR_STALE_GENERATION, "m")));
  CHECK(ErrorCodeOf(StatusFromWire(static_cast<wire::ErrorCode>(999), "m")) == ErrorCode::kInternal);
  CHECK(WireCodeOf(ErrorCode::kBusy) == wire::ERROR_BUSY);
  CHECK(WireCodeOf(ErrorCode::kInputClosed) == wire::ERROR_INPUT_CLOSED);
}

TEST_CASE("StatusFromWireError goes through the one mapping") {
  wire::Error e;
  e.set_code(wire::ERROR_INPUT_CLOSED);
  e.set_message("stdin after EOF");
  const absl::Status st = StatusFromWireError(e);
  CHECK(ErrorCodeOf(st) == ErrorCode::kInputClosed);
  CHECK(st.message() == "supervisor: stdin after EOF");
}

}  // namespace
}  // namespace tether
