// Reading a response from a connection (internal/client_impl.h): Beast's
// http::async_read_some, async_read_header and async_read, with a PutGate
// between the socket and the parser (internal/put_gate.h says why).
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/read_size.hpp>
#include <boost/beast/http/error.hpp>
#include <string_view>

#include "host/net/internal/client_impl.h"
#include "host/net/internal/put_gate.h"

namespace tether::net::internal {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;
constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);

std::string_view View(const boost::beast::flat_buffer& b) {
  return {static_cast<const char*>(b.data().data()), b.size()};
}

}  // namespace

asio::awaitable<error_code> ReadSome(Conn& conn, ResponseParser& parser) {
  boost::beast::flat_buffer& b = conn.buffer;
  PutGate gate;
  // Puts what the gate lets through: need_more to read on, anything else
  // (success, need_buffer, an error) for the caller.
  auto put = [&]() -> error_code {
    error_code ec;
    b.consume(parser.put(b.data(), ec));
    gate.Parsed(View(b), ec == http::error::need_more, parser.is_header_done() && parser.chunked());
    return ec;
  };
  for (bool first = true;; first = false) {
    const bool full = b.size() >= b.max_size();
    if (b.size() > 0 && (full || gate.Ready(View(b)))) {
      if (error_code ec = put(); ec != http::error::need_more) co_return ec;
    }
    if (!first && IsCancelled(co_await asio::this_coro::cancellation_state)) co_return asio::error::operation_aborted;
    const std::size_t room = boost::beast::read_size(b, 65536);
    if (room == 0) co_return http::error::buffer_overflow;
    auto [ec, n] = co_await conn.stream.async_read_some(b.prepare(room), kNoThrow);
    b.commit(n);
    if (ec == asio::error::eof) {
      // What the gate held back first: it may end the message.
      if (b.size() > 0 && gate.waiting()) {
        if (error_code put_ec = put(); put_ec != http::error::need_more) co_return put_ec;
      }
      if (!parser.got_some()) co_return http::error::end_of_stream;
      error_code eof_ec;
      parser.put_eof(eof_ec);
      co_return eof_ec;
    }
    if (ec) co_return ec;
  }
}

asio::awaitable<error_code> ReadUntil(Conn& conn, ResponseParser& parser, bool header_only) {
  parser.eager(!header_only);
  auto done = [&] { return header_only ? parser.is_header_done() : parser.is_done(); };
  for (bool first = true; !done(); first = false) {
    if (!first && IsCancelled(co_await asio::this_coro::cancellation_state)) co_return asio::error::operation_aborted;
    if (error_code ec = co_await ReadSome(conn, parser)) co_return ec;
  }
  co_return error_code();
}

}  // namespace tether::net::internal
