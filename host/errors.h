// Stable error codes of the process API.
//
// Every failure is an absl::Status with a message a person can act on;
// ErrorCodeOf() gives the stable code a program can branch on (the names are
// the seed's: OUTCOME_UNKNOWN, INPUT_CLOSED, BUSY, EXPIRED, ...). A code that
// the canonical status code cannot express (BUSY) rides as a payload.
//
//   absl::Status st = co_await p->Write(bytes);
//   if (tether::ErrorCodeOf(st) == tether::ErrorCode::kInputClosed) { ... }
#pragma once

#include <string_view>

#include "absl/status/status.h"

namespace tether {

namespace wire {
class Error;
}  // namespace wire

enum class ErrorCode {
  kOk,
  kInvalidArgument,   // rejected before any effect
  kUnsupported,       // not available for this process or provider
  kUnavailable,       // the connection failed; nothing is guessed
  kBusy,              // another attachment holds the process
  kExpired,           // a reference past its lifetime
  kInputClosed,       // stdin closed, never a pipe, or the handle disconnected
  kOutcomeUnknown,    // dispatched, but whether it took effect is unknown
  kNotFound,          // executable, cwd or process not found
  kPermissionDenied,  // not executable / not allowed
  kProtocol,          // the peer broke the protocol
  kCancelled,         // a launch stopped by its cancellation marker
  kOutputCapacity,    // output observation stopped: finite cap or unread limit
  kWaitAborted,       // the caller aborted (cancelled) this call
  kResourceExhausted, // a local limit (input queue) is full; retry after earlier calls
  kInternal,
};

// "OUTCOME_UNKNOWN", "INPUT_CLOSED", ...
std::string_view ErrorCodeName(ErrorCode code);

ErrorCode ErrorCodeOf(const absl::Status& status);

// Attaches `code` to `status` (for codes the canonical code cannot express).
absl::Status WithErrorCode(absl::Status status, ErrorCode code);

// OUTPUT_CAPACITY and WAIT_ABORTED errors with `message`.
absl::Status OutputCapacityError(std::string_view message);
absl::Status WaitAbortedError(std::string_view message);
// OUTCOME_UNKNOWN ("OUTCOME_UNKNOWN: " + message) and INPUT_CLOSED ("input
// closed: " + message).
absl::Status OutcomeUnknownError(std::string_view message);
absl::Status InputClosedError(std::string_view message);

// Maps a supervisor Error (wire) to a Status a person can act on.
absl::Status StatusFromWireError(const wire::Error& e);

}  // namespace tether
