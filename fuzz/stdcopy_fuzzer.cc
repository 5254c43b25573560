// Fuzz target: StdcopyDecoder (host/codec/stdcopy.h), Docker's exec stream,
// over a hostile byte stream split at fuzzer-chosen points.
//
// Input layout: byte 0 gives the number k (0..7) of split bytes that follow
// (chunk sizes, used cyclically; see fuzz_util.h), byte k+1 the cap in KiB
// (0: 64 bytes); the rest is the stream.
//
// Invariants (a failure is our bug and aborts):
//  - every piece is non-empty, a view inside the chunk just fed, taken from
//    its front; a nullopt leaves the chunk empty;
//  - no piece is longer than the cap; the frame remainder never exceeds it;
//  - errors are kInvalidArgument or kResourceExhausted, sticky, and consume
//    nothing more;
//  - the chunked result (pieces joined per stream, status) equals the
//    one-piece result, and re-encoding the pieces gives back the input
//    prefix that was consumed (for inputs without empty frames).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "host/codec/stdcopy.h"

namespace {

using tether::codec::StdcopyDecoder;
using tether::codec::StdcopyPiece;
using tether::codec::StdStream;
using tether::fuzz::Splitter;

constexpr char kFuzzTarget[] = "stdcopy_fuzzer";

struct Run {
  std::vector<std::pair<StdStream, std::string>> pieces;  // joined per stream
  absl::Status status;
  bool idle = true;
};

Run Demux(std::string_view stream, std::string_view sizes, std::size_t cap) {
  Run run;
  StdcopyDecoder dec(cap);
  Splitter split{sizes};
  std::size_t pos = 0;
  bool first = true;
  while (first || pos < stream.size()) {
    first = false;
    const std::size_t n = split.Size(stream.size() - pos);
    std::string_view in = stream.substr(pos, n);
    pos += n;
    while (true) {
      const char* front = in.data();
      const std::size_t before = in.size();
      absl::StatusOr<std::optional<StdcopyPiece>> p = dec.Next(&in);
      FUZZ_CHECK(in.size() <= before);
      FUZZ_CHECK(dec.remaining() <= cap);
      if (!p.ok()) {
        FUZZ_CHECK(p.status().code() == absl::StatusCode::kInvalidArgument ||
                   p.status().code() == absl::StatusCode::kResourceExhausted);
        std::string_view again = in;
        absl::StatusOr<std::optional<StdcopyPiece>> p2 = dec.Next(&again);
        FUZZ_CHECK(!p2.ok() && p2.status() == p.status());
        FUZZ_CHECK(again.size() == in.size());
        run.status = p.status();
        run.idle = dec.idle();
        return run;
      }
      if (!*p) {
        FUZZ_CHECK(in.empty());
        break;
      }
      const std::string_view b = (*p)->bytes;
      FUZZ_CHECK(!b.empty());
      FUZZ_CHECK(b.size() <= cap);
      FUZZ_CHECK(b.data() >= front && b.data() + b.size() == in.data());
      FUZZ_CHECK(b.data() + b.size() <= front + before);
      if (!run.pieces.empty() && run.pieces.back().first == (*p)->stream) {
        run.pieces.back().second.append(b);
      } else {
        run.pieces.emplace_back((*p)->stream, std::string(b));
      }
    }
  }
  run.idle = dec.idle();
  return run;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::size_t k = data[0] % 8;
  if (size < 2 + k) return 0;
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const std::string_view sizes = all.substr(1, k);
  const std::size_t cap = data[1 + k] == 0 ? 64 : std::size_t{data[1 + k]} * 1024;
  const std::string_view stream = all.substr(2 + k);

  const Run whole = Demux(stream, {}, cap);
  const Run chunked = Demux(stream, sizes, cap);
  FUZZ_CHECK(whole.status == chunked.status);
  FUZZ_CHECK(whole.pieces == chunked.pieces);
  FUZZ_CHECK(whole.idle == chunked.idle);
  if (whole.status.ok()) {
    // The pieces, framed again one per run, are a stream the decoder gives
    // back unchanged.
    std::string again;
    for (const auto& [s, bytes] : whole.pieces) again += tether::codec::EncodeStdcopyFrame(s, bytes);
    const Run back = Demux(again, sizes, ~std::size_t{0} >> 1);
    FUZZ_CHECK(back.status.ok());
    FUZZ_CHECK(back.pieces == whole.pieces);
  }
  return 0;
}
