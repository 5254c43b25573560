// A byte stream that is a TCP or Unix socket, with or without TLS: the one
// AsyncReadStream/AsyncWriteStream type Beast's HTTP and WebSocket code runs
// over, so every operation works the same on every kind of endpoint.
#pragma once

#include <boost/asio/async_result.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core/buffers_prefix.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/beast/core/role.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <boost/beast/websocket/teardown.hpp>
#include <algorithm>
#include <optional>
#include <string>
#include <utility>

namespace tether::net::internal {

using Socket = boost::asio::generic::stream_protocol::socket;
using TlsSocket = boost::asio::ssl::stream<Socket>;

class Stream {
 public:
  using executor_type = boost::asio::any_io_executor;

  // A plain stream over an unopened socket.
  explicit Stream(const executor_type& ex) : plain_(std::in_place, ex) {}
  // A TLS stream over an unopened socket.
  Stream(const executor_type& ex, boost::asio::ssl::context& ctx) : tls_(std::in_place, Socket(ex), ctx) {}
  Stream(Stream&&) = default;
  Stream& operator=(Stream&&) = default;

  executor_type get_executor() { return lowest().get_executor(); }
  Socket& lowest() { return tls_ ? tls_->next_layer() : *plain_; }
  TlsSocket* tls() { return tls_ ? &*tls_ : nullptr; }

  // While set, reads deliver at most this many bytes in all, then fail
  // with boost::asio::error::message_size. For the WebSocket handshake:
  // Beast reads its answer into a buffer of its own that nothing bounds.
  std::optional<std::size_t> read_budget;
  // While read_budget is set, the first record_limit bytes read are kept
  // here: a handshake whose answer overran the budget still has its head,
  // and so its status, which Beast then no longer gives.
  std::string record;
  std::size_t record_limit = 0;

  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& b, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        [this](auto handler, const MutableBuffers& bufs) {
          if (read_budget) {
            ReadWithinBudget(bufs, std::move(handler));
            return;
          }
          if (tls_) {
            tls_->async_read_some(bufs, std::move(handler));
          } else {
            plain_->async_read_some(bufs, std::move(handler));
          }
        },
        token, b);
  }

  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& b, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        [this](auto handler, const ConstBuffers& bufs) {
          if (tls_) {
            tls_->async_write_some(bufs, std::move(handler));
          } else {
            plain_->async_write_some(bufs, std::move(handler));
          }
        },
        token, b);
  }

 private:
  template <class MutableBuffers, class Handler>
  void ReadWithinBudget(const MutableBuffers& bufs, Handler handler) {
    auto ex = boost::asio::get_associated_executor(handler, get_executor());
    if (*read_budget == 0) {
      boost::asio::post(ex, [h = std::move(handler)]() mutable { h(boost::asio::error::message_size, 0); });
      return;
    }
    // The wrapper keeps the caller's executor and cancellation slot: Beast
    // passes a cancelled handshake down to this read through the slot.
    auto slot = boost::asio::get_associated_cancellation_slot(handler);
    auto limited = boost::beast::buffers_prefix(*read_budget, bufs);
    auto done = boost::asio::bind_cancellation_slot(
        slot, boost::asio::bind_executor(
                  ex, [this, bufs, h = std::move(handler)](boost::system::error_code ec, std::size_t n) mutable {
                    if (read_budget) *read_budget -= std::min(n, *read_budget);
                    if (record.size() < record_limit) {
                      const std::size_t keep = std::min(n, record_limit - record.size());
                      record += boost::beast::buffers_to_string(boost::beast::buffers_prefix(keep, bufs));
                    }
                    h(ec, n);
                  }));
    if (tls_) {
      tls_->async_read_some(limited, std::move(done));
    } else {
      plain_->async_read_some(limited, std::move(done));
    }
  }

  std::optional<Socket> plain_;
  std::optional<TlsSocket> tls_;
};

// What Beast calls to drop the connection when a WebSocket fails.
inline void beast_close_socket(Stream& s) {
  boost::system::error_code ec;
  s.lowest().close(ec);
}

// The WebSocket teardown Beast finds by argument-dependent lookup: TLS
// shutdown over TLS, the TCP teardown otherwise.
inline void teardown(boost::beast::role_type role, Stream& s, boost::system::error_code& ec) {
  if (s.tls()) {
    boost::beast::teardown(role, *s.tls(), ec);
  } else {
    boost::beast::websocket::teardown(role, s.lowest(), ec);
  }
}

template <class TeardownHandler>
void async_teardown(boost::beast::role_type role, Stream& s, TeardownHandler&& handler) {
  if (s.tls()) {
    boost::beast::async_teardown(role, *s.tls(), std::forward<TeardownHandler>(handler));
  } else {
    boost::beast::websocket::async_teardown(role, s.lowest(), std::forward<TeardownHandler>(handler));
  }
}

}  // namespace tether::net::internal
