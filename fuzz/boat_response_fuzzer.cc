// Fuzz target: boat::ParseCommandResponse (host/native/boat/boat_api.h),
// the answer of Boat's POST .../commands: hostile JSON from the network.
//
// Input: the body itself. It must never crash or allocate without bound;
// an error has a message and a code from the parser's list; an accepted
// answer keeps the promises (exit code 0..255, or -1 only when timed out),
// and its re-encoding parses back to the same result.
#include <boost/json.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "host/native/boat/boat_api.h"

namespace {

using tether::boat::CommandResult;
using tether::fuzz::Fail;

std::string Encode(const CommandResult& r) {
  boost::json::object o;
  if (r.exit_code >= 0) {
    o["exitCode"] = r.exit_code;
  } else {
    o["exitCode"] = nullptr;
  }
  o["stdout"] = boost::json::string_view(r.stdout_text.data(), r.stdout_text.size());
  o["stderr"] = boost::json::string_view(r.stderr_text.data(), r.stderr_text.size());
  o["timedOut"] = r.timed_out;
  return boost::json::serialize(o);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<CommandResult> r = tether::boat::ParseCommandResponse(body);
  if (!r.ok()) {
    if (r.status().message().empty()) Fail("boat_response", "an error without a message");
    const absl::StatusCode c = r.status().code();
    if (c != absl::StatusCode::kDataLoss && c != absl::StatusCode::kResourceExhausted) {
      Fail("boat_response", "an error that is neither kDataLoss nor kResourceExhausted");
    }
    return 0;
  }
  if (size > tether::boat::kMaxResponseBytes) Fail("boat_response", "accepted more than the size limit");
  if (r->exit_code < -1 || r->exit_code > 255) Fail("boat_response", "an exit code out of range");
  if (r->exit_code == -1 && !r->timed_out) Fail("boat_response", "no exit code, yet not timed out");
  if (r->stdout_text.size() > size || r->stderr_text.size() > size) Fail("boat_response", "output larger than the body");
  absl::StatusOr<CommandResult> again = tether::boat::ParseCommandResponse(Encode(*r));
  if (!again.ok()) Fail("boat_response", "its own encoding does not parse");
  if (again->exit_code != r->exit_code || again->stdout_text != r->stdout_text ||
      again->stderr_text != r->stderr_text || again->timed_out != r->timed_out) {
    Fail("boat_response", "the round trip changed a field");
  }
  return 0;
}
