#include "tether/errors.h"

#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "host/wire_errors.h"

namespace tether {
namespace {

constexpr char kPayloadUrl[] = "type.tether.dev/ErrorCode";

struct CodeInfo {
  ErrorCode code;
  std::string_view name;
  absl::StatusCode canonical;
};

constexpr CodeInfo kCodes[] = {
    {ErrorCode::kOk, "OK", absl::StatusCode::kOk},
    {ErrorCode::kInvalidArgument, "INVALID_ARGUMENT", absl::StatusCode::kInvalidArgument},
    {ErrorCode::kUnsupported, "UNSUPPORTED", absl::StatusCode::kUnimplemented},
    {ErrorCode::kUnavailable, "UNAVAILABLE", absl::StatusCode::kUnavailable},
    {ErrorCode::kBusy, "BUSY", absl::StatusCode::kUnavailable},
    {ErrorCode::kExpired, "EXPIRED", absl::StatusCode::kDeadlineExceeded},
    {ErrorCode::kInputClosed, "INPUT_CLOSED", absl::StatusCode::kFailedPrecondition},
    {ErrorCode::kOutcomeUnknown, "OUTCOME_UNKNOWN", absl::StatusCode::kUnknown},
    {ErrorCode::kNotFound, "NOT_FOUND", absl::StatusCode::kNotFound},
    {ErrorCode::kPermissionDenied, "PERMISSION_DENIED", absl::StatusCode::kPermissionDenied},
    {ErrorCode::kProtocol, "PROTOCOL", absl::StatusCode::kDataLoss},
    {ErrorCode::kCancelled, "CANCELLED", absl::StatusCode::kCancelled},
    {ErrorCode::kOutputCapacity, "OUTPUT_CAPACITY", absl::StatusCode::kResourceExhausted},
    {ErrorCode::kWaitAborted, "WAIT_ABORTED", absl::StatusCode::kCancelled},
    {ErrorCode::kResourceExhausted, "RESOURCE_EXHAUSTED", absl::StatusCode::kResourceExhausted},
    {ErrorCode::kInternal, "INTERNAL", absl::StatusCode::kInternal},
};

const CodeInfo& InfoOf(ErrorCode code) {
  for (const CodeInfo& i : kCodes) {
    if (i.code == code) return i;
  }
  return kCodes[sizeof kCodes / sizeof kCodes[0] - 1];  // INTERNAL
}

// A status made without an attached code: only canonical codes with one
// public meaning map; kFailedPrecondition ("input closed"? "not a private
// directory"?) and kUnknown ("outcome unknown"? anything) do not.
ErrorCode FromCanonical(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk: return ErrorCode::kOk;
    case absl::StatusCode::kInvalidArgument: return ErrorCode::kInvalidArgument;
    case absl::StatusCode::kUnimplemented: return ErrorCode::kUnsupported;
    case absl::StatusCode::kUnavailable: return ErrorCode::kUnavailable;
    case absl::StatusCode::kDeadlineExceeded: return ErrorCode::kExpired;
    case absl::StatusCode::kNotFound: return ErrorCode::kNotFound;
    case absl::StatusCode::kPermissionDenied: return ErrorCode::kPermissionDenied;
    case absl::StatusCode::kResourceExhausted: return ErrorCode::kResourceExhausted;
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kAborted: return ErrorCode::kProtocol;
    case absl::StatusCode::kCancelled: return ErrorCode::kCancelled;
    default: return ErrorCode::kInternal;
  }
}

absl::Status Prefixed(ErrorCode code, std::string_view message) {
  return MakeError(code, absl::StrCat(std::string(InfoOf(code).name), ": ", std::string(message)));
}

}  // namespace

std::string_view ErrorCodeName(ErrorCode code) { return InfoOf(code).name; }

absl::StatusCode CanonicalCodeOf(ErrorCode code) { return InfoOf(code).canonical; }

absl::Status WithErrorCode(absl::Status status, ErrorCode code) {
  if (status.ok()) return status;  // (absl ignores payloads on OK anyway)
  status.SetPayload(kPayloadUrl, absl::Cord(std::string(ErrorCodeName(code))));
  return status;
}

absl::Status MakeError(ErrorCode code, std::string_view message) {
  if (code == ErrorCode::kOk) return absl::OkStatus();
  return WithErrorCode(absl::Status(CanonicalCodeOf(code), std::string(message)), code);
}

absl::Status OutcomeUnknownError(std::string_view message) { return Prefixed(ErrorCode::kOutcomeUnknown, message); }
absl::Status OutputCapacityError(std::string_view message) { return Prefixed(ErrorCode::kOutputCapacity, message); }
absl::Status WaitAbortedError(std::string_view message) { return Prefixed(ErrorCode::kWaitAborted, message); }
absl::Status InputClosedError(std::string_view message) {
  return MakeError(ErrorCode::kInputClosed, absl::StrCat("input closed: ", std::string(message)));
}
absl::Status BusyError(std::string_view message) { return MakeError(ErrorCode::kBusy, message); }

absl::Status StatusFromWireError(const wire::Error& e) {
  return StatusFromWire(e.code(), absl::StrCat("supervisor: ", e.message()));
}

ErrorCode ErrorCodeOf(const absl::Status& status) {
  if (status.ok()) return ErrorCode::kOk;
  if (auto p = status.GetPayload(kPayloadUrl)) {  // absl::optional (Debian's is not std::)
    const std::string name(*p);
    for (const CodeInfo& i : kCodes) {
      if (i.name == name) return i.code;
    }
  }
  return FromCanonical(status.code());
}

}  // namespace tether
