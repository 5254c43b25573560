// Fuzz target: what Runloop's API answers (host/native/runloop/runloop_api.h),
// hostile bytes from the network: an execution view
// (runloop::ParseExecutionView) and an output stream (runloop::SseDecoder,
// then runloop::ParseOutputChunk and ErrorEventCode on every event).
//
// Input: one selector byte, then the body. Even: the body is an execution
// view; an accepted one keeps the promises (an id and a status, an exit
// status 0..255 that a completed view always has) and its re-encoding
// parses back the same. Odd: the body is an SSE stream fed in pieces whose
// sizes come from the selector; the events must not depend on the splits,
// and nothing may crash, allocate without bound or fail without a message.
#include <boost/json.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "host/native/runloop/runloop_api.h"

namespace {

using tether::fuzz::Fail;
namespace runloop = tether::runloop;

std::string Encode(const runloop::ExecutionView& v) {
  boost::json::object o;
  o["execution_id"] = boost::json::string_view(v.execution_id.data(), v.execution_id.size());
  o["status"] = boost::json::string_view(v.status.data(), v.status.size());
  if (v.exit_status) {
    o["exit_status"] = *v.exit_status;
  } else {
    o["exit_status"] = nullptr;
  }
  o["stdout"] = boost::json::string_view(v.stdout_text.data(), v.stdout_text.size());
  o["stderr"] = boost::json::string_view(v.stderr_text.data(), v.stderr_text.size());
  o["stdout_truncated"] = v.stdout_truncated;
  return boost::json::serialize(o);
}

void View(std::string_view body) {
  absl::StatusOr<runloop::ExecutionView> v = runloop::ParseExecutionView(body);
  if (!v.ok()) {
    if (v.status().message().empty()) Fail("runloop_response", "an error without a message");
    const absl::StatusCode c = v.status().code();
    if (c != absl::StatusCode::kDataLoss && c != absl::StatusCode::kResourceExhausted) {
      Fail("runloop_response", "a view error that is neither kDataLoss nor kResourceExhausted");
    }
    return;
  }
  if (v->execution_id.empty() || v->status.empty()) Fail("runloop_response", "a view without id or status");
  if (v->exit_status && (*v->exit_status < 0 || *v->exit_status > 255)) Fail("runloop_response", "exit out of range");
  if (v->completed() && !v->exit_status) Fail("runloop_response", "a completed view without an exit status");
  absl::StatusOr<runloop::ExecutionView> again = runloop::ParseExecutionView(Encode(*v));
  if (!again.ok()) Fail("runloop_response", "its own encoding does not parse");
  if (again->execution_id != v->execution_id || again->status != v->status || again->exit_status != v->exit_status ||
      again->stdout_text != v->stdout_text || again->stderr_text != v->stderr_text) {
    Fail("runloop_response", "the round trip changed a field");
  }
}

void Stream(std::string_view body, std::uint8_t seed) {
  runloop::SseDecoder whole;
  std::vector<runloop::SseEvent> a;
  const absl::Status st = whole.Feed(body, a);
  runloop::SseDecoder split;
  std::vector<runloop::SseEvent> b;
  absl::Status st2;
  std::size_t step = 1 + seed % 13;
  for (std::size_t i = 0; i < body.size() && st2.ok(); i += step, step = 1 + (step * 7 + seed) % 29) {
    st2 = split.Feed(body.substr(i, step), b);
  }
  if (st.ok() != st2.ok()) Fail("runloop_response", "the splits changed whether the stream is accepted");
  if (!st.ok()) {
    if (st.code() != absl::StatusCode::kResourceExhausted) Fail("runloop_response", "an SSE error of another kind");
    return;
  }
  if (a.size() != b.size()) Fail("runloop_response", "the splits changed the number of events");
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].event != b[i].event || a[i].data != b[i].data) Fail("runloop_response", "the splits changed an event");
    if (a[i].data.size() > runloop::kMaxSseEventBytes) Fail("runloop_response", "an event above the limit");
    absl::StatusOr<runloop::OutputChunk> c = runloop::ParseOutputChunk(a[i].data);
    if (!c.ok() && c.status().message().empty()) Fail("runloop_response", "a chunk error without a message");
    if (c.ok() && c->output.size() > a[i].data.size()) Fail("runloop_response", "output larger than its event");
    const int code = runloop::ErrorEventCode(a[i].data);
    if (code < 0 || code > 999) Fail("runloop_response", "an error code out of range");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    View(body);
  } else {
    Stream(body, data[0]);
  }
  return 0;
}
