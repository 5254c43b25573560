// The result of a Kubernetes exec: the Status object (metav1.Status, JSON)
// the API server sends on channel 3 of the exec stream (host/codec/
// k8s_channel.h), read into an exit code. Depends on absl and Boost.JSON
// only, so the fuzz target builds it from source.
//
//   {"status":"Success"}                                       -> 0
//   {"status":"Failure","reason":"NonZeroExitCode",
//    "details":{"causes":[{"reason":"ExitCode","message":"3"}]}} -> 3
//   {"status":"Failure","reason":"NotFound","message":"..."}   -> kNotFound error
#pragma once

#include <string_view>

#include "absl/status/statusor.h"

namespace tether::k8s {

// The exit code (0..255) a Status reports; an error for a Status that is
// not one (bad JSON, no "status", a NonZeroExitCode without a numeric
// ExitCode cause: kInvalidArgument) or that reports a failure other than an
// exit code: its message, on the code its reason means (NotFound
// kNotFound, Unauthorized kUnauthenticated, Forbidden kPermissionDenied,
// BadRequest/Invalid kInvalidArgument, others kInternal).
absl::StatusOr<int> ParseExecStatus(std::string_view json);

}  // namespace tether::k8s
