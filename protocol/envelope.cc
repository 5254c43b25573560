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
  absl::StatusOr<DecodeResult> r = frames_.Decode(in, &payload_);
  if (!r.ok()) {
    failed_ = r.status();
    return failed_;
  }
  if (*r == DecodeResult::kNeedMore) return false;
  absl::StatusOr<wire::Envelope> parsed = ParseEnvelope(payload_);
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
