// Golden inputs from tests/data (written by tests/data/make_golden.py, which
// encodes protobuf, zstd, base85 and CRC-32C independently of the C++ code).
// Each file must give exactly the status code and message, or the frames,
// listed in tests/data/README.md.
#include "protocol/armor.h"
#include "protocol/envelope.h"
#include "protocol/frame.h"

#include <cstddef>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include <doctest.h>

#include "tests/build_paths.h"

#include "tests/protocol/test_util.h"

namespace tether::protocol {
namespace {

using testing::Contains;
using testing::Decoded;
using testing::FeedArmor;
using testing::FeedFrames;

std::string ReadGolden(const std::string& name) {
  const std::string path = std::string(::tether::testing::kTestDataDir) + "/" + name;
  std::ifstream f(path, std::ios::binary);
  REQUIRE_MESSAGE(f.good(), "cannot read " << path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// The envelopes make_golden.py writes, built here with the C++ classes.
std::string PingPayload() {
  wire::Envelope e;
  e.set_version(1);
  e.set_request_id(1);
  e.mutable_ping()->set_nonce(7);
  return e.SerializeAsString();
}

std::string OutputPayload() {
  wire::Envelope e;
  e.set_version(1);
  e.set_generation(2);
  e.mutable_output()->set_stream(wire::STREAM_STDOUT);
  e.mutable_output()->set_data(std::string("hello\0world\n", 12));
  return e.SerializeAsString();
}

std::string StdinPayload() {
  wire::Envelope e;
  e.set_version(1);
  e.set_request_id(2);
  e.mutable_stdin_data()->set_offset(5);
  e.mutable_stdin_data()->set_data(testing::AllByteValues());
  return e.SerializeAsString();
}

std::string OutputRlePayload() {
  wire::Envelope e;
  e.set_version(1);
  e.set_generation(2);
  e.mutable_output()->set_stream(wire::STREAM_STDERR);
  e.mutable_output()->set_offset(1000);
  e.mutable_output()->set_data(std::string(5000, 'x'));
  e.mutable_output()->set_eof(true);
  return e.SerializeAsString();
}

std::string ErrorPayload() {
  wire::Envelope e;
  e.set_version(1);
  e.set_request_id(3);
  e.mutable_error()->set_code(wire::ERROR_INVALID_ARGUMENT);
  e.mutable_error()->set_message("bad argument");
  e.mutable_error()->set_request_id(3);
  e.mutable_error()->set_fatal(true);
  return e.SerializeAsString();
}

Decoded DecodeFramesInChunksOf(std::string_view bytes, std::size_t chunk) {
  bool contract_ok = true;
  Decoded d = FeedFrames(bytes, [chunk](std::size_t) { return chunk; }, &contract_ok);
  CHECK(contract_ok);
  return d;
}

Decoded DecodeArmorWhole(std::string_view text) {
  bool contract_ok = true;
  Decoded d = FeedArmor(
      text, ArmorDirection::kToHost, [&](std::size_t) { return text.size(); }, &contract_ok);
  CHECK(contract_ok);
  return d;
}

TEST_CASE("good_frames.bin decodes to six exact payloads, whole and byte by byte") {
  const std::string bytes = ReadGolden("good_frames.bin");
  const std::vector<std::string> want = {PingPayload(),  OutputPayload(),    "",
                                         StdinPayload(), OutputRlePayload(), ErrorPayload()};
  for (std::size_t chunk : {bytes.size(), std::size_t{1}, std::size_t{7}}) {
    CAPTURE(chunk);
    const Decoded d = DecodeFramesInChunksOf(bytes, chunk);
    REQUIRE_MESSAGE(d.status.ok(), d.status.ToString());
    CHECK(d.idle);
    CHECK(d.items == want);
  }
  // The frames with a body are valid envelopes as well.
  EnvelopeDecoder dec;
  std::string_view in = std::string_view(bytes).substr(0, 2 * kFrameHeaderBytes + want[0].size() +
                                                              want[1].size());
  wire::Envelope env;
  REQUIRE(dec.Next(&in, &env).value());
  CHECK(BodyName(env) == "ping");
  REQUIRE(dec.Next(&in, &env).value());
  CHECK(BodyName(env) == "output");
  CHECK(env.output().data() == std::string("hello\0world\n", 12));
}

struct BadFrameCase {
  const char* file;
  absl::StatusCode code;
  const char* message;
  std::size_t frames_before = 0;
};

TEST_CASE("bad frame files fail with the documented status code and message") {
  const BadFrameCase cases[] = {
      {"oversize_length.bin", absl::StatusCode::kResourceExhausted,
       "length 1048577 exceeds kMaxFrameBytes 1048576"},
      {"huge_length.bin", absl::StatusCode::kResourceExhausted, "length 4294967295 exceeds"},
      {"unknown_flags.bin", absl::StatusCode::kInvalidArgument, "unknown flags 0x02"},
      {"bad_magic.bin", absl::StatusCode::kInvalidArgument, "bad magic 0x4745"},
      {"bad_version.bin", absl::StatusCode::kInvalidArgument, "unsupported format version 2"},
      {"corrupt_zstd.bin", absl::StatusCode::kDataLoss, "corrupt zstd payload"},
      {"not_zstd.bin", absl::StatusCode::kDataLoss, "not a zstd frame"},
      {"zstd_unknown_size.bin", absl::StatusCode::kDataLoss, "does not declare its size"},
      {"zstd_oversize_declared.bin", absl::StatusCode::kResourceExhausted,
       "decompressed size 1048577 exceeds kMaxPayloadBytes"},
      {"zstd_trailing_bytes.bin", absl::StatusCode::kDataLoss, "trailing bytes"},
      {"zstd_size_mismatch.bin", absl::StatusCode::kDataLoss, "corrupt zstd payload"},
      {"good_then_bad.bin", absl::StatusCode::kInvalidArgument, "unsupported format version 0", 2},
  };
  for (const BadFrameCase& c : cases) {
    CAPTURE(c.file);
    const std::string bytes = ReadGolden(c.file);
    for (std::size_t chunk : {bytes.size(), std::size_t{1}}) {
      CAPTURE(chunk);
      const Decoded d = DecodeFramesInChunksOf(bytes, chunk);
      CHECK(d.items.size() == c.frames_before);
      CHECK(d.status.code() == c.code);
      CHECK_MESSAGE(Contains(d.status.message(), c.message), d.status.ToString());
    }
    if (c.frames_before == 0) {  // one frame per file: DecodeWholeFrame agrees
      const absl::Status st = DecodeWholeFrame(bytes).status();
      CHECK(st.code() == c.code);
      CHECK_MESSAGE(Contains(st.message(), c.message), st.ToString());
    }
  }
}

TEST_CASE("good_then_bad.bin yields the two good payloads before failing") {
  const Decoded d = DecodeFramesInChunksOf(ReadGolden("good_then_bad.bin"), 1);
  CHECK(d.items == std::vector<std::string>{PingPayload(), OutputPayload()});
}

TEST_CASE("oversize_length.bin fails with only the header buffered") {
  const std::string bytes = ReadGolden("oversize_length.bin");
  FrameDecoder dec;
  std::string_view in = bytes;
  std::string payload;
  CHECK_FALSE(dec.Decode(&in, &payload).ok());
  CHECK(dec.buffered() == kFrameHeaderBytes);
  CHECK(in.size() == bytes.size() - kFrameHeaderBytes);
}

TEST_CASE("truncated files leave the frame decoder waiting, not idle") {
  struct Case {
    const char* file;
    std::size_t buffered;
    const char* whole_frame_message;
  };
  for (const Case& c : {Case{"truncated_header.bin", 5, "truncated header (5 of 8 bytes)"},
                        Case{"truncated_body.bin", 68, "header says 100 payload bytes, frame holds 60"}}) {
    CAPTURE(c.file);
    const std::string bytes = ReadGolden(c.file);
    const Decoded d = DecodeFramesInChunksOf(bytes, 1);
    CHECK(d.status.ok());
    CHECK(d.items.empty());
    CHECK_FALSE(d.idle);
    FrameDecoder dec;
    std::string_view in = bytes;
    std::string payload;
    CHECK(dec.Decode(&in, &payload).value() == DecodeResult::kNeedMore);
    CHECK(dec.buffered() == c.buffered);
    const absl::Status st = DecodeWholeFrame(bytes).status();
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    CHECK_MESSAGE(Contains(st.message(), c.whole_frame_message), st.ToString());
  }
}

TEST_CASE("valid frames holding bad envelopes fail in EnvelopeDecoder") {
  struct Case {
    const char* file;
    const char* message;
  };
  for (const Case& c : {Case{"envelope_bad_version.bin", "protocol version 2 (this build speaks 1)"},
                        Case{"envelope_no_body.bin", "no body"},
                        Case{"envelope_garbage.bin", "4 payload bytes are not a valid Envelope"}}) {
    CAPTURE(c.file);
    const std::string bytes = ReadGolden(c.file);
    REQUIRE(DecodeWholeFrame(bytes).ok());
    EnvelopeDecoder dec;
    std::string_view in = bytes;
    wire::Envelope env;
    const absl::StatusOr<bool> got = dec.Next(&in, &env);
    REQUIRE_FALSE(got.ok());
    CHECK(got.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_MESSAGE(Contains(got.status().message(), c.message), got.status().ToString());
  }
}

TEST_CASE("good.armor yields four exact frames, skips five lines, and a fifth frame on newline") {
  const std::string text = ReadGolden("good.armor");
  const Decoded d = DecodeArmorWhole(text);
  REQUIRE(d.items.size() == 4);
  CHECK(d.skipped == 5);
  CHECK(d.items[0] == EncodeFrame(PingPayload()));
  CHECK(d.items[1] == EncodeFrame(OutputPayload()));
  CHECK((static_cast<unsigned char>(d.items[2][3]) & kFlagZstd) != 0);
  CHECK(DecodeWholeFrame(d.items[2]).value() == StdinPayload());
  CHECK(d.items[3] == EncodeFrame(ErrorPayload()));
  for (std::size_t chunk = 1; chunk <= 16; ++chunk) {
    bool contract_ok = true;
    const Decoded c =
        FeedArmor(text, ArmorDirection::kToHost, [chunk](std::size_t) { return chunk; }, &contract_ok);
    CHECK(contract_ok);
    CHECK(c.items == d.items);
    CHECK(c.skipped == d.skipped);
  }
  // The last line has no newline yet.
  const Decoded done = DecodeArmorWhole(text + "\n");
  REQUIRE(done.items.size() == 5);
  CHECK(done.items[4] == EncodeFrame(""));
  // As the supervisor reads it, only the echoed request is for it.
  bool contract_ok = true;
  const Decoded sup = FeedArmor(
      text, ArmorDirection::kToSupervisor, [&](std::size_t) { return text.size(); }, &contract_ok);
  REQUIRE(sup.items.size() == 1);
  CHECK(sup.items[0] == EncodeFrame(PingPayload()));
}

TEST_CASE("bad armor files give no frame and count each bad line") {
  struct Case {
    const char* file;
    std::uint64_t skipped;
  };
  for (const Case& c : {Case{"bad_checksum.armor", 1}, Case{"bad_base85.armor", 1},
                        Case{"truncated.armor", 1}}) {
    CAPTURE(c.file);
    const Decoded d = DecodeArmorWhole(ReadGolden(c.file));
    CHECK(d.items.empty());
    CHECK(d.skipped == c.skipped);
  }
  // truncated.armor ends in a partial line; its newline makes it one more skip.
  const Decoded d = DecodeArmorWhole(ReadGolden("truncated.armor") + "\n");
  CHECK(d.items.empty());
  CHECK(d.skipped == 2);
}

TEST_CASE("armored frames with a bad header pass the armor and fail DecodeWholeFrame") {
  struct Case {
    const char* file;
    absl::StatusCode code;
    const char* message;
  };
  for (const Case& c :
       {Case{"armored_bad_magic.armor", absl::StatusCode::kInvalidArgument, "bad magic 0x5445"},
        Case{"armored_oversize.armor", absl::StatusCode::kResourceExhausted, "exceeds kMaxFrameBytes"}}) {
    CAPTURE(c.file);
    const Decoded d = DecodeArmorWhole(ReadGolden(c.file));
    REQUIRE(d.items.size() == 1);
    CHECK(d.skipped == 0);
    const absl::Status st = DecodeWholeFrame(d.items[0]).status();
    CHECK(st.code() == c.code);
    CHECK_MESSAGE(Contains(st.message(), c.message), st.ToString());
  }
}

}  // namespace
}  // namespace tether::protocol
