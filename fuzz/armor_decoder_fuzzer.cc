// Fuzz target: ArmorDecoder over hostile text, and armor round trips.
//
// Input layout: byte 0: bit 7 picks the direction, bit 6 compression for the
// round trip, bit 5 "repair checksums", bits 0..2 the number k of split bytes
// that follow (chunk sizes, used cyclically; 0 = an empty feed, never twice in
// a row); the rest is text. A fuzzer cannot guess CRC-32C, so with bit 5 set
// every line with a marker and a valid base85 body gets its checksum
// recomputed first: mutations of the body then reach the frame and envelope
// decoders instead of stopping at the checksum.
//
// 1. The text goes through ArmorDecoder in those chunks. It must never crash;
//    the frames and skipped-line count must equal a one-piece decode; every
//    frame is at least a frame header long and re-armors to a line that
//    decodes to the same frame; frames then go through DecodeWholeFrame and
//    ParseEnvelope (errors there are expected: hostile input).
// 2. The text is also the payload of a frame we armor ourselves, behind a
//    noise prefix and after an echoed line of the other direction; that must
//    decode to exactly our frame and payload (a mismatch is our bug).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <google/protobuf/stubs/logging.h>

#include "protocol/armor.h"
#include "protocol/crc32c.h"
#include "fuzz/fuzz_util.h"
#include "protocol/envelope.h"
#include "protocol/frame.h"

namespace {

using tether::protocol::ArmorDecoder;
using tether::protocol::ArmorDirection;
using tether::protocol::ArmorLine;
using tether::protocol::Base85Decode;
using tether::protocol::Crc32c;
using tether::protocol::Compression;
using tether::protocol::DecodeResult;
using tether::protocol::DecodeWholeFrame;
using tether::protocol::EncodeFrame;
using tether::protocol::kFrameHeaderBytes;
using tether::protocol::kMaxPayloadBytes;
using tether::protocol::kArmorMarkerToHost;
using tether::protocol::kArmorMarkerToSupervisor;
using tether::protocol::ParseEnvelope;

constexpr char kFuzzTarget[] = "armor_decoder_fuzzer";
using tether::fuzz::Splitter;

struct Run {
  std::vector<std::string> frames;
  std::uint64_t skipped = 0;
};

Run Decode(std::string_view text, ArmorDirection dir, std::string_view sizes) {
  Run run;
  ArmorDecoder dec(dir);
  Splitter split{sizes};
  std::size_t pos = 0;
  bool first = true;
  while (first || pos < text.size()) {
    first = false;
    const std::size_t n = split.Size(text.size() - pos);
    std::string_view in = text.substr(pos, n);
    pos += n;
    while (true) {
      std::string frame;
      const std::size_t before = in.size();
      const DecodeResult r = dec.Decode(&in, &frame);
      FUZZ_CHECK(in.size() <= before);
      if (r == DecodeResult::kNeedMore) {
        FUZZ_CHECK(in.empty());
        break;
      }
      FUZZ_CHECK(before > in.size());  // a frame consumes at least its newline
      run.frames.push_back(std::move(frame));
    }
  }
  run.skipped = dec.skipped_lines();
  return run;
}

// Rewrites the checksum of every line that holds `marker`, a '|' after it and
// a base85 body between them, to the CRC-32C of the decoded body.
std::string RepairChecksums(std::string_view text, std::string_view marker) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size() + 16);
  std::string frame;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    const std::size_t at = line.rfind(marker);
    const std::size_t bar = line.rfind('|');
    if (at != std::string_view::npos && bar != std::string_view::npos && bar > at &&
        Base85Decode(line.substr(at + marker.size(), bar - at - marker.size()), &frame)) {
      const std::uint32_t crc = Crc32c(frame);
      out.append(line.substr(0, bar + 1));
      for (int shift = 28; shift >= 0; shift -= 4) out.push_back(kHex[(crc >> shift) & 0xf]);
      if (!line.empty() && line.back() == '\r') out.push_back('\r');
    } else {
      out.append(line);
    }
    if (nl != std::string_view::npos) out.push_back('\n');
  }
  return out;
}

ArmorDirection Other(ArmorDirection d) {
  return d == ArmorDirection::kToHost ? ArmorDirection::kToSupervisor : ArmorDirection::kToHost;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tether::fuzz::QuietProtobufLogs();
  if (size == 0) return 0;
  std::string_view input(reinterpret_cast<const char*>(data), size);
  const auto mode = static_cast<unsigned char>(input[0]);
  const ArmorDirection dir = (mode & 0x80) ? ArmorDirection::kToSupervisor : ArmorDirection::kToHost;
  const Compression compression = (mode & 0x40) ? Compression::kAuto : Compression::kNone;
  const std::size_t k = mode & 0x07;
  input.remove_prefix(1);
  if (input.size() < k) return 0;
  const std::string_view sizes = input.substr(0, k);
  std::string repaired;
  std::string_view text = input.substr(k);
  if ((mode & 0x20) != 0) {
    repaired = RepairChecksums(
        text, dir == ArmorDirection::kToHost ? kArmorMarkerToHost : kArmorMarkerToSupervisor);
    text = repaired;
  }

  // 1. Hostile text.
  const Run chunked = Decode(text, dir, sizes);
  const Run whole = Decode(text, dir, {});
  FUZZ_CHECK(chunked.frames == whole.frames);
  FUZZ_CHECK(chunked.skipped == whole.skipped);
  for (const std::string& frame : whole.frames) {
    FUZZ_CHECK(frame.size() >= kFrameHeaderBytes);
    const Run again = Decode(ArmorLine(frame, dir), dir, sizes);
    FUZZ_CHECK(again.frames.size() == 1 && again.frames[0] == frame && again.skipped == 0);
    absl::StatusOr<std::string> payload = DecodeWholeFrame(frame);
    if (payload.ok()) (void)ParseEnvelope(*payload);
  }

  // 2. Our own frame, armored, behind noise.
  const std::string_view payload = text.substr(0, kMaxPayloadBytes);
  const std::string frame = EncodeFrame(payload, compression);
  std::string noise(text.substr(0, 200));
  for (char& c : noise) {
    if (c == '\n') c = ' ';
  }
  std::string line = ArmorLine(frame, dir);
  line.back() = '\r';  // as a channel that turns "\n" into "\r\n"
  const std::string stream = ArmorLine(frame, Other(dir)) + noise + line + "\n";
  const Run ours = Decode(stream, dir, sizes);
  FUZZ_CHECK(ours.frames.size() == 1);
  FUZZ_CHECK(ours.frames[0] == frame);
  FUZZ_CHECK(ours.skipped == 1);  // the echo
  absl::StatusOr<std::string> back = DecodeWholeFrame(ours.frames[0]);
  FUZZ_CHECK(back.ok());
  FUZZ_CHECK(*back == payload);
  return 0;
}
