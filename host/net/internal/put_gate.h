// PutGate: when to hand Beast's HTTP parser the read buffer again. No I/O,
// so the fuzzers (fuzz/http_response_fuzzer.cc) drive the same rule.
//
// Beast's basic_parser::put() parses a last chunk's line ("0;ext\r\n") again
// from its start on every call until the trailer block after it ends
// (parse_chunk_header's find_eol, boost/beast/http/impl/basic_parser.ipp,
// Boost 1.81). Beast's own read loops call put() after every socket read,
// so a server that sends a long last-chunk line and then trickles its
// trailers one segment at a time makes the host rescan up to the whole read
// buffer per segment: time quadratic in kReadBufferBytes (66 KB sent a byte
// at a time took 32-39 s in the fuzz build, 0.28 s in one piece).
//
// The rule: a put() that asked for more (need_more) consumed nothing it
// could not finish, and it can only get further once the bytes it waits for
// have arrived. Every such wait ends on a line end: a head, a chunk-size
// line and a trailer block all end in CRLF (body bytes never leave put()
// wanting more). Waiting after a whole last-chunk line, it ends only on the
// blank line that closes the trailers ("\r\n\r\n"). So after a put() that
// needed more, the next one is let through only when the bytes read since
// hold that end (or the buffer is full, or the peer closed, which the
// caller checks first). Each put() then has something new to parse, and the
// gate itself looks at each byte once.
#pragma once

#include <cstddef>
#include <string_view>

namespace tether::net::internal {

class PutGate {
 public:
  // After a put(): `rest` is what it left in the buffer, `need_more`
  // whether it ended with http::error::need_more, `chunked_body` whether
  // the head is done and the body is chunked.
  void Parsed(std::string_view rest, bool need_more, bool chunked_body) {
    waiting_ = need_more;
    seen_ = parsed_ = rest.size();
    last_chunk_ = need_more && chunked_body && HoldsLastChunkLine(rest);
  }

  // Whether a put() of `rest` (what the last put() left plus what was read
  // since) can get further than the last one. Looks only at bytes it has
  // not seen before (and the 3 before them, for an end split across reads).
  // Besides the end it waits for, two things let a put() through, so that a
  // malformed answer fails when its bytes arrive, as it did with a put()
  // per read, not when the peer next sends a line end: a CR followed by
  // anything but LF (Beast's bad_line_ending), and the buffer having
  // doubled since the last put() (what else Beast checks on a byte count,
  // as the CRLF after chunk data). Doubling keeps the re-parsing linear.
  bool Ready(std::string_view rest) {
    if (!waiting_) return !rest.empty();
    if (rest.size() <= seen_) return false;
    const std::string_view end = last_chunk_ ? std::string_view("\r\n\r\n") : std::string_view("\n");
    const std::size_t from = seen_ >= end.size() - 1 ? seen_ - (end.size() - 1) : 0;
    const std::size_t cr_from = seen_ > 0 ? seen_ - 1 : 0;  // (a CR that ended the bytes seen)
    seen_ = rest.size();
    if (rest.find(end, from) == std::string_view::npos && !BadLineEnd(rest.substr(cr_from)) &&
        rest.size() < 2 * parsed_) {
      return false;
    }
    waiting_ = false;
    return true;
  }

  // Whether the last put() left a wait the gate is holding back (for the
  // fuzzer's check that a held-back put() could not have got further).
  bool waiting() const { return waiting_; }

  // In a chunked body, a put() that needs more waits in a chunk header
  // (chunk data never needs more). If its line is whole (after the CRLF that
  // ends the previous chunk's data), the chunk is not being consumed, so it
  // is the last one, waiting for the end of its trailers.
  static bool HoldsLastChunkLine(std::string_view rest) {
    if (rest.substr(0, 2) == "\r\n") rest.remove_prefix(2);
    return rest.find("\r\n") != std::string_view::npos;
  }

  // A CR followed by a byte other than LF (a CR at the end may yet be).
  static bool BadLineEnd(std::string_view bytes) {
    for (std::size_t i = bytes.find('\r'); i != std::string_view::npos && i + 1 < bytes.size();
         i = bytes.find('\r', i + 1)) {
      if (bytes[i + 1] != '\n') return true;
    }
    return false;
  }

 private:
  bool waiting_ = false;     // the last put() needed more
  bool last_chunk_ = false;  // ... after a whole last-chunk line
  std::size_t seen_ = 0;     // bytes of the buffer looked at
  std::size_t parsed_ = 0;   // bytes the last put() left
};

}  // namespace tether::net::internal
