// Output sending for one attachment, sans I/O: ring bytes -> Output frames.
//
// Owns the attachment's credit (the window the host granted, shared by both
// streams, and what it sent and the host acknowledged per stream), the
// fairness between streams (they take turns going first, so that a flooding
// stdout cannot keep the window from stderr), the zstd policy (output that
// does not compress is sent raw for a while instead of being tried every
// time), and the order at the end: a stream's EOF after its last byte, the
// Exit after both EOFs. Never reads the child or writes the socket: it fills
// an OutputBatch that the attachment writes with one gather write.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "supervisor/supervised.h"

namespace tether::supervisor {

inline constexpr std::size_t kMaxBatchBytes = 256 * 1024;  // frames coalesced per socket write
inline constexpr int kZstdSkipFrames = 64;  // raw frames after one that zstd could not shrink

// One socket write: encoded frames, and output data referenced in place in
// the rings (no copy of the data; it stays put until acknowledged, which is
// after it was written).
class OutputBatch {
 public:
  void Clear();
  // Frames appended to owned() directly are picked up by the next
  // Append/Reference/size/Views call.
  std::string* owned() { return &owned_; }
  void Append(std::string_view bytes) { owned_.append(bytes); }
  void Reference(std::string_view bytes);
  std::size_t size();
  // The pieces to write, in order (valid until the batch changes).
  const std::vector<std::string_view>& Views();

 private:
  // Turns owned bytes not yet in a piece into one (by position: owned_ may
  // still move as it grows).
  void TakeOwned();
  struct Piece {
    const char* data;  // ring bytes; null: owned_ from `pos`
    std::size_t pos;
    std::size_t len;
  };
  std::string owned_;
  std::size_t owned_size_in_pieces_ = 0;
  std::vector<Piece> pieces_;
  std::vector<std::string_view> views_;
  std::size_t size_ = 0;
};

class OutputSender {
 public:
  // At attach: zstd if the host accepts it, the window it grants (0: the default).
  void Start(bool zstd, std::uint64_t window_bytes);
  // Stream `i` is sent from `from` on (the resume offset, after any gap).
  void Resume(int i, std::uint64_t from) { sent_[i] = acked_[i] = from; }
  // The host's Ack of `offsets` per stream, and its new window (0: unchanged).
  // Frees acknowledged ring space (`released[i]` true where it did).
  // InvalidArgument for an offset beyond what the ring ever held.
  absl::Status Ack(const std::array<std::uint64_t, kNumStreams>& offsets, std::uint64_t window_bytes,
                   Supervised& p, std::array<bool, kNumStreams>* released);
  // Appends what the window allows, then EOFs and the Exit when due.
  void Append(const Supervised& p, std::uint64_t generation, OutputBatch* batch);

  bool exit_sent() const { return exit_sent_; }
  std::uint64_t window() const { return window_; }
  std::uint64_t sent(int i) const { return sent_[i]; }
  std::uint64_t acked(int i) const { return acked_[i]; }

 private:
  bool zstd_ = false;
  std::array<int, kNumStreams> zstd_skip_{};  // raw frames to send before trying zstd again
  std::uint64_t window_ = kDefaultWindowBytes;
  std::array<std::uint64_t, kNumStreams> sent_{};
  std::array<std::uint64_t, kNumStreams> acked_{};
  std::array<bool, kNumStreams> eof_sent_{};
  bool exit_sent_ = false;
  int first_stream_ = 0;
};

}  // namespace tether::supervisor
