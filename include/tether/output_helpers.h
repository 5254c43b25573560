// Bounded diagnostic text from process output: a line reader and a rolling
// tail (the process API's helpers, docs/process-api.md). Pure functions of
// the chunks they are given; neither stores a transcript nor touches the
// process.
//
//   LineReader lines({.max_line_bytes = 16384});
//   std::vector<Line> out;
//   while (auto c = co_await p->Read(); c.ok() && *c) lines.Push(**c, &out);
//   lines.Finish(&out);              // a last line without '\n' is `partial`
//
//   OutputTail tail({});             // 64 KiB, 256 chunks, 200 lines
//   tail.Push(chunk);                // alongside your own log
//   OutputTail::Snapshot s = tail.Snapshot();
#pragma once

#include <cstddef>
#include <deque>
#include <string>
#include <vector>

#include "tether/process_types.h"

namespace tether {

struct Line {
  StreamId stream;
  std::string text;        // valid UTF-8 (invalid bytes become U+FFFD), no newline
  bool partial = false;    // output ended (or the window began) inside this line
  bool truncated = false;  // clipped at max_line_bytes; the rest was discarded
};

struct LineOptions {
  std::size_t max_line_bytes = 16 * 1024;
};

// Splits chunks into lines per stream: '\n' or "\r\n" (also split across
// chunks) ends a line, and UTF-8 characters split across chunks are joined.
class LineReader {
 public:
  explicit LineReader(LineOptions options = {});
  // Appends the lines `chunk` completes.
  void Push(const OutputChunk& chunk, std::vector<Line>* out);
  // End of output: appends each stream's unterminated last line as partial.
  void Finish(std::vector<Line>* out);

 private:
  struct Pending {
    std::string bytes;       // the current line so far (at most max_line_bytes)
    bool truncated = false;  // dropping until the next newline
    bool seen = false;       // some byte of this line arrived
  };
  Pending& For(StreamId s);
  void Emit(StreamId s, Pending& p, bool partial, std::vector<Line>* out);

  LineOptions options_;
  Pending out_, err_, pty_;
};

struct TailOptions {
  std::size_t max_bytes = 64 * 1024;
  std::size_t max_chunks = 256;
  std::size_t max_lines = 200;
  std::size_t max_line_bytes = 16 * 1024;
};

// A rolling window of the most recent output.
class OutputTail {
 public:
  struct Snapshot {
    std::vector<Line> lines;
    bool truncated = false;  // older output was discarded (the window may start mid-line)
  };

  explicit OutputTail(TailOptions options = {});
  void Push(const OutputChunk& chunk);
  // Independent of later pushes; lines at the window's edges can be partial.
  Snapshot Take() const;

 private:
  TailOptions options_;
  std::deque<OutputChunk> chunks_;
  std::size_t bytes_ = 0;
  bool dropped_ = false;
};

// Replaces invalid UTF-8 with U+FFFD; exposed for tests.
std::string SanitizeUtf8(std::string_view bytes);

// Well-formed UTF-8: no overlongs, no surrogates, nothing past U+10FFFF, no
// truncated character (what a JSON string carries exactly).
bool IsValidUtf8(std::string_view bytes);

// Streaming UTF-8 decoding (text output): decodes a prefix of `bytes` into at
// most `max_text` bytes of valid UTF-8, each invalid byte becoming U+FFFD.
// Unless `final`, a trailing incomplete character (a valid start of one) is
// left for the next call. `used` counts the input bytes decoded.
struct Utf8Prefix {
  std::string text;
  std::size_t used = 0;
};
Utf8Prefix DecodeUtf8Prefix(std::string_view bytes, std::size_t max_text, bool final);

}  // namespace tether
