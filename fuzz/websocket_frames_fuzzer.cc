// Fuzz target: WebSocket frames from a hostile server, read as tether::net
// reads them: Beast's client-role websocket::stream with the options
// websocket.cc sets (read_message_max, no permessage-deflate), over Beast's
// in-memory test stream. The fuzzer answers the handshake properly, then
// the input is every byte the server sends (frames of any kind: masked,
// fragmented, oversized, control frames, reserved bits), then EOF.
//
// Input layout: byte 0: bit 0 a small message limit (64 bytes) instead of
// 4 KiB; bits 1..6, when not 0, the most bytes one socket read returns
// (the splits); then the server's bytes.
//
// Peer input must never crash or abort; failed invariants are our bugs:
//  - no message delivered is larger than read_message_max;
//  - every read completes (the stream ends in an error by EOF at the
//    latest: nothing waits forever on bytes that will not come).
#include <boost/asio/io_context.hpp>
#include <boost/beast/_experimental/test/stream.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket/detail/hybi13.hpp>
#include <boost/beast/websocket/stream.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"

namespace {

namespace beast = boost::beast;
namespace websocket = beast::websocket;
using boost::system::error_code;

constexpr char kFuzzTarget[] = "websocket_frames_fuzzer";
constexpr int kMaxReads = 256;  // messages read per input, at most

// The Sec-WebSocket-Key the client sent, from its request's bytes.
std::string KeyOf(std::string_view request) {
  constexpr std::string_view kField = "Sec-WebSocket-Key: ";
  std::size_t at = request.find(kField);
  FUZZ_CHECK(at != std::string_view::npos);
  at += kField.size();
  return std::string(request.substr(at, request.find("\r\n", at) - at));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const unsigned char sel = static_cast<unsigned char>(all[0]);
  const std::size_t max_message = (sel & 1) ? 64 : 4096;
  const std::size_t read_max = (sel >> 1) & 0x3f;
  const std::string_view frames = all.substr(1);

  boost::asio::io_context ioc;
  beast::test::stream client(ioc), server(ioc);
  client.connect(server);
  websocket::stream<beast::test::stream&> ws(client);
  ws.read_message_max(max_message);
  websocket::permessage_deflate no_deflate;
  no_deflate.client_enable = false;
  ws.set_option(no_deflate);

  error_code hec = boost::asio::error::would_block;
  ws.async_handshake("localhost", "/", [&](error_code ec) { hec = ec; });
  ioc.poll();
  websocket::detail::sec_ws_accept_type accept;
  websocket::detail::make_sec_ws_accept(accept, KeyOf(server.str()));
  server.clear();
  server.write_some(boost::asio::buffer(
      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " +
      std::string(accept.data(), accept.size()) + "\r\n\r\n"));
  ioc.poll();
  FUZZ_CHECK(!hec);
  if (read_max != 0) client.read_size(read_max);
  if (!frames.empty()) server.write_some(boost::asio::buffer(frames.data(), frames.size()));
  server.close();

  for (int i = 0; i < kMaxReads; ++i) {
    beast::flat_buffer buffer;
    bool done = false;
    error_code rec;
    ws.async_read(buffer, [&](error_code ec, std::size_t) {
      rec = ec;
      done = true;
    });
    ioc.restart();
    ioc.poll();
    FUZZ_CHECK(done);
    if (rec) break;
    FUZZ_CHECK(buffer.size() <= max_message);
  }
  return 0;
}
