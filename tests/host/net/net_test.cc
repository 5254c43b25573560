#include "host/net/http.h"

#include <doctest.h>
#include <stdlib.h>
#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>

#include "host/net/internal/client_impl.h"
#include "tether/errors.h"
#include "tests/host/net/net_test_support.h"

namespace tether::net {
namespace {

using namespace testing;
using namespace boost::asio::experimental::awaitable_operators;
namespace websocket = boost::beast::websocket;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

std::shared_ptr<Client> MakeClient(asio::io_context& io, const std::string& url, ClientOptions o = {}) {
  absl::StatusOr<Url> u = ParseUrl(url);
  REQUIRE(u.ok());
  o.url = *u;
  absl::StatusOr<std::shared_ptr<Client>> c = Client::Make(io.get_executor(), std::move(o));
  REQUIRE(c.ok());
  return *c;
}

// A request made outside the co_await operand (g++ 12 mishandles a braced
// aggregate there).
Request Req(std::string method, std::string target, std::string body = "") {
  Request r;
  r.method = std::move(method);
  r.target = std::move(target);
  r.body = std::move(body);
  return r;
}

// Reads a body stream to its end.
asio::awaitable<std::string> ReadAll(BodyStream& s, std::size_t piece = 4096) {
  std::string out;
  std::string buf(piece, '\0');
  for (;;) {
    absl::StatusOr<std::size_t> n = co_await s.ReadSome(std::span<char>(buf.data(), buf.size()));
    REQUIRE(n.ok());
    if (*n == 0) co_return out;
    out.append(buf.data(), *n);
  }
}

// True once `cond` holds, polled every 5 ms for up to 10 s (false then).
asio::awaitable<bool> WaitFor(std::function<bool()> cond) {
  for (int i = 0; i < 2000; ++i) {
    if (cond()) co_return true;
    co_await Sleep(milliseconds(5));
  }
  co_return cond();
}

// A server that answers every request on a connection with "<method> <target>".
Handler EchoTarget() {
  return [](Stream& s) -> asio::awaitable<void> {
    boost::beast::flat_buffer buf;
    while (std::optional<ServerRequest> req = co_await ReadRequest(s, buf)) {
      std::string body = std::string(req->method_string()) + " " + std::string(req->target());
      if (req->find(http::field::host) != req->end()) body += " host=" + std::string((*req)[http::field::host]);
      co_await Respond(s, 200, body);
    }
  };
}

std::string TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "tether-net-XXXXXX").string();
  REQUIRE(mkdtemp(tmpl.data()) != nullptr);
  return tmpl;
}

TEST_CASE("ParseUrl accepts endpoints and refuses bad ones with the reason") {
  absl::StatusOr<Url> u = ParseUrl("https://API.example.com/v1/");
  REQUIRE(u.ok());
  CHECK(u->scheme == "https");
  CHECK(u->host == "api.example.com");
  CHECK(u->port == "443");
  CHECK(u->base_path == "/v1");
  CHECK(u->tls());

  u = ParseUrl("http://127.0.0.1:8080");
  REQUIRE(u.ok());
  CHECK(u->port == "8080");
  CHECK(u->base_path.empty());
  CHECK(!u->tls());

  u = ParseUrl("ws://[::1]:9/x");
  REQUIRE(u.ok());
  CHECK(u->host == "::1");
  CHECK(u->port == "9");
  CHECK(u->base_path == "/x");

  u = ParseUrl("wss://h.example");
  REQUIRE(u.ok());
  CHECK(u->port == "443");

  u = ParseUrl("unix:///var/run/docker.sock");
  REQUIRE(u.ok());
  CHECK(u->scheme == "unix");
  CHECK(u->unix_path == "/var/run/docker.sock");
  CHECK(u->host == "localhost");

  u = ParseUrl("tcp://localhost:2375");
  REQUIRE(u.ok());
  CHECK(u->scheme == "http");
  CHECK(u->port == "2375");

  struct Bad {
    const char* url;
    const char* why;
  };
  const Bad bad[] = {
      {"api.example.com", "no scheme"},
      {"ftp://x.example", "unknown scheme"},
      {"http://api.example.com", "only loopback"},
      {"ws://10.0.0.1:80", "only loopback"},
      {"tcp://docker.example:2375", "only loopback"},
      {"https://user:pw@x.example", "user information"},
      {"https://x.example/a?b=c", "query"},
      {"https://x.example/#f", "fragment"},
      {"https://x.example:0", "port"},
      {"https://x.example:65536", "port"},
      {"https://x.example:12ab", "port"},
      {"https://x.example:", "empty port"},
      {"https://:443", "no host"},
      {"https://[::1", "unclosed"},
      {"https://x y.example", "space"},
      {"unix://relative.sock", "absolute"},
  };
  for (const Bad& b : bad) {
    CAPTURE(b.url);
    absl::StatusOr<Url> r = ParseUrl(b.url);
    REQUIRE(!r.ok());
    CHECK(absl::IsInvalidArgument(r.status()));
    CHECK(r.status().message().find(b.why) != std::string_view::npos);
  }
  // Loopback covers 127/8, ::1 and localhost.
  CHECK(IsLoopbackHost("127.0.0.1"));
  CHECK(IsLoopbackHost("127.9.8.7"));
  CHECK(IsLoopbackHost("::1"));
  CHECK(IsLoopbackHost("LocalHost"));
  CHECK(!IsLoopbackHost("128.0.0.1"));
  CHECK(!IsLoopbackHost("localhost.example"));
  CHECK(!IsLoopbackHost("::2"));
  CHECK(ParseUrl("http://127.1.2.3").ok());
}

TEST_CASE("UrlEncode passes unreserved characters only") {
  CHECK(UrlEncode("aZ09-._~") == "aZ09-._~");
  CHECK(UrlEncode("a b/c?d=e&f") == "a%20b%2Fc%3Fd%3De%26f");
  CHECK(UrlEncode(std::string("\xff\x00", 2)) == "%FF%00");
}

TEST_CASE("HttpError maps statuses and quotes the server's message") {
  Response r;
  r.status = 404;
  r.body = R"({"message":"No such container: abc"})";
  absl::Status st = HttpError(r, "GET /containers/abc/json");
  CHECK(absl::IsNotFound(st));
  CHECK(ErrorCodeOf(st) == ErrorCode::kNotFound);
  CHECK(st.message() == "GET /containers/abc/json: HTTP 404: No such container: abc");
  r.status = 500;
  r.body = std::string("boom\x01\x02", 6) + std::string(500, 'x');
  st = HttpError(r, "POST /x");
  CHECK(absl::IsInternal(st));
  CHECK(st.message().find("boom\\x01\\x02") != std::string_view::npos);
  CHECK(st.message().size() < 260);
  r.status = 401;
  CHECK(absl::IsUnauthenticated(HttpError(r, "x")));
  r.status = 403;
  CHECK(absl::IsPermissionDenied(HttpError(r, "x")));
  r.status = 409;
  CHECK(absl::IsFailedPrecondition(HttpError(r, "x")));
  r.status = 429;
  CHECK(absl::IsUnavailable(HttpError(r, "x")));
  r.status = 400;
  CHECK(absl::IsInvalidArgument(HttpError(r, "x")));
}

TEST_CASE("Call reuses one kept-alive connection and replaces one the server closed") {
  asio::io_context io;
  TestServer server(io, EchoTarget());
  auto client = MakeClient(io, server.url("http"));
  Run(io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<Response> r = co_await client->Call(Req("GET", "/a"));
    REQUIRE(r.ok());
    CHECK(r->status == 200);
    CHECK(r->body == "GET /a host=127.0.0.1:" + std::to_string(server.port()));
    r = co_await client->Call(Req("POST", "/b?x=1", "payload"));
    REQUIRE(r.ok());
    CHECK(r->body.starts_with("POST /b?x=1"));
    CHECK(server.accepts() == 1);
  });
  asio::io_context io2;
  // A server that closes each connection after its response (without saying so).
  TestServer closing(io2, [](Stream& s) -> asio::awaitable<void> {
    boost::beast::flat_buffer buf;
    if (co_await ReadRequest(s, buf)) co_await Respond(s, 200, "once");
    boost::system::error_code ec;
    s.lowest().shutdown(asio::socket_base::shutdown_both, ec);
    s.lowest().close(ec);
  });
  auto client2 = MakeClient(io2, closing.url("http"));
  Run(io2, [&]() -> asio::awaitable<void> {
    for (int i = 0; i < 3; ++i) {
      absl::StatusOr<Response> r = co_await client2->Call(Req("GET", "/"));
      REQUIRE(r.ok());
      CHECK(r->body == "once");
      co_await Sleep(milliseconds(20));  // lets the close arrive
    }
    CHECK(closing.accepts() == 3);
  });
}

TEST_CASE("Call reads a chunked response, Open streams one in pieces") {
  asio::io_context io;
  TestServer server(io, [](Stream& s) -> asio::awaitable<void> {
    boost::beast::flat_buffer buf;
    while (co_await ReadRequest(s, buf)) {
      co_await WriteRaw(s, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n");
      co_await Sleep(milliseconds(10));
      co_await WriteRaw(s, "7\r\n, world\r\n0\r\n\r\n");
    }
  });
  auto client = MakeClient(io, server.url("http"));
  Run(io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<Response> r = co_await client->Call(Req("GET", "/chunked"));
    REQUIRE(r.ok());
    CHECK(r->body == "hello, world");
    absl::StatusOr<std::unique_ptr<BodyStream>> s = co_await client->Open(Req("GET", "/stream"));
    REQUIRE(s.ok());
    CHECK((*s)->head().status == 200);
    CHECK((*s)->head().header("transfer-encoding") == "chunked");
    std::string body = co_await ReadAll(**s, 3);
    CHECK(body == "hello, world");
    CHECK(server.accepts() == 1);  // the stream ran on Call's kept-alive connection
  });
}

// A server that answers each request on a connection with "<n> <method>
// <target>" (n counts the requests it received, over all connections) and
// closes the connection without an answer at its request `drop_at`.
struct CountingServer {
  int requests = 0;
  int drop_at = 0;
  Handler handler() {
    return [this](Stream& s) -> asio::awaitable<void> {
      boost::beast::flat_buffer buf;
      while (std::optional<ServerRequest> req = co_await ReadRequest(s, buf)) {
        if (++requests == drop_at) co_return;  // read, maybe acted on, never answered
        co_await Respond(s, 200, std::to_string(requests) + " " + std::string(req->method_string()) + " " +
                                     std::string(req->target()));
      }
    };
  }
};

TEST_CASE("streams start on a kept-alive connection, and a body read to its end gives it back") {
  asio::io_context io;
  CountingServer counting;
  TestServer server(io, counting.handler());
  auto client = MakeClient(io, server.url("http"));
  Run(io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<Response> r = co_await client->Call(Req("GET", "/a"));
    REQUIRE(r.ok());
    absl::StatusOr<std::unique_ptr<BodyStream>> s = co_await client->Open(Req("POST", "/exec"));
    REQUIRE(s.ok());
    CHECK(co_await ReadAll(**s, 1) == "2 POST /exec");
    CHECK(server.accepts() == 1);
    // The stream read to its end gave its connection back (it is still
    // alive: destroying the stream must not close it).
    s->reset();
    Request up;
    up.method = "PUT";
    up.target = "/up";
    absl::StatusOr<std::unique_ptr<BodyWriter>> w = co_await client->Begin(std::move(up));
    REQUIRE(w.ok());
    CHECK((co_await (*w)->Write("x")).ok());
    absl::StatusOr<std::unique_ptr<BodyStream>> ws = co_await (*w)->Finish();
    REQUIRE(ws.ok());
    (*w)->Close();  // after Finish: the stream owns the connection
    CHECK(co_await ReadAll(**ws) == "3 PUT /up");
    r = co_await client->Call(Req("GET", "/b"));
    REQUIRE(r.ok());
    CHECK(r->body == "4 GET /b");
    CHECK(server.accepts() == 1);
    // A stream dropped before its end closes its connection: what is left
    // of its body must never be read as the next call's answer.
    s = co_await client->Open(Req("GET", "/unread"));
    REQUIRE(s.ok());
    s->reset();
    r = co_await client->Call(Req("GET", "/c"));
    REQUIRE(r.ok());
    CHECK(r->body == "6 GET /c");
    CHECK(server.accepts() == 2);
  });
}

TEST_CASE("a request a kept-alive connection delivered is never sent again, even unanswered") {
  asio::io_context io;
  CountingServer counting;
  counting.drop_at = 2;
  TestServer server(io, counting.handler());
  auto client = MakeClient(io, server.url("http"));
  Run(io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<Response> r = co_await client->Call(Req("GET", "/a"));
    REQUIRE(r.ok());
    // The server reads the POST on the kept-alive connection and closes it
    // unanswered: the command may have run, so it must not run twice.
    absl::StatusOr<std::unique_ptr<BodyStream>> s = co_await client->Open(Req("POST", "/exec"));
    CHECK(absl::IsUnavailable(s.status()));
    CHECK(counting.requests == 2);
    counting.drop_at = 4;
    r = co_await client->Call(Req("GET", "/b"));
    REQUIRE(r.ok());
    CHECK(r->body == "3 GET /b");
    r = co_await client->Call(Req("POST", "/run"));
    CHECK(absl::IsUnavailable(r.status()));
    CHECK(counting.requests == 4);
  });
  CHECK(server.accepts() == 2);
}

TEST_CASE("DrainInBackground gives back a stream's connection once the body ends, within bounds") {
  asio::io_context io;
  TestServer server(io, [](Stream& s) -> asio::awaitable<void> {
    boost::beast::flat_buffer buf;
    while (std::optional<ServerRequest> req = co_await ReadRequest(s, buf)) {
      if (req->target() == "/late-end") {
        // The last message, then the body's end 100 ms later.
        co_await WriteRaw(s, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nlast\r\n");
        co_await Sleep(milliseconds(100));
        co_await WriteRaw(s, "0\r\n\r\n");
      } else if (req->target() == "/endless") {
        co_await WriteRaw(s, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nlast\r\n");
        const std::string piece = "4000\r\n" + std::string(0x4000, 'z') + "\r\n";
        for (int i = 0; i < 64; ++i) co_await WriteRaw(s, piece);  // 1 MiB more, never ended
        co_await Sleep(milliseconds(10000));
      } else {
        co_await Respond(s, 200, std::string(req->target()));
      }
    }
  });
  auto client = MakeClient(io, server.url("http"));
  Run(io, [&]() -> asio::awaitable<void> {
    std::string buf(4, '\0');
    absl::StatusOr<std::unique_ptr<BodyStream>> s = co_await client->Open(Req("GET", "/late-end"));
    REQUIRE(s.ok());
    absl::StatusOr<std::size_t> n = co_await (*s)->ReadSome(std::span<char>(buf.data(), buf.size()));
    REQUIRE(n.ok());
    CHECK(buf == "last");
    std::optional<bool> kept;
    internal::DrainInBackground(io.get_executor(), std::move(*s), [&](bool k) { kept = k; });
    REQUIRE(co_await WaitFor([&] { return kept.has_value(); }));
    CHECK(*kept);
    absl::StatusOr<Response> r = co_await client->Call(Req("GET", "/after"));
    REQUIRE(r.ok());
    CHECK(r->body == "/after");
    CHECK(server.accepts() == 1);
    // A body that goes on past 64 KiB is not read to its end: closed.
    s = co_await client->Open(Req("GET", "/endless"));
    REQUIRE(s.ok());
    kept.reset();
    internal::DrainInBackground(io.get_executor(), std::move(*s), [&](bool k) { kept = k; });
    REQUIRE(co_await WaitFor([&] { return kept.has_value(); }));
    CHECK_FALSE(*kept);
    r = co_await client->Call(Req("GET", "/next"));
    REQUIRE(r.ok());
    CHECK(r->body == "/next");
    CHECK(server.accepts() == 2);
  });
}

TEST_CASE("a stream skips a kept-alive connection the server has closed") {
  asio::io_context io;
  bool closed = false;
  TestServer server(io, [&closed](Stream& s) -> asio::awaitable<void> {
    boost::beast::flat_buffer buf;
    if (std::optional<ServerRequest> req = co_await ReadRequest(s, buf)) {
      co_await Respond(s, 200, std::string(req->target()));
      // Keep-alive was promised; the connection is closed anyway (an idle
      // timeout on the server).
      boost::system::error_code ec;
      s.lowest().shutdown(asio::socket_base::shutdown_both, ec);
      s.lowest().close(ec);
      closed = true;
    }
  });
  auto client = MakeClient(io, server.url("http"));
  Run(io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<Response> r = co_await client->Call(Req("GET", "/a"));
    REQUIRE(r.ok());
    REQUIRE(co_await WaitFor([&] { return closed; }));  // the server's FIN is on its way
    absl::StatusOr<std::unique_ptr<BodyStream>> s = co_await client->Open(Req("POST", "/exec"));
    REQUIRE(s.ok());
    CHECK(co_await ReadAll(**s) == "/exec");
    CHECK(server.accepts() == 2);
  });
}

TEST_CASE("large bodies arrive whole, buffered and streamed") {
  asio::io_context io;
  const std::string big = [] {
    std::string b(3 << 20, '\0');
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<char>('a' + i % 23);
    return b;
  }();
  TestServer server(io, [&big](Stream& s) -> asio::awaitable<void> {
    boost::beast::flat_buffer buf;
    while (std::optional<ServerRequest> req = co_await ReadRequest(s, buf)) {
      if (req->target() == "/echo") {
        co_await Respond(s, 200, req->body());
      } else {
        co_await Respond(s, 200, big);
      }
    }
  });
  auto client = MakeClient(io, server.url("http"));
  Run(io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<Response> r = co_await client->Call(Req("GET", "/big"));
    REQUIRE(r.ok());
    CHECK(r->body == big);
    r = co_await client->Call(Req("PUT", "/echo", big));
    REQUIRE(r.ok());
    CHECK(r->body == big);
    absl::StatusOr<std::unique_ptr<BodyStream>> s = co_await client->Open(Req("GET", "/big"));
    REQUIRE(s.ok());
    CHECK(co_await ReadAll(**s, 10000) == big);
  });
}

TEST_CASE("Begin sends a chunked request body and reads the response as a stream") {
  asio::io_context io;
  std::string got_te;
  TestServer server(io, [&](Stream& s) -> asio::awaitable<void> {
    boost::beast::flat_buffer buf;
    std::optional<ServerRequest> req = co_await ReadRequest(s, buf);
    if (!req) co_return;
    got_te = std::string((*req)[http::field::transfer_encoding]);
    co_await Respond(s, 201, "got " + std::to_string(req->body().size()) + ": " + req->body());
  });
  auto client = MakeClient(io, server.url("http"));
  Run(io, [&]() -> asio::awaitable<void> {
    Request req{.method = "PUT", .target = "/upload"};
    absl::StatusOr<std::unique_ptr<BodyWriter>> w = co_await client->Begin(std::move(req));
    REQUIRE(w.ok());
    CHECK((co_await (*w)->Write("abc")).ok());
    CHECK((co_await (*w)->Write("")).ok());
    CHECK((co_await (*w)->Write("defg")).ok());
    absl::StatusOr<std::unique_ptr<BodyStream>> s = co_await (*w)->Finish();
    REQUIRE(s.ok());
    CHECK((*s)->head().status == 201);
    CHECK(co_await ReadAll(**s) == "got 7: abcdefg");
    CHECK(!(co_await (*w)->Write("late")).ok());
  });
  CHECK(got_te == "chunked");
}

TEST_CASE("Upgrade hands over bytes pipelined after the 101 head first, then half-closes") {
  asio::io_context io;
  std::string seen_upgrade;
  TestServer server(io, [&](Stream& s) -> asio::awaitable<void> {
    boost::beast::flat_buffer buf;
    std::optional<ServerRequest> req = co_await ReadRequest(s, buf);
    if (!req) co_return;
    seen_upgrade = std::string((*req)[http::field::connection]) + "/" + std::string((*req)[http::field::upgrade]);
    co_await WriteRaw(s,
                      "HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
                      "Connection: Upgrade\r\nUpgrade: tcp\r\n\r\nhello");
    // Echo until the client half-closes, then say bye and close.
    std::string echoed;
    char data[256];
    for (;;) {
      auto [ec, n] = co_await s.async_read_some(asio::buffer(data), asio::as_tuple(asio::use_awaitable));
      if (ec) break;
      co_await WriteRaw(s, std::string(data, n));
    }
    co_await WriteRaw(s, "bye");
    boost::system::error_code ec;
    s.lowest().shutdown(asio::socket_base::shutdown_send, ec);
  });
  auto client = MakeClient(io, server.url("http"));
  Run(io, [&]() -> asio::awaitable<void> {
    Request req{.method = "POST", .target = "/exec/abc/start", .body = R"({"Detach":false})"};
    req.headers.emplace_back("Content-Type", "application/json");
    absl::StatusOr<std::unique_ptr<RawStream>> r = co_await client->Upgrade(std::move(req), "tcp");
    REQUIRE(r.ok());
    RawStream& raw = **r;
    CHECK(raw.head().status == 101);
    char buf[64];
    absl::StatusOr<std::size_t> n = co_await raw.ReadSome(buf);
    REQUIRE(n.ok());
    CHECK(std::string(buf, *n) == "hello");
    CHECK((co_await raw.Write("ping")).ok());
    std::string echoed;
    while (echoed.size() < 4) {
      n = co_await raw.ReadSome(buf);
      REQUIRE(n.ok());
      REQUIRE(*n > 0);
      echoed.append(buf, *n);
    }
    CHECK(echoed == "ping");
    raw.ShutdownWrite();
    CHECK(!(co_await raw.Write("x")).ok());
    std::string tail;
    for (;;) {
      n = co_await raw.ReadSome(buf);
      REQUIRE(n.ok());
      if (*n == 0) break;
      tail.append(buf, *n);
    }
    CHECK(tail == "bye");
    raw.Close();
    raw.Close();
    CHECK(!(co_await raw.ReadSome(buf)).ok());
  });
  CHECK(seen_upgrade == "Upgrade/tcp");
}

TEST_CASE("Upgrade answered with an error status is an HttpError with the server's message") {
  asio::io_context io;
  TestServer server(io, [](Stream& s) -> asio::awaitable<void> {
    boost::beast::flat_buffer buf;
    if (co_await ReadRequest(s, buf)) {
      co_await Respond(s, 409, R"({"message":"container abc is not running"})", false, "application/json");
    }
  });
  auto client = MakeClient(io, server.url("http"));
  Run(io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<std::unique_ptr<RawStream>> r =
        co_await client->Upgrade(Req("POST", "/exec/abc/start"), "tcp");
    REQUIRE(!r.ok());
    CHECK(absl::IsFailedPrecondition(r.status()));
    CHECK(r.status().message() == "POST /exec/abc/start: HTTP 409: container abc is not running");
  });
}

TEST_CASE("a WebSocket echoes binary messages, reports the chosen subprotocol and the server's close code") {
  asio::io_context io;
  std::string offered;
  std::string auth;
  TestServer server(io, [&](Stream& s) -> asio::awaitable<void> {
    boost::beast::flat_buffer buf;
    http::request<http::string_body> req;
    co_await http::async_read(s, buf, req, asio::use_awaitable);
    offered = std::string(req[http::field::sec_websocket_protocol]);
    auth = std::string(req[http::field::authorization]);
    websocket::stream<Stream> ws(std::move(s));
    ws.set_option(websocket::stream_base::decorator(
        [](websocket::response_type& res) { res.set(http::field::sec_websocket_protocol, "v2.channel"); }));
    co_await ws.async_accept(req, asio::use_awaitable);
    boost::beast::flat_buffer msg;
    co_await ws.async_read(msg, asio::use_awaitable);
    ws.binary(ws.got_binary());
    co_await ws.async_write(msg.data(), asio::use_awaitable);
    websocket::close_reason reason(static_cast<websocket::close_code>(4001), "bye now");
    co_await ws.async_close(reason, asio::use_awaitable);
  });
  auto client = MakeClient(io, server.url("ws"));
  Run(io, [&]() -> asio::awaitable<void> {
    Headers headers = {{"Authorization", "Bearer tok"}};
    std::vector<std::string> protocols = {"v1.channel", "v2.channel"};
    absl::StatusOr<std::unique_ptr<WebSocket>> ws = co_await client->OpenWebSocket("/ws", headers, protocols);
    REQUIRE(ws.ok());
    CHECK((*ws)->subprotocol() == "v2.channel");
    CHECK((*ws)->head().status == 101);
    CHECK(!(*ws)->close_code());
    std::string payload("\x00\x01\xff binary", 10);
    CHECK((co_await (*ws)->Write(payload)).ok());
    absl::StatusOr<WebSocketMessage> m = co_await (*ws)->Read();
    REQUIRE(m.ok());
    CHECK(m->binary);
    CHECK(m->data == payload);
    m = co_await (*ws)->Read();
    REQUIRE(!m.ok());
    CHECK(absl::IsUnavailable(m.status()));
    CHECK(m.status().message().find("4001") != std::string_view::npos);
    CHECK((*ws)->close_code() == 4001);
    co_await (*ws)->AsyncClose();
    (*ws)->Close();
  });
  CHECK(offered == "v1.channel, v2.channel");
  CHECK(auth == "Bearer tok");
}

TEST_CASE("a WebSocket opens on a kept-alive connection") {
  asio::io_context io;
  TestServer server(io, [&](Stream& s) -> asio::awaitable<void> {
    boost::beast::flat_buffer buf;
    std::optional<ServerRequest> req = co_await ReadRequest(s, buf);
    if (!req) co_return;
    co_await Respond(s, 200, "pod");
    req = co_await ReadRequest(s, buf);
    if (!req || !websocket::is_upgrade(*req)) co_return;
    websocket::stream<Stream> ws(std::move(s));
    co_await ws.async_accept(*req, asio::use_awaitable);
    co_await ws.async_write(asio::buffer(std::string("on the same connection")), asio::use_awaitable);
    co_await ws.async_close(websocket::close_code::normal, asio::use_awaitable);
  });
  auto client = MakeClient(io, server.url("http"));
  Run(io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<Response> r = co_await client->Call(Req("GET", "/pod"));
    REQUIRE(r.ok());
    absl::StatusOr<std::unique_ptr<WebSocket>> ws = co_await client->OpenWebSocket("/exec", {}, {});
    REQUIRE(ws.ok());
    absl::StatusOr<WebSocketMessage> m = co_await (*ws)->Read();
    REQUIRE(m.ok());
    CHECK(m->data == "on the same connection");
    CHECK(server.accepts() == 1);
    (*ws)->Close();
  });
}

TEST_CASE("a WebSocket closes with a close handshake, bounded") {
  asio::io_context io;
  std::optional<int> server_saw;
  TestServer server(io, [&](Stream& s) -> asio::awaitable<void> {
    websocket::stream<Stream> ws(std::move(s));
    co_await ws.async_accept(asio::use_awaitable);
    boost::beast::flat_buffer msg;
    auto [ec, n] = co_await ws.async_read(msg, asio::as_tuple(asio::use_awaitable));
    if (ec == websocket::error::closed) server_saw = static_cast<int>(ws.reason().code);
  });
  auto client = MakeClient(io, server.url("ws"));
  Run(io, [&]() -> asio::awaitable<void> {
    Headers none;
    std::vector<std::string> no_protocols;
    absl::StatusOr<std::unique_ptr<WebSocket>> ws = co_await client->OpenWebSocket("/", none, no_protocols);
    REQUIRE(ws.ok());
    CHECK((*ws)->subprotocol().empty());
    co_await (*ws)->AsyncClose(4000);
    CHECK(!(co_await (*ws)->Write("x")).ok());
    co_await Sleep(milliseconds(20));
  });
  CHECK(server_saw == 4000);
}

TEST_CASE("HTTP over a Unix socket sends Host: localhost") {
  std::string dir = TempDir();
  std::string path = dir + "/docker.sock";
  asio::io_context io;
  TestServer server(io, EchoTarget(), path);
  auto client = MakeClient(io, "unix://" + path);
  Run(io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<Response> r = co_await client->Call(Req("GET", "/_ping"));
    REQUIRE(r.ok());
    CHECK(r->body == "GET /_ping host=localhost");
    r = co_await client->Call(Req("GET", "/version"));
    REQUIRE(r.ok());
    CHECK(server.accepts() == 1);
  });
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tether::net
