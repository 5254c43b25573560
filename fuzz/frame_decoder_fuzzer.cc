// Fuzz target: FrameDecoder and EnvelopeDecoder over a hostile byte stream
// split at fuzzer-chosen points.
//
// Input layout: byte 0 gives the number k (0..7) of split bytes that follow;
// split byte i is the size of chunk i (0 = an empty feed, never twice in a
// row), used cyclically;
// the rest is the stream. With k == 0 the stream is fed in one piece.
//
// Peer input must never crash or abort; any failed invariant below is our bug
// and aborts:
//  - a kNeedMore leaves `in` empty; nothing is consumed beyond what was given;
//  - payloads are at most kMaxPayloadBytes; buffered() stays bounded;
//  - after an error the decoder returns the same error and consumes nothing;
//  - the chunked result (payloads, status) equals the one-piece result;
//  - each frame's bytes decode to the same payload through DecodeWholeFrame;
//  - EnvelopeDecoder yields exactly the envelopes ParseEnvelope accepts from
//    those payloads, in order, then the first error.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <google/protobuf/stubs/logging.h>

#include "fuzz/fuzz_util.h"
#include "protocol/envelope.h"
#include "protocol/frame.h"

namespace {

using tether::protocol::DecodeResult;
using tether::protocol::DecodeWholeFrame;
using tether::protocol::EnvelopeDecoder;
using tether::protocol::FrameDecoder;
using tether::protocol::kFrameHeaderBytes;
using tether::protocol::kMaxFrameBytes;
using tether::protocol::kMaxPayloadBytes;
using tether::protocol::ParseEnvelope;
namespace wire = tether::protocol::wire;

constexpr char kFuzzTarget[] = "frame_decoder_fuzzer";
using tether::fuzz::Splitter;

struct FrameRun {
  std::vector<std::string> payloads;
  std::vector<std::string> frames;  // the exact bytes each payload came from
  absl::Status status;
};

FrameRun RunFrames(std::string_view stream, std::string_view sizes) {
  FrameRun run;
  FrameDecoder dec;
  Splitter split{sizes};
  std::size_t pos = 0;
  std::size_t frame_start = 0;
  bool first = true;
  while (first || pos < stream.size()) {
    first = false;
    const std::size_t n = split.Size(stream.size() - pos);
    std::string_view in = stream.substr(pos, n);
    while (true) {
      const std::size_t before = in.size();
      std::string payload;
      absl::StatusOr<DecodeResult> r = dec.Decode(&in, &payload);
      FUZZ_CHECK(in.size() <= before);
      FUZZ_CHECK(dec.buffered() <= kFrameHeaderBytes + kMaxFrameBytes);
      const std::size_t consumed_to = pos + n - in.size();
      if (!r.ok()) {
        FUZZ_CHECK(r.status().code() == absl::StatusCode::kInvalidArgument ||
                   r.status().code() == absl::StatusCode::kResourceExhausted ||
                   r.status().code() == absl::StatusCode::kDataLoss);
        // Sticky, and consumes nothing more.
        for (int i = 0; i < 2; ++i) {
          std::string_view again = stream.substr(consumed_to);
          const std::size_t left = again.size();
          absl::StatusOr<DecodeResult> r2 = dec.Decode(&again, &payload);
          FUZZ_CHECK(!r2.ok());
          FUZZ_CHECK(r2.status() == r.status());
          FUZZ_CHECK(again.size() == left);
        }
        run.status = r.status();
        return run;
      }
      if (*r == DecodeResult::kNeedMore) {
        FUZZ_CHECK(in.empty());
        break;
      }
      FUZZ_CHECK(payload.size() <= kMaxPayloadBytes);
      FUZZ_CHECK(dec.idle());
      FUZZ_CHECK(dec.buffered() == 0);
      run.frames.emplace_back(stream.substr(frame_start, consumed_to - frame_start));
      frame_start = consumed_to;
      run.payloads.push_back(std::move(payload));
    }
    pos += n;
  }
  FUZZ_CHECK(dec.idle() == (frame_start == stream.size()));
  FUZZ_CHECK(dec.buffered() == stream.size() - frame_start);
  return run;
}

void RunEnvelopes(std::string_view stream, std::string_view sizes, const FrameRun& frames) {
  // What EnvelopeDecoder must produce: each payload until ParseEnvelope fails.
  std::vector<std::string> want;
  absl::Status want_status = frames.status;
  for (const std::string& p : frames.payloads) {
    absl::StatusOr<wire::Envelope> env = ParseEnvelope(p);
    if (!env.ok()) {
      want_status = env.status();
      break;
    }
    want.push_back(env->SerializeAsString());
  }

  EnvelopeDecoder dec;
  Splitter split{sizes};
  std::vector<std::string> got;
  absl::Status got_status;
  std::size_t pos = 0;
  bool first = true;
  while ((first || pos < stream.size()) && got_status.ok()) {
    first = false;
    const std::size_t n = split.Size(stream.size() - pos);
    std::string_view in = stream.substr(pos, n);
    pos += n;
    while (true) {
      wire::Envelope env;
      absl::StatusOr<bool> r = dec.Next(&in, &env);
      if (!r.ok()) {
        got_status = r.status();
        std::string_view again = stream.substr(pos);
        absl::StatusOr<bool> r2 = dec.Next(&again, &env);
        FUZZ_CHECK(!r2.ok() && r2.status() == r.status());
        break;
      }
      if (!*r) {
        FUZZ_CHECK(in.empty());
        break;
      }
      got.push_back(env.SerializeAsString());
    }
  }
  FUZZ_CHECK(got == want);
  FUZZ_CHECK(got_status == want_status);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tether::fuzz::QuietProtobufLogs();
  if (size == 0) return 0;
  std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t k = static_cast<unsigned char>(input[0]) % 8;
  input.remove_prefix(1);
  if (input.size() < k) return 0;
  const std::string_view sizes = input.substr(0, k);
  const std::string_view stream = input.substr(k);

  const FrameRun chunked = RunFrames(stream, sizes);
  const FrameRun whole = RunFrames(stream, {});
  FUZZ_CHECK(chunked.payloads == whole.payloads);
  FUZZ_CHECK(chunked.frames == whole.frames);
  FUZZ_CHECK(chunked.status == whole.status);
  for (std::size_t i = 0; i < whole.frames.size(); ++i) {
    absl::StatusOr<std::string> p = DecodeWholeFrame(whole.frames[i]);
    FUZZ_CHECK(p.ok());
    FUZZ_CHECK(*p == whole.payloads[i]);
  }
  RunEnvelopes(stream, sizes, whole);
  return 0;
}
