#include "tether/output_helpers.h"

#include <doctest.h>

#include <string>
#include <vector>

namespace tether {
namespace {

OutputChunk Out(std::string bytes, StreamId s = StreamId::kStdout) { return OutputChunk{s, 0, std::move(bytes)}; }

std::vector<Line> ReadLines(const std::vector<OutputChunk>& chunks, std::size_t max = 16384) {
  LineReader r({max});
  std::vector<Line> out;
  for (const OutputChunk& c : chunks) r.Push(c, &out);
  r.Finish(&out);
  return out;
}

TEST_CASE("lines end at LF or CRLF, also when the CR and LF arrive in different chunks") {
  auto lines = ReadLines({Out("one\r\ntw"), Out("o\r"), Out("\nthree\n")});
  REQUIRE(lines.size() == 3);
  CHECK(lines[0].text == "one");
  CHECK(lines[1].text == "two");
  CHECK(lines[2].text == "three");
  for (const Line& l : lines) {
    CHECK_FALSE(l.partial);
    CHECK_FALSE(l.truncated);
  }
}

TEST_CASE("a UTF-8 character split across chunks is joined; invalid bytes become U+FFFD") {
  auto lines = ReadLines({Out("caf\xc3"), Out("\xa9 \xff ok\n")});
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].text == "caf\xc3\xa9 \xef\xbf\xbd ok");
  CHECK(SanitizeUtf8("\xed\xa0\x80") == "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");  // a surrogate is invalid
  CHECK(SanitizeUtf8(std::string("a\0b", 3)) == std::string("a\0b", 3));          // NUL is valid UTF-8
}

TEST_CASE("IsValidUtf8 accepts well-formed UTF-8 only") {
  CHECK(IsValidUtf8(""));
  CHECK(IsValidUtf8(std::string("a\0b", 3)));
  CHECK(IsValidUtf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf"));  // up to U+10FFFF
  CHECK_FALSE(IsValidUtf8("\xff"));
  CHECK_FALSE(IsValidUtf8("\xc0\xaf"));          // overlong '/'
  CHECK_FALSE(IsValidUtf8("\xe0\x80\xaf"));      // overlong, three bytes
  CHECK_FALSE(IsValidUtf8("\xed\xa0\x80"));      // a surrogate
  CHECK_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // past U+10FFFF
  CHECK_FALSE(IsValidUtf8("caf\xc3"));            // truncated at the end
  CHECK_FALSE(IsValidUtf8("\xe2\x82"));
  CHECK_FALSE(IsValidUtf8("\x80"));               // a lone continuation byte
}

TEST_CASE("stdout and stderr are split into lines separately") {
  auto lines = ReadLines({Out("o1 ", StreamId::kStdout), Out("e1\ne2", StreamId::kStderr),
                          Out("still o1\n", StreamId::kStdout)});
  REQUIRE(lines.size() == 3);
  CHECK((lines[0].stream == StreamId::kStderr && lines[0].text == "e1"));
  CHECK((lines[1].stream == StreamId::kStdout && lines[1].text == "o1 still o1"));
  CHECK((lines[2].stream == StreamId::kStderr && lines[2].text == "e2" && lines[2].partial));
}

TEST_CASE("an oversized line is clipped at a character boundary, marked truncated, the rest dropped") {
  auto lines = ReadLines({Out("abcd\xc3\xa9" "fgh"), Out("ijk\nnext\n")}, 5);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].text == "abcd");  // the 2-byte character would cross the limit
  CHECK(lines[0].truncated);
  CHECK(lines[1].text == "next");
  CHECK_FALSE(lines[1].truncated);
  // Exactly the limit, with CRLF, is not truncated.
  auto exact = ReadLines({Out("abcde\r"), Out("\n")}, 5);
  REQUIRE(exact.size() == 1);
  CHECK(exact[0].text == "abcde");
  CHECK_FALSE(exact[0].truncated);
}

TEST_CASE("a final line without a newline is partial; nothing at all gives no line") {
  CHECK(ReadLines({}).empty());
  auto lines = ReadLines({Out("done\nhalf")});
  REQUIRE(lines.size() == 2);
  CHECK((lines[1].text == "half" && lines[1].partial));
}

TEST_CASE("the tail keeps the newest bytes, chunks and lines, and says when it dropped some") {
  OutputTail tail({.max_bytes = 14, .max_chunks = 256, .max_lines = 2, .max_line_bytes = 100});
  CHECK(tail.Take().lines.empty());
  CHECK_FALSE(tail.Take().truncated);
  tail.Push(Out("a\n"));
  auto small = tail.Take();
  REQUIRE(small.lines.size() == 1);
  CHECK_FALSE(small.truncated);
  tail.Push(Out("line-one\nline-two\nline-3\n"));
  auto s = tail.Take();
  CHECK(s.truncated);
  REQUIRE(s.lines.size() == 2);
  CHECK(s.lines[0].text == "ne-two");  // the window starts mid-line
  CHECK(s.lines[0].partial);
  CHECK(s.lines[1].text == "line-3");
  OutputTail few({.max_bytes = 1000, .max_chunks = 2, .max_lines = 10, .max_line_bytes = 100});
  few.Push(Out("x\n"));
  few.Push(Out("y\n"));
  few.Push(Out("z\n"));
  auto f = few.Take();
  CHECK(f.truncated);
  REQUIRE(f.lines.size() == 2);
  CHECK(f.lines[1].text == "z");
}

}  // namespace
}  // namespace tether

namespace tether {
namespace {

// Decodes `pieces` one after another the way text output does.
std::string DecodeStreaming(const std::vector<std::string>& pieces, std::size_t max_text) {
  std::string held, out;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    held += pieces[i];
    const bool final = i + 1 == pieces.size();
    while (true) {
      Utf8Prefix d = DecodeUtf8Prefix(held, max_text, final);
      CHECK(d.text.size() <= max_text);
      CHECK(d.text == SanitizeUtf8(d.text));
      out += d.text;
      held.erase(0, d.used);
      if (d.used == 0 || held.empty()) break;
    }
    CHECK(held.size() <= (final ? 0u : 3u));
  }
  return out;
}

TEST_CASE("streaming UTF-8 decoding of any split equals decoding the whole, within the text budget") {
  const std::string alphabet("a\x80\xBF\xC2\xC3\xA9\xE0\xE2\x82\xAC\xED\xA0\xF0\x9F\x90\xF4\x8F\xFF", 18);
  unsigned seed = 12345;
  const auto next = [&seed] { return seed = seed * 1103515245u + 12345u, (seed >> 16) & 0x7fff; };
  for (int round = 0; round < 3000; ++round) {
    std::string all;
    const std::size_t n = next() % 40;
    for (std::size_t i = 0; i < n; ++i) all.push_back(alphabet[next() % alphabet.size()]);
    std::vector<std::string> pieces;
    for (std::size_t i = 0; i < all.size();) {
      const std::size_t k = 1 + next() % 5;
      pieces.push_back(all.substr(i, k));
      i += k;
    }
    if (pieces.empty()) pieces.push_back("");
    const std::size_t budget = round % 2 ? 1000 : 4 + next() % 8;  // >= one character
    REQUIRE(DecodeStreaming(pieces, budget) == SanitizeUtf8(all));
  }
}

TEST_CASE("an incomplete character is held until more bytes or the end, where it becomes U+FFFD") {
  Utf8Prefix d = DecodeUtf8Prefix("ab\xF0\x9F", 100, false);
  CHECK(d.text == "ab");
  CHECK(d.used == 2);
  d = DecodeUtf8Prefix("\xF0\x9F", 100, true);
  CHECK(d.text == "\xEF\xBF\xBD\xEF\xBF\xBD");
  d = DecodeUtf8Prefix("\xF0\x9F\x98\x80!", 100, false);  // 😀
  CHECK(d.text == "\xF0\x9F\x98\x80!");
  d = DecodeUtf8Prefix("\xED\xA0", 100, false);  // a surrogate can never complete: not held
  CHECK(d.text == "\xEF\xBF\xBD\xEF\xBF\xBD");
  d = DecodeUtf8Prefix("\xFF\xFF", 4, true);  // budget: one U+FFFD fits in 4 bytes
  CHECK(d.text == "\xEF\xBF\xBD");
  CHECK(d.used == 1);
}

}  // namespace
}  // namespace tether
