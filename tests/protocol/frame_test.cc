#include "protocol/frame.h"

#include <zstd.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <doctest.h>

#include "tests/protocol/test_util.h"

namespace tether::protocol {
namespace {

using testing::AllByteValues;
using testing::CompressibleBytes;
using testing::Contains;
using testing::Decoded;
using testing::FeedFrames;
using testing::FeedFramesInChunksOf;
using testing::FeedFramesSplitAt;
using testing::FrameHeader;
using testing::RandomBytes;

std::uint8_t FlagsOf(std::string_view frame) { return static_cast<std::uint8_t>(frame[3]); }

std::uint32_t LengthOf(std::string_view frame) {
  const auto* p = reinterpret_cast<const unsigned char*>(frame.data());
  return (std::uint32_t{p[4]} << 24) | (std::uint32_t{p[5]} << 16) | (std::uint32_t{p[6]} << 8) |
         std::uint32_t{p[7]};
}

// Decodes `frame` with one FrameDecoder call; requires exactly one frame and
// `in` fully consumed.
std::string DecodeOne(std::string_view frame) {
  FrameDecoder dec;
  std::string_view in = frame;
  std::string payload;
  absl::StatusOr<DecodeResult> r = dec.Decode(&in, &payload);
  REQUIRE_MESSAGE(r.ok(), r.status().ToString());
  REQUIRE(*r == DecodeResult::kFrame);
  CHECK(in.empty());
  CHECK(dec.idle());
  CHECK(dec.buffered() == 0);
  return payload;
}

// Feeds `bytes` to a fresh decoder in one call and returns the error.
absl::Status DecodeError(std::string_view bytes) {
  FrameDecoder dec;
  std::string_view in = bytes;
  std::string payload;
  while (true) {
    absl::StatusOr<DecodeResult> r = dec.Decode(&in, &payload);
    if (!r.ok()) return r.status();
    if (*r == DecodeResult::kNeedMore) return absl::OkStatus();
  }
}

// A zstd frame of `content` that does not record its size (streaming API,
// size unknown when the frame header is written).
std::string ZstdWithoutContentSize(std::string_view content) {
  std::unique_ptr<ZSTD_CCtx, decltype(&ZSTD_freeCCtx)> cctx(ZSTD_createCCtx(), &ZSTD_freeCCtx);
  REQUIRE(cctx != nullptr);
  std::string out(ZSTD_compressBound(content.size()) + 64, '\0');
  ZSTD_outBuffer ob{out.data(), out.size(), 0};
  ZSTD_inBuffer ib{content.data(), content.size(), 0};
  // e_continue first: with a single e_end call zstd would learn the size.
  REQUIRE_FALSE(ZSTD_isError(ZSTD_compressStream2(cctx.get(), &ob, &ib, ZSTD_e_continue)));
  ZSTD_inBuffer empty{nullptr, 0, 0};
  std::size_t left = 0;
  do {
    left = ZSTD_compressStream2(cctx.get(), &ob, &empty, ZSTD_e_end);
    REQUIRE_FALSE(ZSTD_isError(left));
  } while (left != 0);
  out.resize(ob.pos);
  REQUIRE(ZSTD_getFrameContentSize(out.data(), out.size()) == ZSTD_CONTENTSIZE_UNKNOWN);
  return out;
}

// A zstd frame that records its content size.
std::string ZstdCompress(std::string_view content) {
  std::string out(ZSTD_compressBound(content.size()), '\0');
  const std::size_t n = ZSTD_compress(out.data(), out.size(), content.data(), content.size(), 3);
  REQUIRE_FALSE(ZSTD_isError(n));
  out.resize(n);
  return out;
}

// Size of the zstd frame header at the start of `z` (RFC 8878 3.1.1.1).
std::size_t ZstdFrameHeaderSize(std::string_view z) {
  REQUIRE(z.size() > 5);
  const auto fhd = static_cast<unsigned char>(z[4]);
  const bool single_segment = (fhd & 0x20) != 0;
  static constexpr std::size_t kDidBytes[] = {0, 1, 2, 4};
  static constexpr std::size_t kFcsBytes[] = {0, 2, 4, 8};
  std::size_t fcs = kFcsBytes[fhd >> 6];
  if (fcs == 0 && single_segment) fcs = 1;
  return 4 + 1 + (single_segment ? 0 : 1) + kDidBytes[fhd & 3] + fcs;
}

std::string WithHeader(std::string_view body, std::uint8_t flags) {
  return FrameHeader(static_cast<std::uint32_t>(body.size()), flags) + std::string(body);
}

// Several frames back to back: raw and zstd, one with an empty payload.
struct Stream {
  std::string bytes;
  std::vector<std::string> payloads;
};

Stream MixedStream() {
  Stream s;
  auto add = [&](std::string payload, Compression c, bool expect_zstd) {
    const std::size_t before = s.bytes.size();
    AppendFrame(payload, c, &s.bytes);
    REQUIRE(((FlagsOf(std::string_view(s.bytes).substr(before)) & kFlagZstd) != 0) == expect_zstd);
    s.payloads.push_back(std::move(payload));
  };
  add("hello", Compression::kNone, false);
  add("", Compression::kNone, false);
  add(CompressibleBytes(3000), Compression::kAuto, true);
  add(RandomBytes(300, 7), Compression::kAuto, false);
  add(std::string(1, '\0'), Compression::kAuto, false);
  add(AllByteValues() + CompressibleBytes(700), Compression::kAuto, true);
  add("", Compression::kAuto, false);
  add("last", Compression::kNone, false);
  return s;
}

TEST_CASE("round-trips an empty payload as a bare header") {
  const std::string frame = EncodeFrame("");
  CHECK(frame.size() == kFrameHeaderBytes);
  CHECK(LengthOf(frame) == 0);
  CHECK(DecodeOne(frame).empty());
}

TEST_CASE("round-trips a 1-byte payload") {
  const std::string frame = EncodeFrame("x");
  CHECK(frame.size() == kFrameHeaderBytes + 1);
  CHECK(DecodeOne(frame) == "x");
}

TEST_CASE("round-trips all 256 byte values") {
  const std::string payload = AllByteValues();
  CHECK(DecodeOne(EncodeFrame(payload)) == payload);
  CHECK(DecodeOne(EncodeFrame(payload, Compression::kAuto)) == payload);
}

TEST_CASE("round-trips a kMaxPayloadBytes payload raw and compressed") {
  const std::string random = RandomBytes(kMaxPayloadBytes, 3);
  const std::string text = CompressibleBytes(kMaxPayloadBytes);

  const std::string raw = EncodeFrame(random, Compression::kNone);
  CHECK(raw.size() == kFrameHeaderBytes + kMaxPayloadBytes);
  CHECK(FlagsOf(raw) == 0);
  CHECK(DecodeOne(raw) == random);

  const std::string raw_auto = EncodeFrame(random, Compression::kAuto);
  CHECK(FlagsOf(raw_auto) == 0);
  CHECK(raw_auto == raw);
  CHECK(DecodeWholeFrame(raw_auto).value() == random);

  const std::string zstd = EncodeFrame(text, Compression::kAuto);
  CHECK(FlagsOf(zstd) == kFlagZstd);
  CHECK(zstd.size() < text.size() / 10);
  CHECK(DecodeOne(zstd) == text);
  CHECK(DecodeWholeFrame(zstd).value() == text);
}

TEST_CASE("kAuto compresses compressible data and leaves random data raw") {
  const std::string text = CompressibleBytes(4096);
  const std::string auto_text = EncodeFrame(text, Compression::kAuto);
  CHECK(FlagsOf(auto_text) == kFlagZstd);
  CHECK(LengthOf(auto_text) == auto_text.size() - kFrameHeaderBytes);
  CHECK(auto_text.size() < text.size());
  CHECK(DecodeOne(auto_text) == text);

  const std::string random = RandomBytes(4096);
  const std::string auto_random = EncodeFrame(random, Compression::kAuto);
  CHECK(FlagsOf(auto_random) == 0);
  CHECK(auto_random.size() == kFrameHeaderBytes + random.size());

  // kNone never compresses.
  CHECK(FlagsOf(EncodeFrame(text, Compression::kNone)) == 0);
}

TEST_CASE("kAuto leaves payloads below kMinCompressBytes raw however compressible") {
  const std::string small(kMinCompressBytes - 1, 'a');
  CHECK(FlagsOf(EncodeFrame(small, Compression::kAuto)) == 0);
  const std::string enough(kMinCompressBytes, 'a');
  CHECK(FlagsOf(EncodeFrame(enough, Compression::kAuto)) == kFlagZstd);
}

TEST_CASE("writes magic, version, flags and a big-endian length") {
  const std::string payload(0x012345, 'p');
  const std::string frame = EncodeFrame(payload);
  const auto* h = reinterpret_cast<const unsigned char*>(frame.data());
  CHECK(h[0] == 'T');
  CHECK(h[1] == 0xE7);
  CHECK(h[2] == kFrameFormatVersion);
  CHECK(h[2] == 1);
  CHECK(h[3] == 0);
  CHECK(h[4] == 0x00);
  CHECK(h[5] == 0x01);
  CHECK(h[6] == 0x23);
  CHECK(h[7] == 0x45);
  CHECK(frame.substr(kFrameHeaderBytes) == payload);
  CHECK(EncodeFrame("abc") == std::string("T\xE7\x01\x00\x00\x00\x00\x03" "abc", 11));
}

TEST_CASE("AppendFrame appends after existing bytes") {
  std::string out = "prefix";
  AppendFrame("abc", Compression::kNone, &out);
  AppendFrame(CompressibleBytes(1000), Compression::kAuto, &out);
  CHECK(out.substr(0, 6) == "prefix");
  std::string_view in = std::string_view(out).substr(6);
  FrameDecoder dec;
  std::string payload;
  REQUIRE(dec.Decode(&in, &payload).value() == DecodeResult::kFrame);
  CHECK(payload == "abc");
  REQUIRE(dec.Decode(&in, &payload).value() == DecodeResult::kFrame);
  CHECK(payload == CompressibleBytes(1000));
  CHECK(in.empty());
}

TEST_CASE("returns one frame per call and leaves the rest of the input") {
  const std::string stream = EncodeFrame("one") + EncodeFrame("two");
  std::string_view in = stream;
  FrameDecoder dec;
  std::string payload = "stale contents are replaced";
  REQUIRE(dec.Decode(&in, &payload).value() == DecodeResult::kFrame);
  CHECK(payload == "one");
  CHECK(in.size() == kFrameHeaderBytes + 3);
  REQUIRE(dec.Decode(&in, &payload).value() == DecodeResult::kFrame);
  CHECK(payload == "two");
  CHECK(in.empty());
  REQUIRE(dec.Decode(&in, &payload).value() == DecodeResult::kNeedMore);
  CHECK(dec.idle());
}

TEST_CASE("accepts empty input, including a default string_view, without failing") {
  FrameDecoder dec;
  std::string payload;
  std::string_view none;  // data() is nullptr
  CHECK(dec.Decode(&none, &payload).value() == DecodeResult::kNeedMore);
  std::string_view empty = "";
  CHECK(dec.Decode(&empty, &payload).value() == DecodeResult::kNeedMore);
  CHECK(dec.idle());
  // The same in the middle of a header and of a body.
  const std::string frame = EncodeFrame("abcdef");
  std::string_view part = std::string_view(frame).substr(0, 3);
  CHECK(dec.Decode(&part, &payload).value() == DecodeResult::kNeedMore);
  CHECK(dec.Decode(&none, &payload).value() == DecodeResult::kNeedMore);
  part = std::string_view(frame).substr(3, 7);
  CHECK(dec.Decode(&part, &payload).value() == DecodeResult::kNeedMore);
  CHECK(dec.Decode(&none, &payload).value() == DecodeResult::kNeedMore);
  part = std::string_view(frame).substr(10);
  CHECK(dec.Decode(&part, &payload).value() == DecodeResult::kFrame);
  CHECK(payload == "abcdef");
}

TEST_CASE("decodes a mixed stream the same at every split into two parts") {
  const Stream s = MixedStream();
  for (std::size_t at = 0; at <= s.bytes.size(); ++at) {
    CAPTURE(at);
    bool contract_ok = true;
    const Decoded d = FeedFramesSplitAt(s.bytes, at, &contract_ok);
    REQUIRE(d.status.ok());
    CHECK(contract_ok);
    CHECK(d.idle);
    REQUIRE(d.items == s.payloads);
  }
}

TEST_CASE("decodes a mixed stream the same in chunks of every size from 1 to 64 bytes") {
  const Stream s = MixedStream();
  for (std::size_t chunk = 1; chunk <= 64; ++chunk) {
    CAPTURE(chunk);
    bool contract_ok = true;
    const Decoded d = FeedFramesInChunksOf(s.bytes, chunk, &contract_ok);
    REQUIRE(d.status.ok());
    CHECK(contract_ok);
    CHECK(d.idle);
    REQUIRE(d.items == s.payloads);
  }
}

TEST_CASE("decodes a mixed stream fed one byte at a time, with empty feeds in between") {
  const Stream s = MixedStream();
  bool contract_ok = true;
  // Odd-numbered chunks are empty.
  const Decoded d = FeedFrames(s.bytes, [](std::size_t i) { return i % 2; }, &contract_ok);
  REQUIRE(d.status.ok());
  CHECK(contract_ok);
  CHECK(d.idle);
  CHECK(d.items == s.payloads);
}

TEST_CASE("reports a truncated stream through idle() and buffered()") {
  const std::string frame = EncodeFrame("0123456789");
  for (std::size_t cut = 1; cut < frame.size(); ++cut) {
    CAPTURE(cut);
    FrameDecoder dec;
    std::string_view in = std::string_view(frame).substr(0, cut);
    std::string payload;
    CHECK(dec.Decode(&in, &payload).value() == DecodeResult::kNeedMore);
    CHECK(in.empty());
    CHECK_FALSE(dec.idle());
    CHECK(dec.buffered() == cut);
  }
  FrameDecoder dec;
  CHECK(dec.idle());
  CHECK(dec.buffered() == 0);
}

TEST_CASE("rejects a length of kMaxFrameBytes + 1 from the header alone") {
  FrameDecoder dec;
  std::string header = FrameHeader(kMaxFrameBytes + 1);
  std::string_view in = header;
  std::string payload;
  absl::StatusOr<DecodeResult> r = dec.Decode(&in, &payload);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK_MESSAGE(Contains(r.status().message(), "length 1048577 exceeds kMaxFrameBytes"),
                r.status().ToString());
  // Nothing beyond the header was buffered or reserved for the body, and more
  // input is refused without being consumed.
  CHECK(dec.buffered() == kFrameHeaderBytes);
  const std::string body(4096, 'x');
  std::string_view more = body;
  CHECK_FALSE(dec.Decode(&more, &payload).ok());
  CHECK(more.size() == body.size());
  CHECK(dec.buffered() == kFrameHeaderBytes);
}

TEST_CASE("rejects the largest length field, 0xFFFFFFFF") {
  const absl::Status st = DecodeError(FrameHeader(0xFFFFFFFFu));
  CHECK(st.code() == absl::StatusCode::kResourceExhausted);
  CHECK(Contains(st.message(), "4294967295"));
}

TEST_CASE("accepts a length of exactly kMaxFrameBytes and waits for the body") {
  FrameDecoder dec;
  const std::string header = FrameHeader(kMaxFrameBytes);
  std::string_view in = header;
  std::string payload;
  CHECK(dec.Decode(&in, &payload).value() == DecodeResult::kNeedMore);
  CHECK(dec.buffered() == kFrameHeaderBytes);
}

TEST_CASE("rejects every unknown flag bit") {
  for (int bit = 1; bit < 8; ++bit) {
    const auto flags = static_cast<std::uint8_t>(1u << bit);
    CAPTURE(bit);
    const absl::Status st = DecodeError(FrameHeader(3, flags) + "abc");
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    CHECK_MESSAGE(Contains(st.message(), "unknown flags 0x"), st.ToString());
    // Also alongside the known zstd flag.
    const absl::Status both = DecodeError(FrameHeader(3, flags | kFlagZstd) + "abc");
    CHECK(both.code() == absl::StatusCode::kInvalidArgument);
    CHECK(Contains(both.message(), "unknown flags"));
  }
  CHECK(Contains(DecodeError(FrameHeader(0, 0x80)).message(), "unknown flags 0x80"));
}

TEST_CASE("rejects a bad magic in either byte") {
  absl::Status st = DecodeError(FrameHeader(0, 0, 1, 'X', 0xE7));
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK_MESSAGE(Contains(st.message(), "bad magic 0x58e7"), st.ToString());
  st = DecodeError(FrameHeader(0, 0, 1, 'T', 0xE6));
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(st.message(), "bad magic 0x54e6"));
  // A channel that speaks text at us.
  st = DecodeError("HTTP/1.1 400 Bad Request\r\n");
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(st.message(), "not a tether stream"));
}

TEST_CASE("rejects a format version other than kFrameFormatVersion") {
  for (std::uint8_t v : {std::uint8_t{0}, std::uint8_t{2}, std::uint8_t{255}}) {
    CAPTURE(int{v});
    const absl::Status st = DecodeError(FrameHeader(0, 0, v));
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    CHECK_MESSAGE(Contains(st.message(), "unsupported format version"), st.ToString());
  }
  CHECK(Contains(DecodeError(FrameHeader(0, 0, 2)).message(), "version 2 (this build speaks 1)"));
}

TEST_CASE("rejects a corrupt zstd payload with kDataLoss") {
  // A well-formed zstd frame (declares 100 bytes) whose one compressed block
  // holds garbage: only the decompressor can tell.
  const std::string garbage_block(std::string("\x28\xB5\x2F\xFD\x20\x64\x55\x00\x00", 9) + std::string(10, '\xFF'));
  absl::Status st = DecodeError(WithHeader(garbage_block, kFlagZstd));
  CHECK(st.code() == absl::StatusCode::kDataLoss);
  CHECK_MESSAGE(Contains(st.message(), "corrupt zstd payload"), st.ToString());

  // A block of the reserved type 3 is caught while sizing the frame.
  std::string body = ZstdCompress(CompressibleBytes(5000));
  const std::size_t fh = ZstdFrameHeaderSize(body);
  body[fh] = static_cast<char>(body[fh] | 0x06);
  st = DecodeError(WithHeader(body, kFlagZstd));
  CHECK(st.code() == absl::StatusCode::kDataLoss);
  CHECK_MESSAGE(Contains(st.message(), "compressed payload"), st.ToString());
}

TEST_CASE("rejects a truncated zstd payload and one that is not zstd at all") {
  const std::string body = ZstdCompress(CompressibleBytes(5000));
  absl::Status st = DecodeError(WithHeader(std::string_view(body).substr(0, body.size() - 3), kFlagZstd));
  CHECK(st.code() == absl::StatusCode::kDataLoss);
  CHECK_MESSAGE(Contains(st.message(), "truncated"), st.ToString());

  st = DecodeError(WithHeader("plain text, flagged as zstd", kFlagZstd));
  CHECK(st.code() == absl::StatusCode::kDataLoss);
  CHECK_MESSAGE(Contains(st.message(), "not a zstd frame"), st.ToString());

  st = DecodeError(WithHeader("", kFlagZstd));
  CHECK(st.code() == absl::StatusCode::kDataLoss);
}

TEST_CASE("rejects a zstd payload that does not declare its content size") {
  const std::string body = ZstdWithoutContentSize(CompressibleBytes(2000));
  const absl::Status st = DecodeError(WithHeader(body, kFlagZstd));
  CHECK(st.code() == absl::StatusCode::kDataLoss);
  CHECK_MESSAGE(Contains(st.message(), "does not declare its size"), st.ToString());
}

TEST_CASE("rejects a zstd payload declaring more than kMaxPayloadBytes") {
  const std::string body = ZstdCompress(std::string(kMaxPayloadBytes + 1, '\0'));
  REQUIRE(body.size() < 1024);  // a tiny frame that would expand past the limit
  const absl::Status st = DecodeError(WithHeader(body, kFlagZstd));
  CHECK(st.code() == absl::StatusCode::kResourceExhausted);
  CHECK_MESSAGE(Contains(st.message(), "decompressed size 1048577 exceeds kMaxPayloadBytes"),
                st.ToString());
}

TEST_CASE("rejects a zstd frame followed by trailing bytes") {
  const std::string z = ZstdCompress(CompressibleBytes(2000));
  absl::Status st = DecodeError(WithHeader(z + "x", kFlagZstd));
  CHECK(st.code() == absl::StatusCode::kDataLoss);
  CHECK_MESSAGE(Contains(st.message(), "trailing bytes"), st.ToString());
  // Two complete zstd frames are one too many.
  st = DecodeError(WithHeader(z + z, kFlagZstd));
  CHECK(st.code() == absl::StatusCode::kDataLoss);
  CHECK(Contains(st.message(), "trailing bytes"));
}

TEST_CASE("stays failed after an error and consumes nothing more") {
  const std::string bad = FrameHeader(1, 0x40) + "z";
  const std::string good = EncodeFrame("fine");
  FrameDecoder dec;
  std::string_view in = bad;
  std::string payload;
  absl::StatusOr<DecodeResult> first = dec.Decode(&in, &payload);
  REQUIRE_FALSE(first.ok());
  for (int i = 0; i < 3; ++i) {
    std::string_view more = good;
    absl::StatusOr<DecodeResult> again = dec.Decode(&more, &payload);
    REQUIRE_FALSE(again.ok());
    CHECK(again.status() == first.status());
    CHECK(more.size() == good.size());
  }
}

TEST_CASE("stays failed after a zstd error in the body") {
  const std::string stream = WithHeader("not zstd", kFlagZstd) + EncodeFrame("fine");
  FrameDecoder dec;
  std::string_view in = stream;
  std::string payload;
  absl::StatusOr<DecodeResult> first = dec.Decode(&in, &payload);
  REQUIRE_FALSE(first.ok());
  CHECK(first.status().code() == absl::StatusCode::kDataLoss);
  CHECK(in.size() == kFrameHeaderBytes + 4);
  absl::StatusOr<DecodeResult> again = dec.Decode(&in, &payload);
  REQUIRE_FALSE(again.ok());
  CHECK(again.status() == first.status());
  CHECK(in.size() == kFrameHeaderBytes + 4);
}

TEST_CASE("decodes the frames before an error, then fails") {
  const std::string stream = EncodeFrame("a") + EncodeFrame("b") + FrameHeader(0, 0, 9);
  bool contract_ok = true;
  for (std::size_t chunk : {std::size_t{1}, std::size_t{5}, stream.size()}) {
    const Decoded d = FeedFramesInChunksOf(stream, chunk, &contract_ok);
    CHECK(d.items == std::vector<std::string>{"a", "b"});
    CHECK(d.status.code() == absl::StatusCode::kInvalidArgument);
  }
  CHECK(contract_ok);
}

TEST_CASE("DecodeWholeFrame decodes raw and compressed frames") {
  CHECK(DecodeWholeFrame(EncodeFrame("")).value().empty());
  CHECK(DecodeWholeFrame(EncodeFrame(AllByteValues())).value() == AllByteValues());
  const std::string text = CompressibleBytes(10000);
  CHECK(DecodeWholeFrame(EncodeFrame(text, Compression::kAuto)).value() == text);
}

TEST_CASE("DecodeWholeFrame rejects a truncated header") {
  for (std::size_t n = 0; n < kFrameHeaderBytes; ++n) {
    CAPTURE(n);
    const absl::StatusOr<std::string> r = DecodeWholeFrame(EncodeFrame("").substr(0, n));
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_MESSAGE(Contains(r.status().message(), "truncated header"), r.status().ToString());
  }
}

TEST_CASE("DecodeWholeFrame rejects a frame shorter or longer than its header says") {
  const std::string frame = EncodeFrame("0123456789");
  absl::StatusOr<std::string> r = DecodeWholeFrame(std::string_view(frame).substr(0, frame.size() - 1));
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_MESSAGE(Contains(r.status().message(), "header says 10 payload bytes, frame holds 9"),
                r.status().ToString());
  r = DecodeWholeFrame(frame + "!");
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(r.status().message(), "frame holds 11"));
}

TEST_CASE("DecodeWholeFrame applies the header and zstd checks") {
  CHECK(DecodeWholeFrame(FrameHeader(kMaxFrameBytes + 1)).status().code() ==
        absl::StatusCode::kResourceExhausted);
  CHECK(DecodeWholeFrame(FrameHeader(0, 0x02)).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(DecodeWholeFrame(FrameHeader(0, 0, 1, 'T', 0)).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(DecodeWholeFrame(FrameHeader(0, 0, 0)).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(DecodeWholeFrame(WithHeader("junk", kFlagZstd)).status().code() == absl::StatusCode::kDataLoss);
  CHECK(DecodeWholeFrame(WithHeader(ZstdWithoutContentSize("abc"), kFlagZstd)).status().code() ==
        absl::StatusCode::kDataLoss);
  const absl::Status big =
      DecodeWholeFrame(WithHeader(ZstdCompress(std::string(kMaxPayloadBytes + 1, 'a')), kFlagZstd))
          .status();
  CHECK(big.code() == absl::StatusCode::kResourceExhausted);
  CHECK(Contains(big.message(), "exceeds kMaxPayloadBytes"));
  const std::string z = ZstdCompress("hello hello hello");
  CHECK(DecodeWholeFrame(WithHeader(z + std::string(1, '\0'), kFlagZstd)).status().code() == absl::StatusCode::kDataLoss);
  CHECK(DecodeWholeFrame(WithHeader(z, kFlagZstd)).value() == "hello hello hello");
}

TEST_CASE("accepts a zstd payload of exactly kMaxPayloadBytes") {
  const std::string body = ZstdCompress(std::string(kMaxPayloadBytes, 'q'));
  CHECK(DecodeOne(WithHeader(body, kFlagZstd)) == std::string(kMaxPayloadBytes, 'q'));
}

}  // namespace
}  // namespace tether::protocol

namespace tether::protocol {
namespace {

TEST_CASE("rejects a zstd skippable frame instead of decoding it as an empty payload") {
  const std::string skippable("\x50\x2a\x4d\x18\x00\x00\x00\x00", 8);
  const std::string frame = testing::FrameHeader(8, kFlagZstd) + skippable;
  absl::StatusOr<std::string> r = DecodeWholeFrame(frame);
  CHECK(r.status().code() == absl::StatusCode::kDataLoss);
  CHECK(testing::Contains(r.status().message(), "bad magic"));
}

}  // namespace
}  // namespace tether::protocol

namespace tether::protocol {
namespace {

TEST_CASE("the frame splitter returns whole raw frames from any split, and refuses a bad header") {
  std::string stream;
  std::vector<std::string> frames;
  for (int i = 0; i < 20; ++i) {
    frames.push_back(EncodeFrame(std::string(static_cast<std::size_t>(i * 37), static_cast<char>(i))));
    stream += frames.back();
  }
  for (std::size_t step : {1u, 7u, 8u, 9u, 100u, 100000u}) {
    FrameSplitter s;
    std::vector<std::string> got;
    for (std::size_t i = 0; i < stream.size(); i += step) {
      std::string_view in = std::string_view(stream).substr(i, step);
      std::string f;
      while (true) {
        absl::StatusOr<DecodeResult> r = s.Next(&in, &f);
        REQUIRE(r.ok());
        if (*r == DecodeResult::kNeedMore) break;
        got.push_back(f);
      }
    }
    CHECK(got == frames);
    CHECK(s.idle());
  }
  FrameSplitter bad;
  std::string_view junk = "HTTP/1.1 200 OK\r\n";
  std::string f;
  CHECK(!bad.Next(&junk, &f).ok());
  std::string_view more = frames[1];
  CHECK(!bad.Next(&more, &f).ok());  // stays failed
  // An oversize length is refused from the header alone, before buffering.
  std::string huge = frames[0].substr(0, 4) + std::string("\x7f\xff\xff\xff", 4);
  std::string_view h = huge;
  FrameSplitter s2;
  CHECK(s2.Next(&h, &f).status().code() == absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace tether::protocol
