// Fuzz target: SseDecoder (host/codec/sse.h), the text/event-stream decoder
// of Runloop's output streams, over a hostile byte stream split at
// fuzzer-chosen points.
//
// Input layout: byte 0 gives the number k (0..7) of split bytes that follow
// (fuzz_util.h's Splitter) and, in its high bit, a small limit (64 bytes)
// instead of 1 KiB, so both limit checks are reachable; the rest is the
// stream.
//
// Peer input must never crash or abort; failed invariants are our bugs:
//  - nothing held grows past the limit (a line, an event's data, its name);
//  - an event's data is at most the limit;
//  - errors are kResourceExhausted, with a message naming the limit, and
//    the decoder then refuses everything (kFailedPrecondition);
//  - the split result equals the one-piece result (events and status).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "host/codec/sse.h"

namespace {

using tether::codec::SseDecoder;
using tether::codec::SseEvent;

constexpr char kFuzzTarget[] = "sse_fuzzer";

struct Run {
  std::vector<SseEvent> events;
  absl::Status status;
  bool partial = false;
};

Run Decode(std::string_view stream, std::string_view sizes, std::size_t limit) {
  Run run;
  SseDecoder dec(limit);
  tether::fuzz::Splitter split{sizes};
  std::size_t pos = 0;
  bool first = true;
  while (first || pos < stream.size()) {
    first = false;
    const std::size_t n = split.Size(stream.size() - pos);
    const std::size_t had = run.events.size();
    absl::Status st = dec.Feed(stream.substr(pos, n), run.events);
    FUZZ_CHECK(run.events.size() - had <= n);
    FUZZ_CHECK(dec.buffered() <= 3 * limit);
    if (!st.ok()) {
      FUZZ_CHECK(st.code() == absl::StatusCode::kResourceExhausted);
      FUZZ_CHECK(st.message().find("kMaxSseEventBytes") != std::string_view::npos);
      std::vector<SseEvent> more;
      FUZZ_CHECK(dec.Feed("\n\n", more).code() == absl::StatusCode::kFailedPrecondition);
      FUZZ_CHECK(more.empty());
      run.status = st;
      return run;
    }
    pos += n;
  }
  for (const SseEvent& e : run.events) {
    FUZZ_CHECK(e.data.size() <= limit);
    FUZZ_CHECK(e.event.size() <= limit);
  }
  run.partial = dec.partial();
  return run;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const unsigned char sel = static_cast<unsigned char>(all[0]);
  const std::size_t k = sel % 8;
  const std::size_t limit = (sel & 0x80) ? 64 : 1024;
  if (1 + k > all.size()) return 0;
  const std::string_view sizes = all.substr(1, k);
  const std::string_view stream = all.substr(1 + k);

  const Run split = Decode(stream, sizes, limit);
  const Run whole = Decode(stream, {}, limit);
  FUZZ_CHECK(split.status == whole.status);
  if (!whole.status.ok()) return 0;  // where in the stream it failed differs with the splits
  FUZZ_CHECK(split.partial == whole.partial);
  FUZZ_CHECK(split.events.size() == whole.events.size());
  for (std::size_t i = 0; i < whole.events.size(); ++i) {
    FUZZ_CHECK(split.events[i].event == whole.events[i].event);
    FUZZ_CHECK(split.events[i].data == whole.events[i].data);
  }
  return 0;
}
