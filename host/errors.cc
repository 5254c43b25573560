#include "host/errors.h"

#include <optional>
#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "tether/protocol/tether.pb.h"

namespace tether {
namespace {

constexpr char kPayloadUrl[] = "type.tether.dev/ErrorCode";

constexpr std::pair<ErrorCode, std::string_view> kNames[] = {
    {ErrorCode::kOk, "OK"},
    {ErrorCode::kInvalidArgument, "INVALID_ARGUMENT"},
    {ErrorCode::kUnsupported, "UNSUPPORTED"},
    {ErrorCode::kUnavailable, "UNAVAILABLE"},
    {ErrorCode::kBusy, "BUSY"},
    {ErrorCode::kExpired, "EXPIRED"},
    {ErrorCode::kInputClosed, "INPUT_CLOSED"},
    {ErrorCode::kOutcomeUnknown, "OUTCOME_UNKNOWN"},
    {ErrorCode::kNotFound, "NOT_FOUND"},
    {ErrorCode::kPermissionDenied, "PERMISSION_DENIED"},
    {ErrorCode::kProtocol, "PROTOCOL"},
    {ErrorCode::kCancelled, "CANCELLED"},
    {ErrorCode::kOutputCapacity, "OUTPUT_CAPACITY"},
    {ErrorCode::kWaitAborted, "WAIT_ABORTED"},
    {ErrorCode::kResourceExhausted, "RESOURCE_EXHAUSTED"},
    {ErrorCode::kInternal, "INTERNAL"},
};

}  // namespace

std::string_view ErrorCodeName(ErrorCode code) {
  for (const auto& [c, name] : kNames) {
    if (c == code) return name;
  }
  return "INTERNAL";
}

absl::Status WithErrorCode(absl::Status status, ErrorCode code) {
  const std::string_view name = ErrorCodeName(code);
  status.SetPayload(kPayloadUrl, absl::Cord(std::string(name)));
  return status;
}

absl::Status OutputCapacityError(std::string_view message) {
  return WithErrorCode(absl::ResourceExhaustedError(absl::StrCat("OUTPUT_CAPACITY: ", std::string(message))),
                       ErrorCode::kOutputCapacity);
}

absl::Status WaitAbortedError(std::string_view message) {
  return WithErrorCode(absl::CancelledError(absl::StrCat("WAIT_ABORTED: ", std::string(message))),
                       ErrorCode::kWaitAborted);
}

absl::Status OutcomeUnknownError(std::string_view message) {
  return WithErrorCode(absl::UnknownError(absl::StrCat("OUTCOME_UNKNOWN: ", std::string(message))),
                       ErrorCode::kOutcomeUnknown);
}

absl::Status InputClosedError(std::string_view message) {
  return WithErrorCode(absl::FailedPreconditionError(absl::StrCat("input closed: ", std::string(message))),
                       ErrorCode::kInputClosed);
}

absl::Status StatusFromWireError(const wire::Error& e) {
  const std::string msg = absl::StrCat("supervisor: ", e.message());
  switch (e.code()) {
    case wire::ERROR_STALE_GENERATION: return absl::AbortedError(msg);
    case wire::ERROR_BUSY: return WithErrorCode(absl::UnavailableError(msg), ErrorCode::kBusy);
    case wire::ERROR_UNAUTHENTICATED: return absl::UnauthenticatedError(msg);
    case wire::ERROR_INVALID_ARGUMENT: return absl::InvalidArgumentError(msg);
    case wire::ERROR_INPUT_CLOSED: return absl::FailedPreconditionError(msg);
    case wire::ERROR_RESOURCE_EXHAUSTED: return absl::ResourceExhaustedError(msg);
    case wire::ERROR_NOT_FOUND: return absl::NotFoundError(msg);
    case wire::ERROR_LAUNCH_FAILED: return absl::NotFoundError(msg);
    case wire::ERROR_CANCELLED: return absl::CancelledError(msg);
    case wire::ERROR_UNSUPPORTED: return absl::UnimplementedError(msg);
    case wire::ERROR_PROTOCOL: return absl::DataLossError(msg);
    case wire::ERROR_EXPIRED: return absl::DeadlineExceededError(msg);
    default: return absl::InternalError(msg);
  }
}

ErrorCode ErrorCodeOf(const absl::Status& status) {
  if (status.ok()) return ErrorCode::kOk;
  if (auto p = status.GetPayload(kPayloadUrl)) {  // absl::optional (Debian's is not std::)
    const std::string name(*p);
    for (const auto& [c, n] : kNames) {
      if (n == name) return c;
    }
  }
  if (absl::IsUnimplemented(status)) return ErrorCode::kUnsupported;
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument: return ErrorCode::kInvalidArgument;
    case absl::StatusCode::kUnavailable: return ErrorCode::kUnavailable;
    case absl::StatusCode::kDeadlineExceeded: return ErrorCode::kExpired;
    case absl::StatusCode::kFailedPrecondition: return ErrorCode::kInputClosed;
    case absl::StatusCode::kUnknown: return ErrorCode::kOutcomeUnknown;
    case absl::StatusCode::kNotFound: return ErrorCode::kNotFound;
    case absl::StatusCode::kPermissionDenied: return ErrorCode::kPermissionDenied;
    case absl::StatusCode::kResourceExhausted: return ErrorCode::kResourceExhausted;
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kAborted: return ErrorCode::kProtocol;
    case absl::StatusCode::kCancelled: return ErrorCode::kCancelled;
    default: return ErrorCode::kInternal;
  }
}

}  // namespace tether
