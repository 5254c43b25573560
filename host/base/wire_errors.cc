#include "host/base/wire_errors.h"

#include <string>

namespace tether {
namespace {

struct WireCode {
  wire::ErrorCode wire;
  ErrorCode code;
  absl::StatusCode canonical;  // kept as the host has always made them
};

// The first row for a public code is the one WireCodeOf() gives.
constexpr WireCode kTable[] = {
    {wire::ERROR_PROTOCOL, ErrorCode::kProtocol, absl::StatusCode::kDataLoss},
    {wire::ERROR_STALE_GENERATION, ErrorCode::kProtocol, absl::StatusCode::kAborted},
    {wire::ERROR_BUSY, ErrorCode::kBusy, absl::StatusCode::kUnavailable},
    {wire::ERROR_INVALID_ARGUMENT, ErrorCode::kInvalidArgument, absl::StatusCode::kInvalidArgument},
    {wire::ERROR_INPUT_CLOSED, ErrorCode::kInputClosed, absl::StatusCode::kFailedPrecondition},
    {wire::ERROR_RESOURCE_EXHAUSTED, ErrorCode::kResourceExhausted, absl::StatusCode::kResourceExhausted},
    {wire::ERROR_NOT_FOUND, ErrorCode::kNotFound, absl::StatusCode::kNotFound},
    {wire::ERROR_LAUNCH_FAILED, ErrorCode::kNotFound, absl::StatusCode::kNotFound},
    {wire::ERROR_CANCELLED, ErrorCode::kCancelled, absl::StatusCode::kCancelled},
    {wire::ERROR_UNSUPPORTED, ErrorCode::kUnsupported, absl::StatusCode::kUnimplemented},
    {wire::ERROR_INTERNAL, ErrorCode::kInternal, absl::StatusCode::kInternal},
    // A wrong secret: no public code of its own (the CLI's 125).
    {wire::ERROR_UNAUTHENTICATED, ErrorCode::kInternal, absl::StatusCode::kUnauthenticated},
    {wire::ERROR_EXPIRED, ErrorCode::kExpired, absl::StatusCode::kDeadlineExceeded},
};

const WireCode* Find(wire::ErrorCode code) {
  for (const WireCode& w : kTable) {
    if (w.wire == code) return &w;
  }
  return nullptr;
}

}  // namespace

absl::Status StatusFromWire(wire::ErrorCode code, std::string_view message) {
  const WireCode* w = Find(code);
  if (w == nullptr) return MakeError(ErrorCode::kInternal, message);
  return WithErrorCode(absl::Status(w->canonical, std::string(message)), w->code);
}

ErrorCode ErrorCodeFromWire(wire::ErrorCode code) {
  const WireCode* w = Find(code);
  return w ? w->code : ErrorCode::kInternal;
}

wire::ErrorCode WireCodeOf(ErrorCode code) {
  for (const WireCode& w : kTable) {
    if (w.code == code) return w.wire;
  }
  return wire::ERROR_INTERNAL;
}

}  // namespace tether
