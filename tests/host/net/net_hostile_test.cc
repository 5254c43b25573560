// tether::net against a hostile endpoint on 127.0.0.1: answers that never
// end (headers forever, a 1 GiB body declared, an endless chunked body, an
// endless SSE line, an endless WebSocket message) fail with an error naming
// the limit while the process's peak RSS grows by less than kMaxRssGrowth;
// a server that sends one byte a second (slowloris) is bounded by the
// call's deadline; a cancelled call releases its connection; an answer
// trickled a byte at a time is parsed in time linear in its size.
#include <doctest.h>
#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <sstream>

#include "host/net/http.h"
#include "host/net/internal/limits.h"
#include "host/net/internal/put_gate.h"
#include "host/native/runloop/runloop_api.h"
#include "tests/host/net/net_test_support.h"
#include "tests/host/rss_probe.h"
#include "tether/errors.h"

namespace tether::net {
namespace {

using namespace testing;
using tether::testing::RssProbe;
using namespace boost::asio::experimental::awaitable_operators;
namespace websocket = boost::beast::websocket;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

Request Req(std::string method, std::string target) {
  Request r;
  r.method = std::move(method);
  r.target = std::move(target);
  return r;
}

std::shared_ptr<Client> MakeClient(asio::io_context& io, const std::string& url, ClientOptions o = {}) {
  absl::StatusOr<Url> u = ParseUrl(url);
  REQUIRE(u.ok());
  o.url = *u;
  absl::StatusOr<std::shared_ptr<Client>> c = Client::Make(io.get_executor(), std::move(o));
  REQUIRE(c.ok());
  return *c;
}

bool Contains(const absl::Status& st, std::string_view s) {
  return std::string(st.message()).find(s) != std::string::npos;
}

// Writes `head`, then `chunk` until the client goes away.
Handler Endless(std::string head, std::string chunk) {
  return [head = std::move(head), chunk = std::move(chunk)](Stream& s) -> asio::awaitable<void> {
    boost::beast::flat_buffer buf;
    if (!co_await ReadRequest(s, buf)) co_return;
    co_await WriteRaw(s, head);
    for (;;) co_await asio::async_write(s, asio::buffer(chunk), asio::use_awaitable);
  };
}

// A chunked body's one 64 KiB chunk, over and over.
std::string Chunk64k() { return "10000\r\n" + std::string(64 * 1024, 'x') + "\r\n"; }

TEST_CASE("hostile: headers forever fail at the head limit, which the error names") {
  asio::io_context io;
  TestServer server(io, Endless("HTTP/1.1 200 OK\r\n", "X-Pad: " + std::string(1000, 'a') + "\r\n"));
  TestServer ws_server(io, Endless("HTTP/1.1 101 Switching Protocols\r\n", "X-Pad: " + std::string(1000, 'a') + "\r\n"));
  auto client = MakeClient(io, server.url("http"));
  auto ws_client = MakeClient(io, ws_server.url("ws"));
  RssProbe rss;
  Run(io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<Response> r = co_await client->Call(Req("GET", "/"));
    REQUIRE(!r.ok());
    CHECK(Contains(r.status(), "GET /: the response head exceeds 64 KiB"));
    CHECK(ErrorCodeOf(r.status()) == ErrorCode::kProtocol);
    absl::StatusOr<std::unique_ptr<BodyStream>> s = co_await client->Open(Req("GET", "/s"));
    REQUIRE(!s.ok());
    CHECK(Contains(s.status(), "the response head exceeds 64 KiB"));
    // Beast reads a WebSocket handshake's answer with its own 8 KiB limit.
    absl::StatusOr<std::unique_ptr<WebSocket>> ws = co_await ws_client->OpenWebSocket("/ws", {}, {});
    REQUIRE(!ws.ok());
    CHECK(Contains(ws.status(), "WebSocket /ws: the handshake's response head exceeds 8 KiB"));
    CHECK(ErrorCodeOf(ws.status()) == ErrorCode::kProtocol);
  });
  rss.Check("headers forever");
}

TEST_CASE("hostile: a 1 GiB body declared is refused before it is read; streamed, memory stays flat") {
  asio::io_context io;
  TestServer server(io, Endless("HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n", std::string(64 * 1024, 'z')));
  auto client = MakeClient(io, server.url("http"));
  RssProbe rss;
  Run(io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<Response> r = co_await client->Call(Req("GET", "/big"));
    REQUIRE(!r.ok());
    CHECK(Contains(r.status(), "GET /big: the response body exceeds the limit (max_body)"));
    // A stream reads it through the caller's buffer: 128 MiB of it here.
    absl::StatusOr<std::unique_ptr<BodyStream>> s = co_await client->Open(Req("GET", "/big"));
    INFO(s.status().ToString());
    REQUIRE(s.ok());
    std::vector<char> buf(64 * 1024);
    std::size_t total = 0;
    while (total < (128u << 20)) {
      absl::StatusOr<std::size_t> n = co_await (*s)->ReadSome(buf);
      REQUIRE(n.ok());
      REQUIRE(*n > 0);
      total += *n;
    }
  });
  rss.Check("1 GiB declared");
}

TEST_CASE("hostile: a refusal with a huge or endless body keeps its status and its first 64 KiB") {
  // An error answer is read for its message: its status and words must
  // survive a body above max_body (the CLI quotes them, escaped).
  asio::io_context io;
  TestServer declared(io, Endless("HTTP/1.1 403 Forbidden\r\nContent-Length: 1073741824\r\n\r\nWHY", std::string(64 * 1024, 'z')));
  TestServer chunked(io, Endless("HTTP/1.1 500 Oops\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nWHY\r\n", Chunk64k()));
  ClientOptions small;
  small.max_body = 1024;
  auto declared_client = MakeClient(io, declared.url("http"), small);
  auto chunked_client = MakeClient(io, chunked.url("http"), small);
  RssProbe rss;
  Run(io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<Response> r = co_await declared_client->Call(Req("GET", "/refused"));
    REQUIRE_MESSAGE(r.ok(), r.status());
    CHECK(r->status == 403);
    CHECK(r->body.size() == 64 * 1024);
    CHECK(r->body.rfind("WHYzzz", 0) == 0);
    r = co_await chunked_client->Call(Req("GET", "/refused"));
    REQUIRE_MESSAGE(r.ok(), r.status());
    CHECK(r->status == 500);
    CHECK(r->body.size() == 64 * 1024);
    CHECK(r->body.rfind("WHYxxx", 0) == 0);
  });
  rss.Check("huge refusal");
}

TEST_CASE("a declared Content-Length is held to max_body, not to Beast's 8 MiB default") {
  asio::io_context io;
  TestServer server(io, [](Stream& s) -> asio::awaitable<void> {
    boost::beast::flat_buffer buf;
    while (std::optional<ServerRequest> req = co_await ReadRequest(s, buf)) {
      co_await Respond(s, 200, std::string(req->target() == "/5000" ? 5000 : 10u << 20, 'c'));
    }
  });
  ClientOptions small;
  small.max_body = 1024;
  auto small_client = MakeClient(io, server.url("http"), small);
  auto client = MakeClient(io, server.url("http"));  // max_body 64 MiB
  Run(io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<Response> r = co_await small_client->Call(Req("GET", "/5000"));
    REQUIRE(!r.ok());
    CHECK(Contains(r.status(), "GET /5000: the response body exceeds the limit (max_body)"));
    r = co_await client->Call(Req("GET", "/10MiB"));
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    CHECK(r->body.size() == (10u << 20));
    absl::StatusOr<std::unique_ptr<BodyStream>> st = co_await client->Open(Req("GET", "/10MiB"));
    INFO(st.status().ToString());
    REQUIRE(st.ok());
    std::vector<char> chunk(64 * 1024);
    std::size_t total = 0;
    for (;;) {
      absl::StatusOr<std::size_t> n = co_await (*st)->ReadSome(chunk);
      REQUIRE(n.ok());
      if (*n == 0) break;
      total += *n;
    }
    CHECK(total == (10u << 20));
  });
}

TEST_CASE("hostile: an endless chunked body fails at max_body; a chunk-size line without end is named") {
  asio::io_context io;
  TestServer server(io, Endless("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", Chunk64k()));
  TestServer ext(io, Endless("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10;", std::string(4096, 'e')));
  ClientOptions o;
  o.max_body = 16u << 20;  // as runloop::kMaxViewBytes and boat::kMaxResponseBytes
  auto client = MakeClient(io, server.url("http"), o);
  auto ext_client = MakeClient(io, ext.url("http"), o);
  RssProbe rss;
  Run(io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<Response> r = co_await client->Call(Req("GET", "/chunks"));
    REQUIRE(!r.ok());
    CHECK(Contains(r.status(), "GET /chunks: the response body exceeds the limit (max_body)"));
    r = co_await ext_client->Call(Req("GET", "/ext"));
    REQUIRE(!r.ok());
    CHECK(Contains(r.status(), "GET /ext: a chunk-size line or the trailers of the response exceed 64 KiB"));
    CHECK(ErrorCodeOf(r.status()) == ErrorCode::kProtocol);
    absl::StatusOr<std::unique_ptr<BodyStream>> s = co_await ext_client->Open(Req("GET", "/ext"));
    REQUIRE(s.ok());
    std::vector<char> buf(4096);
    absl::StatusOr<std::size_t> n = co_await (*s)->ReadSome(buf);
    REQUIRE(!n.ok());
    CHECK(Contains(n.status(), "a chunk-size line or the trailers of the response exceed 64 KiB"));
  });
  rss.Check("endless chunked body");
}

TEST_CASE("hostile: a trailer field above 64 KiB is an error, not an exception out of the parser") {
  // Beast stores a field's size in 16 bits and throws std::length_error
  // for a longer value; in a trailer only the read buffer bounds it.
  asio::io_context io;
  const std::string answer = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-T: " +
                             std::string(70000, 't') + "\r\n\r\n";
  TestServer server(io, [&](Stream& s) -> asio::awaitable<void> {
    boost::beast::flat_buffer buf;
    while (co_await ReadRequest(s, buf)) co_await WriteRaw(s, answer);
  });
  auto client = MakeClient(io, server.url("http"));
  Run(io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<Response> r = co_await client->Call(Req("GET", "/trailer"));
    REQUIRE(!r.ok());
    CHECK(Contains(r.status(), "GET /trailer: a chunk-size line or the trailers of the response exceed"));
    absl::StatusOr<std::unique_ptr<BodyStream>> s = co_await client->Open(Req("GET", "/trailer"));
    REQUIRE(s.ok());
    std::vector<char> buf(4096);
    absl::StatusOr<std::size_t> n = co_await (*s)->ReadSome(buf);
    REQUIRE(!n.ok());
    CHECK(Contains(n.status(), "a chunk-size line or the trailers of the response exceed"));
  });
}

// An answer given to Beast's parser a byte per read, as read.cc feeds it
// (a put() whenever the PutGate lets one through); `done` when the parser
// finished with the last byte, before any EOF.
struct Trickled {
  bool done = false;
  int puts = 0;
  std::string body;
  std::string trailer;
  std::string error;              // the parser's error, if it failed
  std::size_t failed_after = 0;   // ... once it had been given this many bytes
};

Trickled Trickle(std::string_view answer) {
  http::response_parser<http::string_body> p;
  p.header_limit(internal::kMaxHeaderBytes);
  p.body_limit(boost::none);
  p.eager(true);
  boost::beast::flat_buffer b(internal::kReadBufferBytes);
  internal::PutGate gate;
  Trickled t;
  std::size_t given = 0;
  for (char c : answer) {
    ++given;
    *static_cast<char*>(b.prepare(1).data()) = c;
    b.commit(1);
    const std::string_view view(static_cast<const char*>(b.data().data()), b.size());
    if (!gate.Ready(view)) continue;
    boost::system::error_code ec;
    ++t.puts;
    b.consume(p.put(b.data(), ec));
    gate.Parsed(std::string_view(static_cast<const char*>(b.data().data()), b.size()), ec == http::error::need_more,
                p.is_header_done() && p.chunked());
    if (ec && ec != http::error::need_more) {
      t.error = ec.message();
      t.failed_after = given;
      return t;
    }
  }
  t.done = p.is_done();
  t.body = p.get().body();
  if (auto it = p.get().find("X-Last"); it != p.get().end()) t.trailer = std::string(it->value());
  return t;
}

// A chunked answer whose last chunk has a `ext`-byte extension and `lines`
// trailer fields after it: what Beast re-parsed on every put().
std::string LongLastChunk(std::size_t ext, int lines) {
  std::string a = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Last\r\n\r\n5;a=b\r\nhello\r\n0;x=" +
                  std::string(ext, 'e') + "\r\n";
  for (int i = 0; i < lines; ++i) a += "X-T" + std::to_string(i) + ": v\r\n";
  return a + "X-Last: end\r\n\r\n";
}

TEST_CASE("trickled: every answer a byte at a time ends with its last byte, without waiting for EOF") {
  // The gate holds back a put() only while nothing it waits for arrived: a
  // peer that sent a whole answer and waits must not hang the host.
  const std::vector<std::pair<std::string, std::string>> answers = {
      {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", "hello"},
      {"HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n", ""},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", ""},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;e=\"q\"\r\nde\r\n0\r\n\r\n", "abcde"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n\n\r\n1\r\n\r\r\n0;z\r\nX-Last: t\r\n\r\n", "\n\r"},
      {LongLastChunk(100, 3), "hello"},
  };
  for (const auto& [answer, body] : answers) {
    CAPTURE(answer.substr(0, 80));
    Trickled t = Trickle(answer);
    CHECK(t.error == "");
    CHECK(t.done);
    CHECK(t.body == body);
  }
}

TEST_CASE("trickled: a malformed answer fails as its bad bytes arrive, not at the peer's next line end") {
  // A byte per read, and nothing after the bad bytes (a peer that then
  // waits): with a put() held back until a line end, these waited for the
  // call's timeout instead of failing.
  const std::string chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
  const std::vector<std::string> bad = {
      chunked + "5\rX",                             // a chunk line's CR without LF
      chunked + "5;ext=" + std::string(3000, 'e') + "\rX",
      chunked + "3\r\nabcXYZW",                     // no CRLF after the chunk data (Beast looks at 4 bytes)
  };
  // (A trailer's CR without LF Beast takes as part of the field: not
  // malformed to it, so not here.)
  for (const std::string& answer : bad) {
    CAPTURE(answer.substr(answer.size() > 60 ? answer.size() - 60 : 0));
    Trickled t = Trickle(answer);
    CHECK_FALSE(t.done);
    CHECK(t.error != "");
    CHECK(t.failed_after == answer.size());
  }
}

TEST_CASE("trickled: a long last-chunk line and its trailers cost a few put() calls, not one per byte") {
  // 30 KB of extension on the last chunk, then 2,000 trailer lines sent a
  // byte at a time: Beast re-parsed the extension on each put(), so one
  // put() per byte was quadratic (fuzz/http_response_fuzzer.cc found it).
  const std::string answer = LongLastChunk(30000, 2000);
  REQUIRE(answer.size() < internal::kReadBufferBytes);
  Trickled t = Trickle(answer);
  CHECK(t.error == "");
  CHECK(t.done);
  CHECK(t.body == "hello");
  CHECK(t.trailer == "end");
  MESSAGE(answer.size(), " bytes a byte at a time: ", t.puts, " put() calls");
  // One put() per line of the head and per chunk line, one per byte of
  // chunk data, one each time a long line's bytes doubled (15 for the 30 KB
  // line), and one when the trailers end: 36 here, where one per byte was
  // 52,989.
  CHECK(t.puts <= 64);
}

TEST_CASE("trickled: over a socket, a long last chunk and its trailers a byte per write arrive whole") {
  asio::io_context io;
  const std::string answer = LongLastChunk(8000, 300);
  TestServer server(io, [&](Stream& s) -> asio::awaitable<void> {
    boost::beast::flat_buffer buf;
    while (co_await ReadRequest(s, buf)) {
      const std::size_t head = answer.find("0;x=");
      co_await WriteRaw(s, answer.substr(0, head));
      for (std::size_t i = head; i < answer.size(); ++i) co_await WriteRaw(s, answer.substr(i, 1));
    }
  });
  auto client = MakeClient(io, server.url("http"));
  Run(io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<Response> r = co_await client->Call(Req("GET", "/trickle"));
    REQUIRE(r.ok());
    CHECK(r->body == "hello");
    absl::StatusOr<std::unique_ptr<BodyStream>> s = co_await client->Open(Req("GET", "/trickle"));
    REQUIRE(s.ok());
    std::string got;
    std::vector<char> buf(4096);
    for (;;) {
      absl::StatusOr<std::size_t> n = co_await (*s)->ReadSome(buf);
      REQUIRE(n.ok());
      if (*n == 0) break;
      got.append(buf.data(), *n);
    }
    CHECK(got == "hello");
  });
}

TEST_CASE("hostile: a WebSocket refusal with endless or oversized trailers is bounded and keeps its status") {
  // Beast reads a handshake's answer into a buffer of its own with no bound
  // on chunk-size lines or trailers; the stream's read budget bounds it.
  asio::io_context io;
  TestServer big(io, [](Stream& s) -> asio::awaitable<void> {
    boost::beast::flat_buffer buf;
    if (!co_await ReadRequest(s, buf)) co_return;
    co_await WriteRaw(s, "HTTP/1.1 403 Forbidden\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-T: " +
                             std::string(70000, 't') + "\r\n\r\n");
    co_await Sleep(milliseconds(5000));
  });
  TestServer endless(io, Endless("HTTP/1.1 403 Forbidden\r\nTransfer-Encoding: chunked\r\n\r\n5;",
                                 std::string(64 * 1024, 'e')));
  TestServer no_head(io, Endless("HTTP/1.1 403 Forbidden\r\nX-A: ", std::string(1024, 'a')));
  auto big_client = MakeClient(io, big.url("ws"));
  auto endless_client = MakeClient(io, endless.url("ws"));
  auto no_head_client = MakeClient(io, no_head.url("ws"));
  RssProbe rss;
  Run(io, [&]() -> asio::awaitable<void> {
    // The refusal keeps its status (Beast gives none once the budget ran out).
    absl::StatusOr<std::unique_ptr<WebSocket>> ws = co_await big_client->OpenWebSocket("/ws", {}, {});
    REQUIRE(!ws.ok());
    CAPTURE(ws.status());
    CHECK(Contains(ws.status(), "WebSocket /ws: HTTP 403"));
    CHECK(Contains(ws.status(), "(the rest of the answer exceeds 64 KiB and was not read)"));
    CHECK(absl::IsPermissionDenied(ws.status()));
    ws = co_await endless_client->OpenWebSocket("/ws", {}, {});
    REQUIRE(!ws.ok());
    CAPTURE(ws.status());
    CHECK(Contains(ws.status(), "WebSocket /ws: HTTP 403"));
    CHECK(Contains(ws.status(), "(the rest of the answer exceeds 64 KiB and was not read)"));
    // An answer whose head never ends within the budget has no status.
    ws = co_await no_head_client->OpenWebSocket("/ws", {}, {});
    REQUIRE(!ws.ok());
    CHECK(Contains(ws.status(), "WebSocket /ws: the handshake's response"));
    CHECK(ErrorCodeOf(ws.status()) == ErrorCode::kProtocol);
  });
  rss.Check("endless WebSocket refusal");
}

TEST_CASE("hostile: an endless run of 1xx interim heads is an error, not a wait for the deadline") {
  asio::io_context io;
  TestServer server(io, Endless("", "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"));
  ClientOptions o;
  o.request_timeout = milliseconds(20000);
  auto client = MakeClient(io, server.url("http"), o);
  Run(io, [&]() -> asio::awaitable<void> {
    Clock::time_point t0 = Clock::now();
    absl::StatusOr<Response> r = co_await client->Call(Req("GET", "/hints"));
    REQUIRE(!r.ok());
    CHECK(Contains(r.status(), "GET /hints: more than 16 interim (1xx) responses before the response"));
    CHECK(Clock::now() - t0 < milliseconds(10000));
  });
}

TEST_CASE("hostile: an endless SSE line fails at kMaxSseEventBytes") {
  asio::io_context io;
  TestServer server(io, Endless("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: ",
                                std::string(64 * 1024, 'd')));
  auto client = MakeClient(io, server.url("http"));
  RssProbe rss;
  Run(io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<std::unique_ptr<BodyStream>> s = co_await client->Open(Req("GET", "/events"));
    REQUIRE(s.ok());
    runloop::SseDecoder sse;
    std::vector<runloop::SseEvent> events;
    std::vector<char> buf(32 * 1024);
    absl::Status st;
    std::size_t total = 0;
    while (st.ok() && total < (64u << 20)) {
      absl::StatusOr<std::size_t> n = co_await (*s)->ReadSome(buf);
      REQUIRE(n.ok());
      total += *n;
      st = sse.Feed(std::string_view(buf.data(), *n), events);
    }
    CHECK(absl::IsResourceExhausted(st));
    CHECK(Contains(st, "SSE stream: a line above 4194304 bytes (kMaxSseEventBytes)"));
    CHECK(total <= runloop::kMaxSseEventBytes + buf.size());
  });
  rss.Check("endless SSE line");
}

// A WebSocket server that, once open, writes `first` and then `each` until
// the client goes away.
Handler WsEndless(std::string first, std::string each) {
  return [first = std::move(first), each = std::move(each)](Stream& s) -> asio::awaitable<void> {
    boost::beast::flat_buffer buf;
    http::request<http::string_body> req;
    co_await http::async_read(s, buf, req, asio::use_awaitable);
    websocket::stream<Stream&> ws(s);
    co_await ws.async_accept(req, asio::use_awaitable);
    co_await WriteRaw(s, first);
    for (;;) co_await asio::async_write(s, asio::buffer(each), asio::use_awaitable);
  };
}

// An unmasked frame header (server to client) with a 64-bit length.
std::string FrameHead(unsigned char first_byte, std::uint64_t len) {
  std::string h{static_cast<char>(first_byte), static_cast<char>(127)};
  for (int shift = 56; shift >= 0; shift -= 8) h.push_back(static_cast<char>((len >> shift) & 0xff));
  return h;
}

TEST_CASE("hostile: an endless WebSocket message fails at max_message, a 2^62-byte frame at once") {
  asio::io_context io;
  const std::string payload(64 * 1024, 'w');
  // A binary frame without FIN, then continuation frames forever.
  TestServer fragments(io, WsEndless(FrameHead(0x02, payload.size()) + payload, FrameHead(0x00, payload.size()) + payload));
  TestServer huge(io, WsEndless(FrameHead(0x82, std::uint64_t{1} << 62), payload));
  auto client = MakeClient(io, fragments.url("ws"));
  auto huge_client = MakeClient(io, huge.url("ws"));
  RssProbe rss;
  Run(io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<std::unique_ptr<WebSocket>> ws = co_await client->OpenWebSocket("/ws", {}, {});
    REQUIRE(ws.ok());
    absl::StatusOr<WebSocketMessage> m = co_await (*ws)->Read();
    REQUIRE(!m.ok());
    CHECK(Contains(m.status(), "WebSocket /ws: a WebSocket message exceeds the limit (max_message)"));
    CHECK(ErrorCodeOf(m.status()) == ErrorCode::kProtocol);
    ws = co_await huge_client->OpenWebSocket("/huge", {}, {});
    REQUIRE(ws.ok());
    m = co_await (*ws)->Read();
    REQUIRE(!m.ok());
    CHECK(Contains(m.status(), "exceeds the limit (max_message)"));
  });
  rss.Check("endless WebSocket message");
}

// Slowloris: after reading the request, `at_once`, then one byte of
// `drip` a second (cyclically) until the client goes away, which sets
// `*released`.
Handler Drip(std::string at_once, std::string drip, std::shared_ptr<bool> released = nullptr) {
  return [at_once = std::move(at_once), drip = std::move(drip), released](Stream& s) -> asio::awaitable<void> {
    boost::beast::flat_buffer buf;
    if (!co_await ReadRequest(s, buf)) co_return;
    if (!at_once.empty()) co_await WriteRaw(s, at_once);
    auto dripping = [&]() -> asio::awaitable<void> {
      for (std::size_t i = 0;; ++i) {
        co_await WriteRaw(s, std::string(1, drip[i % drip.size()]));
        co_await Sleep(milliseconds(1000));
      }
    };
    auto eof = [&]() -> asio::awaitable<void> {
      char c;
      co_await s.async_read_some(asio::buffer(&c, 1), asio::as_tuple(asio::use_awaitable));
    };
    co_await (dripping() || eof());
    if (released) *released = true;
  };
}

TEST_CASE("slowloris: one byte a second never outlives a call's deadline") {
  asio::io_context io;
  TestServer server(io, Drip("", "HTTP/1.1 200 OK\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"));
  ClientOptions o;
  o.connect_timeout = milliseconds(1500);
  o.request_timeout = milliseconds(1500);
  auto client = MakeClient(io, server.url("http"), o);
  // The deadline under test is 1.5 s; 3 s more only absorbs a loaded machine.
  constexpr milliseconds kLate(4500);
  Run(io, [&]() -> asio::awaitable<void> {
    Clock::time_point t0 = Clock::now();
    absl::StatusOr<Response> r = co_await client->Call(Req("GET", "/call"));
    REQUIRE(!r.ok());
    CHECK(r.status().message() == "GET /call: timed out after 1500 ms (request_timeout)");
    CHECK(Clock::now() - t0 < kLate);

    t0 = Clock::now();
    absl::StatusOr<std::unique_ptr<BodyStream>> s = co_await client->Open(Req("GET", "/open"));
    REQUIRE(!s.ok());
    CHECK(s.status().message() == "GET /open: timed out after 1500 ms (request_timeout)");
    CHECK(Clock::now() - t0 < kLate);

    t0 = Clock::now();
    absl::StatusOr<std::unique_ptr<BodyWriter>> w = co_await client->Begin(Req("POST", "/begin"));
    REQUIRE(w.ok());
    CHECK((co_await (*w)->Write("x")).ok());
    absl::StatusOr<std::unique_ptr<BodyStream>> f = co_await (*w)->Finish();
    REQUIRE(!f.ok());
    CHECK(f.status().message() == "POST /begin: timed out after 1500 ms (request_timeout)");
    CHECK(Clock::now() - t0 < kLate);

    t0 = Clock::now();
    absl::StatusOr<std::unique_ptr<RawStream>> u = co_await client->Upgrade(Req("POST", "/upgrade"), "tcp");
    REQUIRE(!u.ok());
    CHECK(u.status().message() == "POST /upgrade: timed out after 1500 ms (connect_timeout)");
    CHECK(Clock::now() - t0 < kLate);

    t0 = Clock::now();
    absl::StatusOr<std::unique_ptr<WebSocket>> ws = co_await client->OpenWebSocket("/ws", {}, {});
    REQUIRE(!ws.ok());
    CHECK(ws.status().message() == "WebSocket /ws: timed out after 1500 ms (connect_timeout)");
    CHECK(Clock::now() - t0 < kLate);
  });
}

// Waits (up to 5 s) for the server to see the connection go.
asio::awaitable<bool> Released(const std::shared_ptr<bool>& released) {
  for (int i = 0; i < 100 && !*released; ++i) co_await Sleep(milliseconds(50));
  co_return *released;
}

TEST_CASE("slowloris: a cancelled call, stream or WebSocket read releases its connection") {
  asio::io_context io;
  auto call_released = std::make_shared<bool>(false);
  auto stream_released = std::make_shared<bool>(false);
  auto ws_released = std::make_shared<bool>(false);
  TestServer call_server(io, Drip("", "HTTP/1.1 200 OK\r\nX-Slow: aaaaaaaa", call_released));
  TestServer stream_server(io, Drip("HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n", "b", stream_released));
  TestServer ws_server(io, [ws_released](Stream& s) -> asio::awaitable<void> {
    boost::beast::flat_buffer buf;
    http::request<http::string_body> req;
    co_await http::async_read(s, buf, req, asio::use_awaitable);
    websocket::stream<Stream&> ws(s);
    co_await ws.async_accept(req, asio::use_awaitable);
    boost::beast::flat_buffer msg;
    co_await ws.async_read(msg, asio::as_tuple(asio::use_awaitable));  // nothing comes; ends when the client goes
    *ws_released = true;
  });
  ClientOptions o;
  o.request_timeout = milliseconds(60000);  // far away: cancellation ends these
  auto call_client = MakeClient(io, call_server.url("http"), o);
  auto stream_client = MakeClient(io, stream_server.url("http"), o);
  auto ws_client = MakeClient(io, ws_server.url("ws"), o);
  // A WebSocket handshake whose answer drips: connect_timeout is far away,
  // so only cancellation ends it (the handshake's read budget wraps the
  // reads and must keep Beast's cancellation slot).
  auto handshake_released = std::make_shared<bool>(false);
  TestServer handshake_server(io, Drip("", "HTTP/1.1 101 Switching Protocols\r\nX-Slow: aaaaaaaa", handshake_released));
  ClientOptions slow_connect = o;
  slow_connect.connect_timeout = milliseconds(60000);
  auto handshake_client = MakeClient(io, handshake_server.url("ws"), slow_connect);
  Run(io, [&]() -> asio::awaitable<void> {
    {
      asio::steady_timer t(io, milliseconds(300));
      const auto t0 = Clock::now();
      auto raced = co_await (handshake_client->OpenWebSocket("/ws", {}, {}) ||
                             t.async_wait(asio::as_tuple(asio::use_awaitable)));
      const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - t0);
      CHECK(raced.index() == 1);
      // A deadline: cancelled at 300 ms, not at connect_timeout's 60 s
      // (the margin holds on 2 loaded cores under ASan).
      CHECK_MESSAGE(took < milliseconds(20000), "a cancelled handshake took ", took.count(), " ms");
      CHECK(co_await Released(handshake_released));
    }
    asio::steady_timer t(io, milliseconds(300));
    auto raced = co_await (call_client->Call(Req("GET", "/slow")) || t.async_wait(asio::as_tuple(asio::use_awaitable)));
    CHECK(raced.index() == 1);
    CHECK(co_await Released(call_released));

    absl::StatusOr<std::unique_ptr<BodyStream>> s = co_await stream_client->Open(Req("GET", "/body"));
    REQUIRE(s.ok());
    std::vector<char> buf(1024);
    absl::StatusOr<std::size_t> n = co_await (*s)->ReadSome(buf);  // the first byte
    REQUIRE(n.ok());
    t.expires_after(milliseconds(300));
    auto read = co_await ((*s)->ReadSome(buf) || t.async_wait(asio::as_tuple(asio::use_awaitable)));
    if (read.index() == 0) {  // a byte came first (a 1 s drip against a 300 ms timer: a loaded machine)
      t.expires_after(milliseconds(300));
      read = co_await ((*s)->ReadSome(buf) || t.async_wait(asio::as_tuple(asio::use_awaitable)));
    }
    CHECK(read.index() == 1);
    s->reset();
    CHECK(co_await Released(stream_released));

    absl::StatusOr<std::unique_ptr<WebSocket>> ws = co_await ws_client->OpenWebSocket("/ws", {}, {});
    REQUIRE(ws.ok());
    t.expires_after(milliseconds(300));
    auto got = co_await ((*ws)->Read() || t.async_wait(asio::as_tuple(asio::use_awaitable)));
    CHECK(got.index() == 1);
    ws->reset();
    CHECK(co_await Released(ws_released));
  });
}

}  // namespace
}  // namespace tether::net
