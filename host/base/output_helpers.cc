#include "tether/output_helpers.h"

#include <algorithm>

namespace tether {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// Length of the valid UTF-8 sequence at s[i], or 0 when it is invalid.
std::size_t Utf8SequenceLength(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  std::size_t n = 0;
  unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;  // no overlongs
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;  // <= U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
  }
  return n;
}

// True when s[i..] is shorter than the character its first byte starts and
// every byte present fits that character: more input may complete it.
bool IncompleteCharacter(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  std::size_t n = 0;
  unsigned lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return false;
  }
  const std::size_t have = s.size() - i;
  if (have >= n) return false;
  if (have >= 2 && (b(i + 1) < lo || b(i + 1) > hi)) return false;
  if (have >= 3 && (b(i + 2) & 0xC0) != 0x80) return false;
  return true;
}

// The longest prefix of `s` of at most `max` bytes that does not end inside
// a UTF-8 character.
std::size_t ClipAtCharacter(std::string_view s, std::size_t max) {
  if (s.size() <= max) return s.size();
  std::size_t cut = max;
  // Step back over continuation bytes to the start of the character at `cut`.
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80 && max - cut < 3) --cut;
  return cut;
}

}  // namespace

bool IsValidUtf8(std::string_view bytes) {
  for (std::size_t i = 0; i < bytes.size();) {
    const std::size_t n = Utf8SequenceLength(bytes, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string SanitizeUtf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (std::size_t i = 0; i < bytes.size();) {
    const std::size_t n = Utf8SequenceLength(bytes, i);
    if (n == 0) {
      out += kReplacement;
      ++i;
    } else {
      out.append(bytes.substr(i, n));
      i += n;
    }
  }
  return out;
}

Utf8Prefix DecodeUtf8Prefix(std::string_view bytes, std::size_t max_text, bool final) {
  Utf8Prefix r;
  r.text.reserve(std::min(bytes.size(), max_text));
  std::size_t i = 0;
  while (i < bytes.size()) {
    // ASCII runs in bulk.
    std::size_t j = i;
    const std::size_t room = max_text - r.text.size();
    while (j < bytes.size() && j - i < room && static_cast<unsigned char>(bytes[j]) < 0x80) ++j;
    if (j > i) {
      r.text.append(bytes.substr(i, j - i));
      i = j;
      continue;
    }
    std::size_t n = Utf8SequenceLength(bytes, i);
    if (n == 0 && !final && IncompleteCharacter(bytes, i)) break;  // wait for the rest
    const std::size_t out = n == 0 ? sizeof(kReplacement) - 1 : n;
    if (r.text.size() + out > max_text) break;
    if (n == 0) {
      r.text += kReplacement;
      n = 1;
    } else {
      r.text.append(bytes.substr(i, n));
    }
    i += n;
  }
  r.used = i;
  return r;
}

LineReader::LineReader(LineOptions options) : options_(options) {}

LineReader::Pending& LineReader::For(StreamId s) {
  return s == StreamId::kStderr ? err_ : s == StreamId::kPty ? pty_ : out_;
}

void LineReader::Emit(StreamId s, Pending& p, bool partial, std::vector<Line>* out) {
  std::string_view text = p.bytes;
  if (!partial && !p.truncated && !text.empty() && text.back() == '\r') text.remove_suffix(1);  // CRLF
  out->push_back(Line{s, SanitizeUtf8(text), partial, p.truncated});
  p = Pending{};
}

void LineReader::Push(const OutputChunk& chunk, std::vector<Line>* out) {
  Pending& p = For(chunk.stream);
  const std::size_t max = options_.max_line_bytes;
  std::string_view in = chunk.bytes;
  while (!in.empty()) {
    const std::size_t nl = in.find('\n');
    const std::string_view piece = in.substr(0, nl);
    p.seen = true;
    if (!p.truncated) {
      // Up to one byte over the limit is kept: it may be the '\r' of a CRLF.
      const std::size_t take = std::min(piece.size(), max + 1 - p.bytes.size());
      p.bytes.append(piece.substr(0, take));
      const bool cr_pending = p.bytes.size() == max + 1 && p.bytes.back() == '\r' && take == piece.size();
      if (p.bytes.size() > max && !cr_pending) {
        p.bytes.resize(ClipAtCharacter(p.bytes, max));
        p.truncated = true;
      }
    }
    if (nl == std::string_view::npos) break;
    Emit(chunk.stream, p, false, out);
    in.remove_prefix(nl + 1);
  }
}

void LineReader::Finish(std::vector<Line>* out) {
  for (auto [s, p] : {std::pair{StreamId::kStdout, &out_}, std::pair{StreamId::kStderr, &err_},
                      std::pair{StreamId::kPty, &pty_}}) {
    if (p->seen) Emit(s, *p, true, out);
  }
}

OutputTail::OutputTail(TailOptions options) : options_(options) {}

void OutputTail::Push(const OutputChunk& chunk) {
  if (chunk.bytes.empty() || options_.max_bytes == 0 || options_.max_chunks == 0) return;
  OutputChunk c = chunk;
  if (c.bytes.size() > options_.max_bytes) {
    const std::size_t drop = c.bytes.size() - options_.max_bytes;
    c.bytes.erase(0, drop);
    c.offset += drop;
    dropped_ = true;
  }
  bytes_ += c.bytes.size();
  chunks_.push_back(std::move(c));
  while (chunks_.size() > options_.max_chunks) {
    bytes_ -= chunks_.front().bytes.size();
    chunks_.pop_front();
    dropped_ = true;
  }
  while (bytes_ > options_.max_bytes) {
    OutputChunk& front = chunks_.front();
    const std::size_t excess = bytes_ - options_.max_bytes;
    if (front.bytes.size() <= excess) {
      bytes_ -= front.bytes.size();
      chunks_.pop_front();
    } else {
      front.bytes.erase(0, excess);
      front.offset += excess;
      bytes_ -= excess;
    }
    dropped_ = true;
  }
}

OutputTail::Snapshot OutputTail::Take() const {
  Snapshot s;
  LineReader reader({options_.max_line_bytes});
  for (const OutputChunk& c : chunks_) reader.Push(c, &s.lines);
  reader.Finish(&s.lines);
  if (dropped_) {
    // The window may begin inside a line: the first line of each stream is
    // only a part of one.
    bool first[4] = {true, true, true, true};
    for (Line& l : s.lines) {
      const int i = static_cast<int>(l.stream);
      if (first[i]) l.partial = true;
      first[i] = false;
    }
  }
  s.truncated = dropped_;
  if (s.lines.size() > options_.max_lines) {
    s.lines.erase(s.lines.begin(), s.lines.end() - static_cast<std::ptrdiff_t>(options_.max_lines));
    s.truncated = true;
  }
  return s;
}

}  // namespace tether
