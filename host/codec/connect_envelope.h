// The Connect protocol's envelope (connectrpc.com/docs/protocol, streaming
// RPCs): one flags byte, a 4-byte big-endian length, then the message.
// E2B's envd speaks it for process.Process/Start and Connect. Sans-I/O: the
// decoder is fed whatever the socket gave (any split) and returns whole
// envelopes; nothing here allocates before the length is checked.
//
//   ConnectEnvelopeDecoder dec;
//   std::string_view in = bytes_just_read;
//   while (true) {
//     absl::StatusOr<std::optional<ConnectEnvelope>> e = dec.Decode(&in);
//     if (!e.ok()) return e.status();   // hostile or broken stream (sticky)
//     if (!*e) break;                   // need more bytes; `in` is empty
//     Handle(**e);
//   }
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tether::codec {

inline constexpr std::size_t kConnectHeaderBytes = 5;            // flags + u32be length
inline constexpr std::size_t kMaxConnectMessageBytes = 16u << 20;  // bytes; envd's events are far smaller
inline constexpr std::uint8_t kConnectFlagCompressed = 0x01;
inline constexpr std::uint8_t kConnectFlagEndStream = 0x02;

struct ConnectEnvelope {
  bool end_stream = false;  // flag 0x02: the trailer ({} or {"error":...})
  std::string message;
};

// One envelope: flags (0x00, or 0x02 with `end_stream`), length, message.
// (The caller keeps messages below 4 GiB; ours are a few hundred bytes.)
std::string EncodeConnectEnvelope(std::string_view message, bool end_stream = false);

// Incremental decoder. Flags 0x00 (a message) and 0x02 (end of stream) are
// accepted; 0x01 (compressed: we never offer compression) and any other
// flag are kInvalidArgument, a length above `max_message`
// kResourceExhausted. An error is sticky: every later call returns it and
// consumes nothing.
class ConnectEnvelopeDecoder {
 public:
  explicit ConnectEnvelopeDecoder(std::size_t max_message = kMaxConnectMessageBytes) : max_(max_message) {}

  // Consumes from the front of *in. Returns an envelope once one is whole
  // (more may remain in *in), nullopt when *in was used up without
  // completing one.
  absl::StatusOr<std::optional<ConnectEnvelope>> Decode(std::string_view* in);

  // Bytes of an incomplete envelope held (header included).
  std::size_t buffered() const { return header_len_ + body_.size(); }
  // True between envelopes (nothing partial held).
  bool at_boundary() const { return header_len_ == 0; }

 private:
  std::size_t max_;
  unsigned char header_[kConnectHeaderBytes] = {};
  std::size_t header_len_ = 0;
  std::size_t need_ = 0;  // message bytes still missing, once the header is whole
  std::string body_;
  absl::Status error_;
};

}  // namespace tether::codec
