#include "protocol/envelope.h"

#include "absl/strings/str_cat.h"
#include "protocol/status_macros.h"
#include "tether/protocol/version.h"

namespace tether::protocol {

void AppendEnvelope(const wire::Envelope& env, Compression compression, std::string* out) {
  std::string payload;
  if (env.version() == kProtocolVersion) {
    env.SerializeToString(&payload);
  } else {
    wire::Envelope copy = env;
    copy.set_version(kProtocolVersion);
    copy.SerializeToString(&payload);
  }
  AppendFrame(payload, compression, out);
}

namespace {

std::size_t VarintSize(std::uint64_t v) {
  std::size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

char* PutVarint(std::uint64_t v, char* p) {
  while (v >= 0x80) {
    *p++ = static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<char>(v);
  return p;
}

// Protobuf tags (field number << 3 | wire type) used below.
constexpr std::uint8_t kTagVarint1 = (1 << 3) | 0, kTagVarint2 = (2 << 3) | 0;
constexpr std::uint8_t kTagBytes3 = (3 << 3) | 2;
constexpr std::uint8_t kTagEnvelopeOutput = (wire::Envelope::kOutputFieldNumber << 3) | 2;
static_assert(wire::Envelope::kOutputFieldNumber < 16, "one-byte tag");
static_assert(wire::Envelope::kVersionFieldNumber == 1 && wire::Envelope::kGenerationFieldNumber == 2);
static_assert(wire::Output::kStreamFieldNumber == 1 && wire::Output::kOffsetFieldNumber == 2 &&
              wire::Output::kDataFieldNumber == 3);

}  // namespace

std::size_t EncodeOutputPrefix(std::uint64_t generation, wire::Stream stream, std::uint64_t offset,
                               std::size_t data_len, char* out) {
  // Fields in number order, zero scalars omitted: what SerializeToString does.
  const std::size_t output_len = (stream != 0 ? 1 + VarintSize(static_cast<std::uint64_t>(stream)) : 0) +
                                 (offset != 0 ? 1 + VarintSize(offset) : 0) + 1 + VarintSize(data_len) +
                                 data_len;
  const std::size_t payload_len = 1 + VarintSize(kProtocolVersion) +
                                  (generation != 0 ? 1 + VarintSize(generation) : 0) + 1 +
                                  VarintSize(output_len) + output_len;
  TETHER_CHECK(data_len > 0 && payload_len <= kMaxPayloadBytes);
  char* p = out + kFrameHeaderBytes;
  *p++ = static_cast<char>(kTagVarint1);
  p = PutVarint(kProtocolVersion, p);
  if (generation != 0) {
    *p++ = static_cast<char>(kTagVarint2);
    p = PutVarint(generation, p);
  }
  *p++ = static_cast<char>(kTagEnvelopeOutput);
  p = PutVarint(output_len, p);
  if (stream != 0) {
    *p++ = static_cast<char>(kTagVarint1);
    p = PutVarint(static_cast<std::uint64_t>(stream), p);
  }
  if (offset != 0) {
    *p++ = static_cast<char>(kTagVarint2);
    p = PutVarint(offset, p);
  }
  *p++ = static_cast<char>(kTagBytes3);
  p = PutVarint(data_len, p);
  PutFrameHeader(0, payload_len, out);
  return static_cast<std::size_t>(p - out);
}

std::string EncodeEnvelope(const wire::Envelope& env, Compression compression) {
  std::string out;
  AppendEnvelope(env, compression, &out);
  return out;
}

absl::StatusOr<wire::Envelope> ParseEnvelope(std::string_view payload) {
  wire::Envelope env;
  if (!env.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return absl::InvalidArgumentError(
        absl::StrCat("envelope: ", payload.size(), " payload bytes are not a valid Envelope"));
  }
  if (env.version() != kProtocolVersion) {
    return absl::InvalidArgumentError(absl::StrCat("envelope: protocol version ", env.version(),
                                                   " (this build speaks ", kProtocolVersion, ")"));
  }
  if (env.body_case() == wire::Envelope::BODY_NOT_SET) {
    return absl::InvalidArgumentError("envelope: no body, or a body type this build does not know");
  }
  return env;
}

absl::StatusOr<bool> EnvelopeDecoder::Next(std::string_view* in, wire::Envelope* env) {
  if (!failed_.ok()) return failed_;
  std::string_view payload;
  absl::StatusOr<DecodeResult> r = frames_.DecodeView(in, &payload, &payload_);
  if (!r.ok()) {
    failed_ = r.status();
    return failed_;
  }
  if (*r == DecodeResult::kNeedMore) return false;
  absl::StatusOr<wire::Envelope> parsed = ParseEnvelope(payload);
  if (!parsed.ok()) {
    failed_ = parsed.status();
    return failed_;
  }
  *env = std::move(parsed).value();
  return true;
}

std::string_view BodyName(const wire::Envelope& env) {
  switch (env.body_case()) {
    case wire::Envelope::kLaunch: return "launch";
    case wire::Envelope::kHello: return "hello";
    case wire::Envelope::kWelcome: return "welcome";
    case wire::Envelope::kStdinData: return "stdin";
    case wire::Envelope::kStdinEof: return "stdin_eof";
    case wire::Envelope::kOutput: return "output";
    case wire::Envelope::kOutputGap: return "output_gap";
    case wire::Envelope::kExit: return "exit";
    case wire::Envelope::kAck: return "ack";
    case wire::Envelope::kStdinAck: return "stdin_ack";
    case wire::Envelope::kSignal: return "signal";
    case wire::Envelope::kTerminate: return "terminate";
    case wire::Envelope::kResize: return "resize";
    case wire::Envelope::kStatusRequest: return "status_request";
    case wire::Envelope::kStatus: return "status";
    case wire::Envelope::kDetach: return "detach";
    case wire::Envelope::kPing: return "ping";
    case wire::Envelope::kPong: return "pong";
    case wire::Envelope::kError: return "error";
    case wire::Envelope::BODY_NOT_SET: break;
  }
  return "none";
}

}  // namespace tether::protocol
