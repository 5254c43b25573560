// Stable error codes of the process API.
//
// Every failure is an absl::Status with a message a person can act on;
// ErrorCodeOf() gives the stable code a program can branch on (the names are
// the process API's, docs/process-api.md: OUTCOME_UNKNOWN, INPUT_CLOSED,
// BUSY, EXPIRED, ...). The code is attached where the error is made, as a
// status payload, by the constructors below (MakeError and the named
// helpers); ErrorCodeOf() reads it and never looks at the message. A status
// made without one (absl::NotFoundError(...)) gets the code its canonical
// code means unambiguously; kFailedPrecondition and kUnknown alone mean
// nothing public (INTERNAL).
//
//   absl::Status st = co_await p->Write(bytes);
//   if (tether::ErrorCodeOf(st) == tether::ErrorCode::kInputClosed) { ... }
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

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

// The attached code; without one, the code the canonical code implies (see
// above). kOk for an OK status.
ErrorCode ErrorCodeOf(const absl::Status& status);

// The canonical code an error of `code` is made with (BUSY: kUnavailable,
// INPUT_CLOSED: kFailedPrecondition, OUTCOME_UNKNOWN: kUnknown, ...).
absl::StatusCode CanonicalCodeOf(ErrorCode code);

// Attaches `code` to `status` (keeps its canonical code and message).
absl::Status WithErrorCode(absl::Status status, ErrorCode code);

// An error of `code` with `message`, on its canonical code.
absl::Status MakeError(ErrorCode code, std::string_view message);

// Named constructors: "OUTCOME_UNKNOWN: " + message, "OUTPUT_CAPACITY: ",
// "WAIT_ABORTED: ", "input closed: " + message; BUSY keeps `message`.
absl::Status OutcomeUnknownError(std::string_view message);
absl::Status OutputCapacityError(std::string_view message);
absl::Status WaitAbortedError(std::string_view message);
absl::Status InputClosedError(std::string_view message);
absl::Status BusyError(std::string_view message);

// `message` as text that is safe to print to a terminal, a log or an
// exception, whatever bytes a hostile server or supervisor put in it: every
// control character (C0, DEL and the C1 range, so ESC, CSI and OSC cannot
// start a terminal sequence; also newline, so no fake "tether:" line),
// every byte of invalid UTF-8, and the bidirectional and zero-width format
// characters (which reorder or hide text) are written as \xNN or \u{NNNN};
// valid UTF-8 letters stay as they are. At most kMaxPrintableMessage bytes
// of output, cut on a character boundary and then marked with "...". The
// CLI, the C interface (and so Python and TypeScript) pass every message
// through it before a person sees it.
inline constexpr std::size_t kMaxPrintableMessage = 2048;
std::string PrintableMessage(absl::string_view message, std::size_t max_bytes = kMaxPrintableMessage);

// A supervisor Error as a Status ("supervisor: " + its message), through the
// one wire mapping (host/base/wire_errors.h).
absl::Status StatusFromWireError(const wire::Error& e);

}  // namespace tether
