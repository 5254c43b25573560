// Envelope codec: protobuf Envelope <-> frame payload, with the checks every
// receiver needs (protocol version, a known body). Sans-I/O.
//
//   std::string out;
//   AppendEnvelope(env, Compression::kAuto, &out);   // ready to write
//
//   EnvelopeDecoder dec;                             // one per byte stream
//   wire::Envelope env;
//   while (true) {
//     absl::StatusOr<bool> got = dec.Next(&in, &env);
//     if (!got.ok()) return got.status();            // close the peer
//     if (!*got) break;                              // need more bytes
//     Dispatch(env);
//   }
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "protocol/frame.h"
#include "tether/protocol/tether.pb.h"

namespace tether::protocol {

namespace wire = ::tether::wire;

// Serializes `env` (stamping the protocol version) and appends one frame.
void AppendEnvelope(const wire::Envelope& env, Compression compression, std::string* out);
std::string EncodeEnvelope(const wire::Envelope& env, Compression compression = Compression::kNone);

// The frame header and Envelope prefix of an uncompressed Output frame whose
// `data` (data_len > 0 bytes, eof false) follows as the frame's last bytes,
// so that the supervisor can send output straight from its ring with one
// gather write instead of copying it into a message and a batch. prefix +
// data is byte-identical to AppendEnvelope() of the same Envelope (tested).
// Returns the prefix length (at most kMaxOutputPrefixBytes).
inline constexpr std::size_t kMaxOutputPrefixBytes = 64;
std::size_t EncodeOutputPrefix(std::uint64_t generation, wire::Stream stream, std::uint64_t offset,
                               std::size_t data_len, char* out);

// Parses one frame payload. Errors: kInvalidArgument for bytes that are not an
// Envelope, a version this build does not speak, or a missing/unknown body.
absl::StatusOr<wire::Envelope> ParseEnvelope(std::string_view payload);

// FrameDecoder + ParseEnvelope over a byte stream split at any points.
class EnvelopeDecoder {
 public:
  // Returns true with *env filled, false when *in is consumed (need more), or
  // the first error (after which the stream is unusable).
  absl::StatusOr<bool> Next(std::string_view* in, wire::Envelope* env);
  bool idle() const { return frames_.idle(); }

 private:
  FrameDecoder frames_;
  std::string payload_;
  absl::Status failed_;
};

// Human name of an envelope's body, for errors and logs ("stdin", "hello").
std::string_view BodyName(const wire::Envelope& env);

}  // namespace tether::protocol
