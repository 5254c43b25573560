// Fuzz target: ConnectEnvelopeDecoder (host/codec/connect_envelope.h) over a
// hostile byte stream split at fuzzer-chosen points.
//
// Input layout: byte 0 gives the number k (0..7) of split bytes that follow;
// split byte i is the size of chunk i (fuzz_util.h's Splitter); the rest is
// the stream. A small decoder limit (1 KiB) makes the length check reachable.
//
// Peer input must never crash or abort; failed invariants are our bugs:
//  - a need-more leaves the chunk empty; nothing is consumed beyond it;
//  - buffered() stays within header + limit;
//  - errors are kInvalidArgument or kResourceExhausted, sticky, and consume
//    nothing more;
//  - the chunked result equals the one-piece result;
//  - each envelope re-encodes to exactly the bytes it came from.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "host/codec/connect_envelope.h"

namespace {

using tether::codec::ConnectEnvelope;
using tether::codec::ConnectEnvelopeDecoder;
using tether::codec::EncodeConnectEnvelope;
using tether::codec::kConnectHeaderBytes;

constexpr char kFuzzTarget[] = "connect_envelope_fuzzer";
constexpr std::size_t kLimit = 1024;

struct Run {
  std::vector<ConnectEnvelope> envelopes;
  absl::Status status;
};

Run Decode(std::string_view stream, std::string_view sizes) {
  Run run;
  ConnectEnvelopeDecoder dec(kLimit);
  tether::fuzz::Splitter split{sizes};
  std::size_t pos = 0;
  bool first = true;
  while (first || pos < stream.size()) {
    first = false;
    const std::size_t n = split.Size(stream.size() - pos);
    std::string_view in = stream.substr(pos, n);
    while (true) {
      const std::size_t before = in.size();
      absl::StatusOr<std::optional<ConnectEnvelope>> r = dec.Decode(&in);
      FUZZ_CHECK(in.size() <= before);
      FUZZ_CHECK(dec.buffered() <= kConnectHeaderBytes + kLimit);
      if (!r.ok()) {
        FUZZ_CHECK(r.status().code() == absl::StatusCode::kInvalidArgument ||
                   r.status().code() == absl::StatusCode::kResourceExhausted);
        const std::size_t left = in.size();
        FUZZ_CHECK(dec.Decode(&in).status() == r.status());
        FUZZ_CHECK(in.size() == left);
        run.status = r.status();
        return run;
      }
      if (!r->has_value()) {
        FUZZ_CHECK(in.empty());
        break;
      }
      FUZZ_CHECK(dec.at_boundary());
      FUZZ_CHECK((*r)->message.size() <= kLimit);
      run.envelopes.push_back(**r);
    }
    pos += n;
  }
  return run;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const std::size_t k = static_cast<unsigned char>(all[0]) % 8;
  if (1 + k > all.size()) return 0;
  const std::string_view sizes = all.substr(1, k);
  const std::string_view stream = all.substr(1 + k);

  const Run chunked = Decode(stream, sizes);
  const Run whole = Decode(stream, {});
  FUZZ_CHECK(chunked.status == whole.status);
  FUZZ_CHECK(chunked.envelopes.size() == whole.envelopes.size());
  std::size_t off = 0;
  for (std::size_t i = 0; i < whole.envelopes.size(); ++i) {
    const ConnectEnvelope& e = whole.envelopes[i];
    FUZZ_CHECK(e.message == chunked.envelopes[i].message && e.end_stream == chunked.envelopes[i].end_stream);
    const std::string bytes = EncodeConnectEnvelope(e.message, e.end_stream);
    FUZZ_CHECK(stream.substr(off, bytes.size()) == bytes);
    off += bytes.size();
  }
  return 0;
}
