// Test support for the tests of tether::net and the providers' transports:
// throwaway certificates made with the OpenSSL C API, and in-process
// servers (TCP on 127.0.0.1 or a Unix socket, plain or TLS) that run a
// coroutine per connection on the test's io_context.
//
// Compiled once (net_test_support.cc, the tether_net_test_support library):
// the server's accept loop and the HTTP reads and writes over Stream are
// the heaviest Beast instantiations of these tests, and seven test files
// used to instantiate them each (about 28 s apiece under ASan + UBSan).
#pragma once

#include <openssl/evp.h>
#include <openssl/x509.h>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/basic_socket_acceptor.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "host/net/internal/stream.h"

namespace tether::net::testing {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using internal::Stream;

struct KeyPair {
  std::string cert_pem;
  std::string key_pem;
};

// A CA and the certificates it signs (ECDSA P-256, valid from an hour ago
// for a day).
class TestCa {
 public:
  explicit TestCa(const char* name);
  ~TestCa();
  TestCa(const TestCa&) = delete;
  TestCa& operator=(const TestCa&) = delete;
  std::string pem() const;
  // A leaf signed by this CA; `san` like "IP:127.0.0.1,DNS:localhost".
  KeyPair Issue(const char* cn, const char* san) const;

 private:
  EVP_PKEY* key_;
  X509* cert_;
};

// A TLS server context with `server`'s certificate; when `client_ca` is
// set, clients must present a certificate it signed.
std::unique_ptr<asio::ssl::context> ServerTls(const KeyPair& server, const std::string& client_ca = "");

// One connection's handler. Exceptions (a client that went away) end the
// connection quietly.
using Handler = std::function<asio::awaitable<void>(Stream&)>;

class TestServer {
 public:
  // TCP on 127.0.0.1, an ephemeral port.
  TestServer(asio::io_context& io, Handler h, asio::ssl::context* tls = nullptr);
  // A Unix socket at `path`.
  TestServer(asio::io_context& io, Handler h, const std::string& path);
  ~TestServer();

  int port() const { return port_; }
  int accepts() const { return *accepts_; }
  std::string url(const char* scheme, const char* host = "127.0.0.1") const {
    return std::string(scheme) + "://" + host + ":" + std::to_string(port_);
  }

 private:
  asio::awaitable<void> Loop();
  static asio::awaitable<void> Serve(std::shared_ptr<Stream> s, Handler h);

  asio::io_context& io_;
  asio::basic_socket_acceptor<asio::generic::stream_protocol> acceptor_;
  Handler handler_;
  asio::ssl::context* tls_ = nullptr;
  int port_ = 0;
  std::shared_ptr<int> accepts_ = std::make_shared<int>(0);
};

// Runs `test` on `io` until it finishes (servers are abandoned), rethrowing
// what it threw.
void Run(asio::io_context& io, std::function<asio::awaitable<void>()> test);

using ServerRequest = http::request<http::string_body>;

// Reads one request; nullopt at EOF.
asio::awaitable<std::optional<ServerRequest>> ReadRequest(Stream& s, boost::beast::flat_buffer& buf);

asio::awaitable<void> Respond(Stream& s, int status, std::string body, bool keep_alive = true,
                              const char* content_type = "text/plain");

asio::awaitable<void> WriteRaw(Stream& s, std::string bytes);

inline asio::awaitable<void> Sleep(std::chrono::milliseconds d) {
  asio::steady_timer t(co_await asio::this_coro::executor);
  t.expires_after(d);
  co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
}

}  // namespace tether::net::testing
