// Fuzz target: an HTTP/1.1 response as tether::net reads one, driven from
// bytes: Beast's response parsers under the limits of
// host/net/internal/limits.h, over a read buffer bounded as Conn's
// (kReadBufferBytes), fed in fuzzer-chosen pieces through the PutGate of
// host/net/internal/put_gate.h, as host/net/read.cc feeds them. The head is read as
// ReadHead does (header limit, 1xx heads skipped up to
// kMaxInterimResponses, HEAD has no body), the body as Call does (a string
// body under a body limit) or as BodyStream::ReadSome does (the caller's
// buffer, no limit).
//
// Input layout: byte 0: bit 0 a HEAD request, bit 1 the body streamed,
// bits 2..4 the number k (0..7) of split bytes that follow (fuzz_util.h's
// Splitter); then the response bytes.
//
// Peer input must never crash or abort; failed invariants are our bugs:
//  - the read buffer never holds more than kReadBufferBytes;
//  - a buffered body never exceeds its limit, and one read to its end with
//    a Content-Length has exactly that many bytes;
//  - a streamed read never writes past the caller's buffer;
//  - every read makes progress (the whole input is consumed or an error
//    ends it);
//  - a put() the gate held back could not have got further: when the input
//    ends with bytes held back, putting them consumes nothing and does not
//    end the message (else a peer that sent a whole answer and waits would
//    hang the host until its deadline).
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "host/net/internal/limits.h"
#include "host/net/internal/put_gate.h"

namespace {

namespace http = boost::beast::http;
using boost::system::error_code;
using tether::net::internal::kMaxHeaderBytes;
using tether::net::internal::kMaxInterimResponses;
using tether::net::internal::kReadBufferBytes;
using tether::net::internal::PutGate;

constexpr char kFuzzTarget[] = "http_response_fuzzer";
constexpr std::size_t kBodyLimit = 4096;     // bytes: max_body, small so the limit is reached
constexpr std::size_t kCallerBuffer = 1000;  // bytes: a ReadSome's buffer

// The socket: the input, given out in pieces into the bounded read buffer.
struct Peer {
  std::string_view rest;
  tether::fuzz::Splitter split;
  boost::beast::flat_buffer buffer{kReadBufferBytes};
  PutGate gate;

  std::string_view View() const { return {static_cast<const char*>(buffer.data().data()), buffer.size()}; }
  // Whether read.cc would put() now: the gate lets it, or the buffer is full.
  bool ShouldPut() { return buffer.size() > 0 && (buffer.size() >= buffer.max_size() || gate.Ready(View())); }

  // Reads some more; buffer_overflow when the buffer is full (as Beast's
  // read ops report it), false at EOF.
  bool Read(error_code& ec) {
    if (buffer.size() >= buffer.max_size()) {
      ec = http::error::buffer_overflow;
      return false;
    }
    if (rest.empty()) return false;
    std::size_t n = split.Size(rest.size());
    if (n == 0) n = 1;
    n = std::min(n, buffer.max_size() - buffer.size());
    auto mb = buffer.prepare(n);
    std::memcpy(mb.data(), rest.data(), n);
    buffer.commit(n);
    rest.remove_prefix(n);
    FUZZ_CHECK(buffer.size() <= kReadBufferBytes);
    return true;
  }
};

template <typename Parser>
void Put(Peer& peer, Parser& p, error_code& ec) {
  const std::size_t used = p.put(peer.buffer.data(), ec);
  FUZZ_CHECK(used <= peer.buffer.size());
  peer.buffer.consume(used);
  peer.gate.Parsed(peer.View(), ec == http::error::need_more, p.is_header_done() && p.chunked());
}

// At the end of the input (read.cc: at EOF, or a peer that waits): bytes
// the gate held back are put now, and that put must get nowhere. Returns
// false when it ended in an error (as read.cc returns it).
template <typename Parser>
bool PutHeld(Peer& peer, Parser& p, error_code& ec) {
  if (peer.buffer.size() == 0 || !peer.gate.waiting()) return true;
  const bool was_done = p.is_done();
  const std::size_t before = peer.buffer.size();
  Put(peer, p, ec);
  FUZZ_CHECK(peer.buffer.size() == before);
  FUZZ_CHECK(p.is_done() == was_done);
  FUZZ_CHECK(ec != http::error::need_buffer);
  if (ec == http::error::need_more) {
    ec = {};
    return true;
  }
  FUZZ_CHECK(ec);
  return false;
}

// The head as ReadHead reads it (a Content-Length above `body_limit` is an
// error there); nullptr on an error.
std::unique_ptr<http::response_parser<http::empty_body>> ReadHead(Peer& peer, bool head_request,
                                                                  boost::optional<std::uint64_t> body_limit) {
  for (int interim = 0; interim <= kMaxInterimResponses; ++interim) {
    auto p = std::make_unique<http::response_parser<http::empty_body>>();
    p->header_limit(kMaxHeaderBytes);
    p->body_limit(body_limit);
    if (head_request) p->skip(true);
    p->eager(false);
    error_code ec;
    while (!p->is_header_done()) {
      if (peer.ShouldPut()) {
        Put(peer, *p, ec);
        if (ec && ec != http::error::need_more) return nullptr;
        if (p->is_header_done()) break;
        ec = {};
      }
      if (!peer.Read(ec)) {
        if (ec || !PutHeld(peer, *p, ec)) return nullptr;
        if (p->got_some()) p->put_eof(ec);
        return nullptr;  // EOF before a whole head is always an error
      }
    }
    const int status = static_cast<int>(p->get().result_int());
    if (status >= 200 || status == 101) return p;
  }
  return nullptr;  // too many interim heads
}

void ReadBuffered(Peer& peer, http::response_parser<http::empty_body>&& head) {
  http::response_parser<http::string_body> p(std::move(head));
  p.body_limit(kBodyLimit);
  p.eager(true);
  const boost::optional<std::uint64_t> declared = p.content_length();
  error_code ec;
  while (!p.is_done()) {
    if (peer.ShouldPut()) {
      Put(peer, p, ec);
      FUZZ_CHECK(p.get().body().size() <= kBodyLimit);
      if (ec && ec != http::error::need_more) return;
      if (p.is_done()) break;
      ec = {};
    }
    if (!peer.Read(ec)) {
      if (ec || !PutHeld(peer, p, ec)) return;
      p.put_eof(ec);
      if (ec) return;
      break;
    }
  }
  FUZZ_CHECK(p.get().body().size() <= kBodyLimit);
  if (p.is_done() && declared && !p.get().chunked()) FUZZ_CHECK(p.get().body().size() == *declared);
}

void ReadStreamed(Peer& peer, http::response_parser<http::empty_body>&& head) {
  http::response_parser<http::buffer_body> p(std::move(head));
  p.body_limit(boost::none);
  char buf[kCallerBuffer + 1];
  buf[kCallerBuffer] = '\x5a';  // a guard byte: nothing writes past the caller's buffer
  error_code ec;
  while (!p.is_done()) {
    auto& body = p.get().body();
    body.data = buf;
    body.size = kCallerBuffer;
    body.more = true;
    if (peer.ShouldPut()) {
      Put(peer, p, ec);
      if (ec == http::error::need_buffer) ec = {};
      FUZZ_CHECK(p.get().body().size <= kCallerBuffer);
      FUZZ_CHECK(buf[kCallerBuffer] == '\x5a');
      if (ec && ec != http::error::need_more) return;
      if (kCallerBuffer - p.get().body().size > 0) continue;  // got body bytes: the next ReadSome
      ec = {};
    }
    if (!peer.Read(ec)) {
      if (ec || !PutHeld(peer, p, ec)) return;
      p.put_eof(ec);
      return;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const unsigned char sel = static_cast<unsigned char>(all[0]);
  const bool head_request = sel & 1;
  const bool streamed = sel & 2;
  const std::size_t k = (sel >> 2) % 8;
  if (1 + k > all.size()) return 0;
  Peer peer{all.substr(1 + k), tether::fuzz::Splitter{all.substr(1, k)}};
  auto head = ReadHead(peer, head_request, streamed ? boost::none : boost::optional<std::uint64_t>(kBodyLimit));
  if (!head) return 0;
  if (head->is_done()) return 0;  // HEAD, 204, 304: no body
  if (streamed) {
    ReadStreamed(peer, std::move(*head));
  } else {
    ReadBuffered(peer, std::move(*head));
  }
  return 0;
}
