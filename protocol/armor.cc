#include "protocol/armor.h"

#include <array>
#include <cstring>

#include "protocol/crc32c.h"

namespace tether::protocol {
namespace {

constexpr char kAlphabet[] =
    "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    "!#%()*+,-./:<=>?@[]^_{}";
static_assert(sizeof(kAlphabet) - 1 == 85);

constexpr std::array<std::int8_t, 256> MakeReverse() {
  std::array<std::int8_t, 256> r{};
  for (auto& v : r) v = -1;
  for (int i = 0; i < 85; ++i) r[static_cast<unsigned char>(kAlphabet[i])] = static_cast<std::int8_t>(i);
  return r;
}
constexpr std::array<std::int8_t, 256> kReverse = MakeReverse();

constexpr char kChecksumSeparator = '|';
constexpr std::size_t kChecksumHexDigits = 8;

std::string_view Marker(ArmorDirection dir) {
  return dir == ArmorDirection::kToSupervisor ? kArmorMarkerToSupervisor : kArmorMarkerToHost;
}

// Two digits per entry: a 4-byte group is one digit and two pairs (two
// divisions by constants instead of five).
constexpr std::array<char, 85 * 85 * 2> MakePairs() {
  std::array<char, 85 * 85 * 2> p{};
  for (int i = 0; i < 85 * 85; ++i) {
    p[2 * i] = kAlphabet[i / 85];
    p[2 * i + 1] = kAlphabet[i % 85];
  }
  return p;
}
constexpr std::array<char, 85 * 85 * 2> kPairs = MakePairs();

// The five digits of v, most significant first.
inline void EncodeGroup(std::uint32_t v, char* o) {
  constexpr std::uint32_t k85Pow2 = 85 * 85;
  constexpr std::uint32_t k85Pow4 = k85Pow2 * k85Pow2;
  const std::uint32_t top = v / k85Pow4;  // 0..82
  const std::uint32_t rest = v - top * k85Pow4;
  const std::uint32_t mid = rest / k85Pow2;
  const std::uint32_t low = rest - mid * k85Pow2;
  o[0] = kAlphabet[top];
  std::memcpy(o + 1, &kPairs[2 * mid], 2);
  std::memcpy(o + 3, &kPairs[2 * low], 2);
}

void AppendBase85(std::string_view bytes, std::string* out) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  std::size_t n = bytes.size();
  // Sized once, written in place (no append per group).
  const std::size_t start = out->size();
  out->resize(start + n / 4 * 5 + (n % 4 ? n % 4 + 1 : 0));
  char* o = out->data() + start;
  for (; n >= 4; p += 4, n -= 4, o += 5) {
    EncodeGroup(static_cast<std::uint32_t>(p[0]) << 24 | static_cast<std::uint32_t>(p[1]) << 16 |
                    static_cast<std::uint32_t>(p[2]) << 8 | p[3],
                o);
  }
  if (n > 0) {
    std::uint32_t v = 0;
    for (std::size_t i = 0; i < 4; ++i) v = (v << 8) | (i < n ? p[i] : 0);
    char digits[5];
    EncodeGroup(v, digits);
    std::memcpy(o, digits, n + 1);
  }
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

std::string Base85Encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 3) / 4 * 5);
  AppendBase85(bytes, &out);
  return out;
}

bool Base85Decode(std::string_view text, std::string* out) {
  out->clear();
  if (text.size() % 5 == 1) return false;
  out->resize(text.size() / 5 * 4 + (text.size() % 5 ? text.size() % 5 - 1 : 0));
  char* o = out->data();
  const auto* t = reinterpret_cast<const unsigned char*>(text.data());
  std::size_t n = text.size();
  // Whole groups: five lookups, one sign test (an unknown character is -1).
  for (; n >= 5; t += 5, n -= 5, o += 4) {
    const int d0 = kReverse[t[0]], d1 = kReverse[t[1]], d2 = kReverse[t[2]], d3 = kReverse[t[3]],
              d4 = kReverse[t[4]];
    // Independent products, summed (not a chain of five multiply-adds).
    const std::uint64_t v = static_cast<std::uint64_t>(d0) * (85ull * 85 * 85 * 85) +
                            static_cast<std::uint64_t>(d1) * (85ull * 85 * 85) +
                            static_cast<std::uint64_t>(d2) * (85ull * 85) + static_cast<std::uint64_t>(d3) * 85 +
                            static_cast<std::uint64_t>(d4);
    if ((d0 | d1 | d2 | d3 | d4) < 0 || v > 0xffffffffULL) {
      out->clear();
      return false;
    }
    o[0] = static_cast<char>(v >> 24);
    o[1] = static_cast<char>(v >> 16);
    o[2] = static_cast<char>(v >> 8);
    o[3] = static_cast<char>(v);
  }
  if (n > 0) {
    // A short last group: padded with the highest digit.
    std::uint64_t v = 0;
    for (std::size_t k = 0; k < 5; ++k) {
      const int d = k < n ? kReverse[t[k]] : 84;
      if (d < 0) {
        out->clear();
        return false;
      }
      v = v * 85 + static_cast<std::uint64_t>(d);
    }
    if (v > 0xffffffffULL) {
      out->clear();
      return false;
    }
    for (std::size_t k = 0; k + 1 < n; ++k) *o++ = static_cast<char>((v >> (24 - 8 * k)) & 0xff);
  }
  return true;
}

void AppendArmoredLine(std::string_view frame, ArmorDirection dir, std::string* out) {
  out->reserve(out->size() + Marker(dir).size() + (frame.size() + 3) / 4 * 5 + 11);
  out->append(Marker(dir));
  AppendBase85(frame, out);
  out->push_back(kChecksumSeparator);
  static constexpr char kHex[] = "0123456789abcdef";
  const std::uint32_t crc = Crc32c(frame);
  for (int shift = 28; shift >= 0; shift -= 4) out->push_back(kHex[(crc >> shift) & 0xf]);
  out->push_back('\n');
}

std::string ArmorLine(std::string_view frame, ArmorDirection dir) {
  std::string out;
  AppendArmoredLine(frame, dir, &out);
  return out;
}

bool ArmorDecoder::ParseLine(std::string_view line, std::string* frame) {
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) {
    line.remove_suffix(1);
  }
  // The marker may follow channel noise (prefix bytes, prompts): use the last
  // occurrence, since the body itself can never contain '~'.
  // (A line that starts with the marker and has no other '~', the usual
  // case, is found with one forward memchr instead of a backward scan.)
  const std::string_view marker = Marker(dir_);
  const std::size_t at = line.substr(0, marker.size()) == marker && line.find('~', marker.size()) == line.npos
                             ? 0
                             : line.rfind(marker);
  if (at == std::string_view::npos) {
    // No marker, yet the line ends like an armored one ('|' and 8 hex
    // digits) and is not the other direction's (an echo): a frame line
    // whose marker was damaged.
    const ArmorDirection other =
        dir_ == ArmorDirection::kToHost ? ArmorDirection::kToSupervisor : ArmorDirection::kToHost;
    if (line.size() > kChecksumHexDigits && line[line.size() - kChecksumHexDigits - 1] == kChecksumSeparator &&
        line.find(Marker(other)) == std::string_view::npos) {
      bool hex = true;
      for (char c : line.substr(line.size() - kChecksumHexDigits)) hex = hex && HexValue(c) >= 0;
      if (hex) ++damaged_;
    }
    return false;
  }
  ++damaged_;  // taken back below once the line decodes
  // Our marker earlier in the same line: two frame lines whose newline
  // was damaged (the channel flipped or dropped it). The last one decodes,
  // the first is lost: that is damage, not noise.
  if (at > 0 && line.substr(0, at).find(marker) != std::string_view::npos) ++damaged_;
  line.remove_prefix(at + marker.size());
  if (line.size() < kChecksumHexDigits + 1 ||
      line[line.size() - kChecksumHexDigits - 1] != kChecksumSeparator) {
    return false;
  }
  std::uint32_t want = 0;
  for (char c : line.substr(line.size() - kChecksumHexDigits)) {
    const int h = HexValue(c);
    if (h < 0) return false;
    want = (want << 4) | static_cast<std::uint32_t>(h);
  }
  const std::string_view body = line.substr(0, line.size() - kChecksumHexDigits - 1);
  if (!Base85Decode(body, frame)) return false;
  if (frame->size() < kFrameHeaderBytes || Crc32c(*frame) != want) return false;
  --damaged_;
  return true;
}

DecodeResult ArmorDecoder::Decode(std::string_view* in, std::string* frame) {
  return Scan(in, frame, /*stop_on_damage=*/false);
}

absl::StatusOr<DecodeResult> ArmorDecoder::Next(std::string_view* in, std::string* frame) {
  const auto damaged = [] {
    return absl::DataLossError("the channel damaged a frame line (checksum or encoding): a frame was lost");
  };
  if (damaged_ > 0) return damaged();
  const DecodeResult r = Scan(in, frame, /*stop_on_damage=*/true);
  if (damaged_ > 0) return damaged();
  return r;
}

DecodeResult ArmorDecoder::Scan(std::string_view* in, std::string* frame, bool stop_on_damage) {
  while (!in->empty()) {
    const void* nl = std::memchr(in->data(), '\n', in->size());
    const std::size_t take = nl ? static_cast<const char*>(nl) - in->data() : in->size();
    if (!overlong_) {
      if (line_.size() + take > kMaxArmorLineBytes) {
        overlong_ = true;
        line_.clear();
        line_.shrink_to_fit();
      } else {
        line_.append(in->data(), take);
      }
    }
    in->remove_prefix(nl ? take + 1 : take);
    if (!nl) break;
    if (overlong_) {
      overlong_ = false;
      ++skipped_;
      continue;
    }
    const bool ok = ParseLine(line_, frame);
    line_.clear();
    if (ok) return DecodeResult::kFrame;
    ++skipped_;
    if (stop_on_damage && damaged_ > 0) break;
  }
  return DecodeResult::kNeedMore;
}

}  // namespace tether::protocol
