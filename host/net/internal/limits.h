// The limits tether::net keeps on what a server sends (README.md has the
// table of every parser and its limit). Constants only, so the fuzzers
// (fuzz/http_response_fuzzer.cc) drive Beast's parser under the same ones.
#pragma once

#include <cstddef>

namespace tether::net::internal {

// Bytes of a response head: the status line and every header line.
inline constexpr std::size_t kMaxHeaderBytes = 64 * 1024;
// The read buffer holds a whole response head and bounds one chunk-size
// line and the trailer block of a chunked body (Beast applies no limit of
// its own to those). Beast keeps a field's size in 16 bits and throws
// std::length_error, out of the read and out of io_context::run, for a
// longer value (boost/beast/http/impl/fields.hpp, Boost 1.81); a trailer
// field is bounded only by this buffer, so the buffer must stay below that
// (found by fuzz/http_response_fuzzer.cc; it was 80 KiB).
inline constexpr std::size_t kReadBufferBytes = 64 * 1024;
// A trailer block holds at least "0\r\n", ":" and "\r\n\r\n" (8 bytes) besides a
// field's value; Beast throws above 65533 value bytes.
static_assert(kReadBufferBytes - 8 <= 65533, "a trailer field could overflow Beast's 16-bit field size");
static_assert(kReadBufferBytes >= kMaxHeaderBytes, "the buffer holds a whole head");
// Interim (1xx) heads skipped before the real one: servers send one 100 or
// a few 103s; an endless run of them is an error, not a loop until the
// deadline.
inline constexpr int kMaxInterimResponses = 16;
// One socket read of a response (head or body) at most this much.
inline constexpr std::size_t kReadChunkBytes = 32 * 1024;
// A non-2xx body read for its message (Upgrade, WebSocket refusals).
inline constexpr std::size_t kMaxErrorBodyBytes = 64 * 1024;
// Beast's own parser of a WebSocket handshake's answer, which we cannot
// configure (boost/beast/http/basic_parser.hpp, Boost 1.81): its head and
// the body of a refusal, in bytes. Named so the error can say which.
inline constexpr std::size_t kWsHandshakeHeaderBytes = 8 * 1024;
inline constexpr std::size_t kWsHandshakeBodyBytes = 8u << 20;
// All the bytes read during a WebSocket handshake (Stream::read_budget):
// Beast bounds neither a chunk-size line nor the trailers of a refusal, and
// throws for a field above 65533 bytes (as for kReadBufferBytes).
inline constexpr std::size_t kWsHandshakeReadBytes = 64 * 1024;

}  // namespace tether::net::internal
