// The one mapping between the supervisor's wire::ErrorCode and the host's
// absl::Status with its public ErrorCode attached (include/tether/errors.h). Every
// supervisor Error the host turns into a Status goes through here.
//
//   absl::Status st = StatusFromWire(env.error().code(), "supervisor: ...");
//   ErrorCodeOf(st);  // BUSY for ERROR_BUSY, INPUT_CLOSED for ERROR_INPUT_CLOSED
#pragma once

#include <string_view>

#include "absl/status/status.h"
#include "tether/errors.h"
#include "tether/protocol/tether.pb.h"

namespace tether {

// The Status for a supervisor error `code` with `message`: its canonical
// code (what the CLI's exit statuses rest on) and its public code attached.
absl::Status StatusFromWire(wire::ErrorCode code, std::string_view message);

// The public code of a wire error code (kInternal for an unknown one).
ErrorCode ErrorCodeFromWire(wire::ErrorCode code);

// The wire code that carries `code` (ERROR_INTERNAL where none does), for
// fakes that answer as a supervisor would.
wire::ErrorCode WireCodeOf(ErrorCode code);

}  // namespace tether
