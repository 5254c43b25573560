// Frame codec: the binary framing under every tunnel. Sans-I/O.
//
// A frame is an 8-byte header followed by the payload (one serialized
// Envelope, optionally zstd-compressed):
//
//   offset size  field
//   0      2     magic  'T' 0xE7
//   2      1     format version (kFrameFormatVersion)
//   3      1     flags  (kFlagZstd; every other bit must be zero)
//   4      4     payload length on the wire, big-endian, <= kMaxFrameBytes
//
// The length is checked against kMaxFrameBytes before anything is allocated;
// a compressed payload must declare its decompressed size in the zstd frame
// header and that size must be <= kMaxPayloadBytes.
//
//   FrameDecoder dec;
//   std::string_view in = bytes_from_socket;
//   std::string payload;
//   while (true) {
//     absl::StatusOr<DecodeResult> r = dec.Decode(&in, &payload);
//     if (!r.ok()) { /* hostile or corrupt peer: close */ }
//     if (*r == DecodeResult::kNeedMore) break;  // `in` is fully consumed
//     Handle(payload);
//   }
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tether::protocol {

inline constexpr std::size_t kFrameHeaderBytes = 8;
inline constexpr std::uint8_t kFrameMagic0 = 'T';
inline constexpr std::uint8_t kFrameMagic1 = 0xE7;
inline constexpr std::uint8_t kFrameFormatVersion = 1;
inline constexpr std::uint8_t kFlagZstd = 0x01;
inline constexpr std::uint8_t kKnownFlags = kFlagZstd;
// Payload bytes on the wire. Output chunks are at most 64 KiB, so 1 MiB
// leaves room for every message while bounding what a peer can make us hold.
inline constexpr std::size_t kMaxFrameBytes = 1 << 20;
// Decompressed payload bytes.
inline constexpr std::size_t kMaxPayloadBytes = 1 << 20;
// Payloads smaller than this are never compressed (zstd cannot win).
inline constexpr std::size_t kMinCompressBytes = 256;

enum class Compression {
  kNone,
  kAuto,  // zstd when it makes the frame smaller, else raw
};

// Writes the 8-byte header of a frame with `flags` and a `len`-byte payload
// (len <= kMaxFrameBytes) to out[0..7].
void PutFrameHeader(std::uint8_t flags, std::size_t len, char* out);

// Encodes one frame around `payload` (a serialized Envelope).
// CHECKs that payload.size() <= kMaxPayloadBytes: our own messages are
// always built within limits.
std::string EncodeFrame(std::string_view payload, Compression compression = Compression::kNone);
// Appends the frame to `out` instead of returning it.
void AppendFrame(std::string_view payload, Compression compression, std::string* out);

enum class DecodeResult {
  kFrame,     // *payload holds one decoded (decompressed) payload
  kNeedMore,  // all of *in was consumed; feed more bytes
};

// Incremental decoder. Accepts the byte stream split at any points. After an
// error it stays failed: a binary stream cannot be resynchronised.
class FrameDecoder {
 public:
  // Consumes bytes from the front of *in (advancing it) until one frame is
  // complete or *in is empty. Errors: kInvalidArgument (bad magic, version or
  // flags), kResourceExhausted (length or decompressed size over the limit),
  // kDataLoss (corrupt compressed payload).
  absl::StatusOr<DecodeResult> Decode(std::string_view* in, std::string* payload);

  // The same, except that a whole uncompressed frame found contiguous in
  // *in is returned as a view into *in (no copy); otherwise the payload is
  // assembled in *storage and *payload views it. The view is valid while
  // *in's bytes and *storage are.
  absl::StatusOr<DecodeResult> DecodeView(std::string_view* in, std::string_view* payload,
                                          std::string* storage);

  // True when no partial frame is buffered (a clean place for a stream to end).
  bool idle() const { return header_fill_ == 0; }
  // Bytes buffered towards the current frame.
  std::size_t buffered() const { return header_fill_ + body_.size(); }

 private:
  absl::Status ParseHeader();

  unsigned char header_[kFrameHeaderBytes] = {};
  std::size_t header_fill_ = 0;
  std::uint8_t flags_ = 0;
  std::size_t body_len_ = 0;
  std::string body_;
  absl::Status failed_;
};

// Splits a byte stream into whole raw frames (header and payload, payload
// not decoded), checking each header before buffering its body: for relays
// that re-encode frames (the text armor in the bridge and the host). Stays
// failed after an error, like FrameDecoder.
class FrameSplitter {
 public:
  // Consumes bytes from *in until one frame is whole (kFrame, in *frame) or
  // *in is empty (kNeedMore).
  absl::StatusOr<DecodeResult> Next(std::string_view* in, std::string* frame);
  bool idle() const { return buf_.empty(); }

 private:
  std::string buf_;   // the frame so far
  std::size_t need_ = kFrameHeaderBytes;
  absl::Status failed_;
};

// Decodes the header of a complete frame in `frame` and its payload; for
// callers (armor, exchange) that already hold exactly one frame.
absl::StatusOr<std::string> DecodeWholeFrame(std::string_view frame);

}  // namespace tether::protocol
