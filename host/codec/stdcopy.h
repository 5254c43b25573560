// Docker's stdcopy framing: what `POST /exec/{id}/start` (and attach, logs)
// sends when the exec has no tty. Sans-I/O, like protocol/frame.h.
//
//   offset size  field
//   0      1     stream: 0 stdin, 1 stdout, 2 stderr, 3 the engine's own
//                error (moby's Systemerr: the text of a failure, then the end)
//   1      3     zero
//   4      4     payload length, big-endian (<= the decoder's cap)
//
// The decoder takes the stream split at any points and hands out the payload
// as it arrives, as views into the input: it never buffers a frame (only up
// to 7 header bytes), so the cap bounds what a hostile engine can claim, not
// what we hold.
//
//   StdcopyDecoder dec;
//   std::string_view in = bytes_from_socket;
//   while (true) {
//     absl::StatusOr<std::optional<StdcopyPiece>> p = dec.Next(&in);
//     if (!p.ok()) { /* not stdcopy: fail the channel */ }
//     if (!*p) break;  // `in` is consumed; read more
//     Deliver((*p)->stream, (*p)->bytes);
//   }
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tether::codec {

inline constexpr std::size_t kStdcopyHeaderBytes = 8;
// The default cap on one frame's declared payload (bytes). Engines write
// what one read of the process's pipe gave (moby: 32 KiB buffers); 16 MiB
// leaves room for any engine while refusing a length that is noise.
inline constexpr std::size_t kMaxStdcopyFrameBytes = 16u << 20;

enum class StdStream : std::uint8_t {
  kStdin = 0,
  kStdout = 1,
  kStderr = 2,
  kSystemError = 3,
};

// Some payload bytes of one frame (a frame may come in several pieces).
struct StdcopyPiece {
  StdStream stream;
  std::string_view bytes;  // a view into the input given to Next
};

// Incremental demultiplexer. After an error it stays failed: a binary
// stream cannot be resynchronised.
class StdcopyDecoder {
 public:
  explicit StdcopyDecoder(std::size_t max_frame_bytes = kMaxStdcopyFrameBytes) : max_frame_(max_frame_bytes) {}

  // Consumes bytes from the front of *in (advancing it) up to and including
  // the next payload piece (never empty), or all of *in (nullopt: feed
  // more). Errors: kInvalidArgument (a stream byte above 3, nonzero
  // padding), kResourceExhausted (a length above the cap).
  absl::StatusOr<std::optional<StdcopyPiece>> Next(std::string_view* in);

  // True between frames (a clean place for the stream to end).
  bool idle() const { return header_fill_ == 0 && remaining_ == 0; }
  // Payload bytes of the current frame not yet seen.
  std::size_t remaining() const { return remaining_; }

 private:
  absl::Status ParseHeader();

  std::size_t max_frame_;
  unsigned char header_[kStdcopyHeaderBytes] = {};
  std::size_t header_fill_ = 0;
  StdStream stream_ = StdStream::kStdout;
  std::size_t remaining_ = 0;
  absl::Status failed_;
};

// One frame's bytes (header and payload), for tests and fakes. CHECKs
// that payload.size() fits in 32 bits.
std::string EncodeStdcopyFrame(StdStream stream, std::string_view payload);

}  // namespace tether::codec
