// Text armor: frames as lines, for channels that carry only text (they may
// append newlines, echo input, prefix lines with markers, drop NUL, or mix in
// shell noise). Sans-I/O.
//
// One armored line holds exactly one binary frame (see frame.h):
//
//   <noise?> MARKER <base85(frame)> '|' <crc32c(frame), 8 lowercase hex> [\r]\n
//
// MARKER names the direction ("~T1>" host to supervisor, "~T1<" back), so a
// channel that echoes the host's input never feeds those lines back as
// replies. The base85 alphabet has no whitespace, quotes, backslash, '~' or
// '|', and survives JSON strings and `read -r` loops. Base85 costs 25%
// (base64 would cost 33%).
//
// The decoder skips every line that is not a valid armored frame for its
// direction (wrong marker, bad character, bad checksum, over-long line) and
// counts it. Decode() never fails on such input; Next() applies the stream
// rule every relay of a byte stream must follow: a *damaged* line (a frame
// line that fails to decode, see damaged_lines()) ends the stream.
//
//   ArmorDecoder dec(ArmorDirection::kToHost);
//   std::string frame;
//   while (true) {
//     absl::StatusOr<DecodeResult> r = dec.Next(&in, &frame);
//     if (!r.ok()) { /* kDataLoss: a frame was lost; end the stream */ }
//     if (*r == DecodeResult::kNeedMore) break;
//     Forward(frame);
//   }
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "protocol/frame.h"

namespace tether::protocol {

enum class ArmorDirection { kToSupervisor, kToHost };

inline constexpr std::string_view kArmorMarkerToSupervisor = "~T1>";
inline constexpr std::string_view kArmorMarkerToHost = "~T1<";
// Longest line the decoder buffers: a full frame in base85 plus marker,
// checksum and room for channel prefixes. Longer lines are skipped.
inline constexpr std::size_t kMaxArmorLineBytes =
    (kFrameHeaderBytes + kMaxFrameBytes + 3) / 4 * 5 + 4 + 1 + 8 + 256;

// Appends one armored line (ending in '\n') holding `frame`.
void AppendArmoredLine(std::string_view frame, ArmorDirection dir, std::string* out);
std::string ArmorLine(std::string_view frame, ArmorDirection dir);

// Base85 with the armor alphabet; exposed for tests.
std::string Base85Encode(std::string_view bytes);
// Returns false on a character outside the alphabet or an impossible length.
bool Base85Decode(std::string_view text, std::string* out);

class ArmorDecoder {
 public:
  explicit ArmorDecoder(ArmorDirection dir) : dir_(dir) {}

  // Consumes *in up to and including the next valid armored line and returns
  // kFrame with the frame bytes in *frame, or kNeedMore once *in is empty.
  DecodeResult Decode(std::string_view* in, std::string* frame);

  // The stream rule: as Decode(), except that the first damaged line ends
  // the stream with kDataLoss (and every later call returns it). Frames on
  // lines before it are returned first; input after it is left in *in.
  absl::StatusOr<DecodeResult> Next(std::string_view* in, std::string* frame);

  // Lines seen that were not valid armored frames for this direction.
  std::uint64_t skipped_lines() const { return skipped_; }
  // Of those, lines that carry this direction's marker but fail to decode
  // (bad character or checksum, truncated): a frame was sent and lost, so
  // the channel corrupts data and the stream after it cannot be trusted to
  // be complete. Relays end the connection on the first one (a reattach
  // resumes from acknowledged offsets) instead of carrying on with a hole.
  std::uint64_t damaged_lines() const { return damaged_; }

 private:
  bool ParseLine(std::string_view line, std::string* frame);
  DecodeResult Scan(std::string_view* in, std::string* frame, bool stop_on_damage);

  ArmorDirection dir_;
  std::string line_;
  bool overlong_ = false;  // discarding until the next newline
  std::uint64_t skipped_ = 0;
  std::uint64_t damaged_ = 0;
};

}  // namespace tether::protocol
