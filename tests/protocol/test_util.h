// Helpers shared by the protocol tests: deterministic test data and drivers
// that feed a byte stream to a decoder in chosen chunks, checking the
// "consumes all of `in` before asking for more" contract on every call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "protocol/armor.h"
#include "protocol/frame.h"

namespace tether::protocol::testing {

// Debian's abseil has its own string_view type (not std::string_view).
inline bool Contains(absl::string_view haystack, absl::string_view needle) {
  return haystack.find(needle) != absl::string_view::npos;
}

// A frame header with every field chosen by the caller (length big-endian).
inline std::string FrameHeader(std::uint32_t length, std::uint8_t flags = 0,
                               std::uint8_t version = kFrameFormatVersion,
                               std::uint8_t magic0 = kFrameMagic0, std::uint8_t magic1 = kFrameMagic1) {
  const unsigned char h[kFrameHeaderBytes] = {
      magic0, magic1, version, flags, static_cast<unsigned char>(length >> 24),
      static_cast<unsigned char>(length >> 16), static_cast<unsigned char>(length >> 8),
      static_cast<unsigned char>(length)};
  return std::string(reinterpret_cast<const char*>(h), sizeof h);
}

// `n` pseudo-random bytes; the same seed always gives the same bytes.
inline std::string RandomBytes(std::size_t n, std::uint32_t seed = 1) {
  std::mt19937 rng(seed);
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(rng() & 0xff);
  return out;
}

// `n` bytes of repetitive text that zstd shrinks well.
inline std::string CompressibleBytes(std::size_t n) {
  static constexpr std::string_view kLine = "tether: the quick brown fox jumps over the lazy dog 0123456789\n";
  std::string out;
  out.reserve(n + kLine.size());
  while (out.size() < n) out.append(kLine);
  out.resize(n);
  return out;
}

// Every byte value 0..255 once, in order.
inline std::string AllByteValues() {
  std::string out(256, '\0');
  for (int i = 0; i < 256; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>(i);
  return out;
}

// What a decoder produced from a whole stream.
struct Decoded {
  std::vector<std::string> items;  // payloads (frame decoder) or frames (armor)
  absl::Status status;             // first error, if any
  bool idle = true;                // FrameDecoder::idle() at the end
  std::uint64_t skipped = 0;       // ArmorDecoder::skipped_lines() at the end
};

// Splits `stream` into chunks whose sizes come from `next_size(i)` for chunk
// i (0 is allowed: an empty feed) and feeds them to a fresh FrameDecoder.
// Stops at the first error. `contract_ok` turns false if a kNeedMore left
// bytes in `in`.
inline Decoded FeedFrames(std::string_view stream, const std::function<std::size_t(std::size_t)>& next_size,
                          bool* contract_ok) {
  Decoded d;
  FrameDecoder dec;
  std::size_t pos = 0;
  for (std::size_t i = 0; pos < stream.size() || i == 0; ++i) {
    std::size_t n = next_size(i);
    if (n > stream.size() - pos) n = stream.size() - pos;
    std::string_view in = stream.substr(pos, n);
    pos += n;
    while (true) {
      std::string payload;
      absl::StatusOr<DecodeResult> r = dec.Decode(&in, &payload);
      if (!r.ok()) {
        d.status = r.status();
        d.idle = dec.idle();
        return d;
      }
      if (*r == DecodeResult::kNeedMore) {
        if (!in.empty()) *contract_ok = false;
        break;
      }
      d.items.push_back(std::move(payload));
    }
  }
  d.idle = dec.idle();
  return d;
}

inline Decoded FeedFramesInChunksOf(std::string_view stream, std::size_t chunk, bool* contract_ok) {
  return FeedFrames(stream, [chunk](std::size_t) { return chunk; }, contract_ok);
}

// Feeds `stream` to FrameDecoder in two parts, split at `at`.
inline Decoded FeedFramesSplitAt(std::string_view stream, std::size_t at, bool* contract_ok) {
  return FeedFrames(
      stream, [at, &stream](std::size_t i) { return i == 0 ? at : stream.size(); }, contract_ok);
}

// The same for ArmorDecoder, which never fails.
inline Decoded FeedArmor(std::string_view stream, ArmorDirection dir,
                         const std::function<std::size_t(std::size_t)>& next_size, bool* contract_ok) {
  Decoded d;
  ArmorDecoder dec(dir);
  std::size_t pos = 0;
  for (std::size_t i = 0; pos < stream.size() || i == 0; ++i) {
    std::size_t n = next_size(i);
    if (n > stream.size() - pos) n = stream.size() - pos;
    std::string_view in = stream.substr(pos, n);
    pos += n;
    while (true) {
      std::string frame;
      if (dec.Decode(&in, &frame) == DecodeResult::kNeedMore) {
        if (!in.empty()) *contract_ok = false;
        break;
      }
      d.items.push_back(std::move(frame));
    }
  }
  d.skipped = dec.skipped_lines();
  return d;
}

}  // namespace tether::protocol::testing
