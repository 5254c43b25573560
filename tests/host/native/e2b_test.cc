// The e2b provider's envd channel against a scripted Start stream and a
// recording client (no server): events, exit statuses, errors, stdin order.
// The end-to-end tests run against tests/emulators/e2b.mjs (tests/cli/e2b_test.sh).
#include "host/native/e2b/e2b_channel.h"

#include <doctest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/json.hpp>
#include <deque>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "host/codec/connect_envelope.h"
#include "tether/errors.h"

namespace {

namespace asio = boost::asio;
namespace json = boost::json;
using namespace tether;
using namespace tether::e2b;
using codec::EncodeConnectEnvelope;

std::string Event(std::string_view inner) { return EncodeConnectEnvelope(absl::StrCat("{\"event\":", std::string(inner), "}")); }
std::string Start(int pid) { return Event(absl::StrCat("{\"start\":{\"pid\":", pid, "}}")); }
std::string Out(std::string_view bytes) {
  return Event(absl::StrCat("{\"data\":{\"stdout\":\"", absl::Base64Escape(std::string(bytes)), "\"}}"));
}
std::string Err(std::string_view bytes) {
  return Event(absl::StrCat("{\"data\":{\"stderr\":\"", absl::Base64Escape(std::string(bytes)), "\"}}"));
}
std::string End(std::string_view inner) { return Event(absl::StrCat("{\"end\":", std::string(inner), "}")); }
std::string Trailer(std::string_view msg = "{}") { return EncodeConnectEnvelope(msg, true); }

// A Start stream that delivers `bytes` `piece` bytes at a time, then EOF;
// with `hang`, a read past the end waits until Close().
class ScriptedStream final : public net::BodyStream {
 public:
  ScriptedStream(asio::any_io_executor ex, std::string bytes, std::size_t piece, bool hang = false)
      : bytes_(std::move(bytes)), piece_(piece), hang_(hang), timer_(ex, std::chrono::steady_clock::time_point::max()) {
    head_.status = 200;
  }
  const net::Response& head() const override { return head_; }
  asio::awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf) override {
    if (closed_) co_return absl::UnavailableError("closed");
    if (pos_ == bytes_.size() && hang_) {
      co_await timer_.async_wait(asio::as_tuple(asio::use_awaitable));
      co_return absl::UnavailableError("closed");
    }
    const std::size_t n = std::min({piece_, buf.size(), bytes_.size() - pos_});
    std::memcpy(buf.data(), bytes_.data() + pos_, n);
    pos_ += n;
    if (n == 0 && log) log->push_back("end");
    co_return n;
  }
  void Close() override {
    closed_ = true;
    if (log) log->push_back("closed");
    timer_.cancel();
  }
  ~ScriptedStream() override {
    if (log) log->push_back("destroyed");
  }
  net::Response head_;
  std::shared_ptr<std::vector<std::string>> log;  // "end" (a read gave 0), "closed", "destroyed"

 private:
  std::string bytes_;
  std::size_t pos_ = 0, piece_;
  bool hang_, closed_ = false;
  asio::steady_timer timer_;
};

// Records unary calls (answering each with `answer`) and hands out
// scripted streams for Open.
class RecordingClient final : public net::Client {
 public:
  const net::ClientOptions& options() const override { return options_; }
  asio::awaitable<absl::StatusOr<net::Response>> Call(net::Request request) override {
    calls.push_back(request);
    net::Response r = answer;
    co_return r;
  }
  asio::awaitable<absl::StatusOr<std::unique_ptr<net::BodyStream>>> Open(net::Request request) override {
    opens.push_back(request);
    if (streams.empty()) co_return absl::UnavailableError("no stream scripted");
    std::unique_ptr<net::BodyStream> s = std::move(streams.front());
    streams.pop_front();
    co_return s;
  }
  asio::awaitable<absl::StatusOr<std::unique_ptr<net::BodyWriter>>> Begin(net::Request) override {
    co_return absl::UnimplementedError("Begin");
  }
  asio::awaitable<absl::StatusOr<std::unique_ptr<net::RawStream>>> Upgrade(net::Request, std::string) override {
    co_return absl::UnimplementedError("Upgrade");
  }
  asio::awaitable<absl::StatusOr<std::unique_ptr<net::WebSocket>>> OpenWebSocket(std::string, net::Headers,
                                                                                 std::vector<std::string>) override {
    co_return absl::UnimplementedError("OpenWebSocket");
  }
  net::ClientOptions options_;
  std::vector<net::Request> calls, opens;
  std::deque<std::unique_ptr<net::BodyStream>> streams;
  net::Response answer{200, {}, "{}"};
};

std::string HeaderOf(const net::Request& r, std::string_view name) {
  for (const auto& [k, v] : r.headers) {
    if (absl::EqualsIgnoreCase(k, std::string(name))) return v;
  }
  return "<none>";
}

struct Fixture {
  asio::io_context io;
  std::shared_ptr<RecordingClient> client = std::make_shared<RecordingClient>();
  std::shared_ptr<EnvdSession> session = [&] {
    auto s = std::make_shared<EnvdSession>();
    s->client = client;
    s->sandbox_id = "sbx1";
    s->access_token = "secret-token";
    s->version = EnvdVersion{0, 5, 7};
    return s;
  }();

  template <typename Body>
  void Run(Body body) {
    bool done = false;
    asio::co_spawn(io, body(), [&](std::exception_ptr e) {
      done = true;
      if (e) std::rethrow_exception(e);
    });
    io.run();
    CHECK(done);
  }

  asio::awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Open(std::string bytes, std::size_t piece = 1,
                                                                  bool hang = false) {
    co_return co_await OpenEnvdChannel(session,
                                       std::make_unique<ScriptedStream>(io.get_executor(), std::move(bytes), piece, hang));
  }
};

asio::awaitable<std::string> ReadAll(Channel& c, absl::Status* end) {
  std::string out;
  char buf[7];
  while (true) {
    absl::StatusOr<std::size_t> n = co_await c.ReadSome({buf, sizeof buf});
    if (!n.ok()) {
      *end = n.status();
      break;
    }
    if (*n == 0) break;
    out.append(buf, *n);
  }
  co_return out;
}

}  // namespace

TEST_CASE("parses start, data, end and keepalive events") {
  absl::StatusOr<ProcessEvent> e = ParseProcessEvent(R"({"event":{"start":{"pid":14080}}})");
  REQUIRE(e.ok());
  CHECK(e->kind == ProcessEvent::Kind::kStart);
  CHECK(e->pid == 14080);
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  e = ParseProcessEvent(absl::StrCat(R"({"event":{"data":{"stdout":")", absl::Base64Escape(all), "\"}}}"));
  REQUIRE(e.ok());
  CHECK(e->kind == ProcessEvent::Kind::kData);
  CHECK(e->out == all);
  e = ParseProcessEvent(R"({"event":{"data":{"stderr":"aGk"}}})");  // unpadded
  REQUIRE(e.ok());
  CHECK(e->err == "hi");
  e = ParseProcessEvent(R"({"event":{"end":{"exitCode":3,"exited":true,"status":"exit status 3"}}})");
  REQUIRE(e.ok());
  CHECK(e->kind == ProcessEvent::Kind::kEnd);
  CHECK(e->exit == 3);
  e = ParseProcessEvent(R"({"event":{"end":{"exited":true,"status":"exit status 0"}}})");
  REQUIRE(e.ok());
  CHECK(e->exit == 0);
  e = ParseProcessEvent(R"({"event":{"keepalive":{}}})");
  REQUIRE(e.ok());
  CHECK(e->kind == ProcessEvent::Kind::kKeepalive);
  e = ParseProcessEvent(R"({"event":{"somethingNew":{}}})");
  REQUIRE(e.ok());
  CHECK(e->kind == ProcessEvent::Kind::kOther);
}

TEST_CASE("an event nested deeper than Boost.JSON's 32 levels is refused, however deep") {
  // Every provider answer is parsed with json::parse's default options:
  // depth 32, checked as it parses (no recursion past it, no allocation
  // for what follows). A keepalive with an unknown field 31 levels deep in
  // all still parses; 33 levels and a million are errors, not a stack
  // overflow.
  auto nested = [](int depth) {
    return absl::StrCat(R"({"event":{"keepalive":{},"x":)", std::string(depth, '['), std::string(depth, ']'), "}}");
  };
  absl::StatusOr<ProcessEvent> e = ParseProcessEvent(nested(29));
  CHECK(e.ok());
  for (int depth : {31, 1000000}) {
    e = ParseProcessEvent(nested(depth));
    CAPTURE(depth);
    CHECK_FALSE(e.ok());
    CHECK(ErrorCodeOf(e.status()) == ErrorCode::kProtocol);
  }
}

TEST_CASE("refuses events that are not JSON, bad base64 or a start without a pid") {
  for (std::string_view bad : {"not json", "[1]", R"({"event":{"data":{"stdout":"!!!"}}})",
                               R"({"event":{"data":{"stdout":5}}})", R"({"event":{"start":{}}})",
                               R"({"event":{"start":{"pid":-1}}})", R"({"event":{"start":{"pid":"x"}}})"}) {
    absl::StatusOr<ProcessEvent> e = ParseProcessEvent(bad);
    CHECK_FALSE(e.ok());
    CHECK(ErrorCodeOf(e.status()) == ErrorCode::kProtocol);
  }
}

TEST_CASE("an end event gives the code, or 128 + signal, never a guess") {
  CHECK(ExitFromEnd(0, "exit status 0") == 0);
  CHECK(ExitFromEnd(7, "exit status 7") == 7);
  CHECK(ExitFromEnd(-1, "signal: killed") == 137);
  CHECK(ExitFromEnd(-1, "signal: terminated") == 143);
  CHECK(ExitFromEnd(-1, "signal: segmentation fault (core dumped)") == 139);
  CHECK(ExitFromEnd(-1, "signal: SIGINT") == 130);
  CHECK(ExitFromEnd(-1, "signal: 9") == 137);
  CHECK(ExitFromEnd(-1, "signal: something odd") == std::nullopt);
  CHECK(ExitFromEnd(-1, "") == std::nullopt);
  CHECK(ExitFromEnd(std::nullopt, "") == std::nullopt);
  CHECK(ExitFromEnd(2, "") == 2);
}

TEST_CASE("Connect error codes map to Status codes a caller can act on") {
  CHECK(StatusCodeOfConnect("not_found") == absl::StatusCode::kNotFound);
  CHECK(StatusCodeOfConnect("unauthenticated") == absl::StatusCode::kUnauthenticated);
  CHECK(StatusCodeOfConnect("permission_denied") == absl::StatusCode::kPermissionDenied);
  CHECK(StatusCodeOfConnect("unavailable") == absl::StatusCode::kUnavailable);
  CHECK(StatusCodeOfConnect("deadline_exceeded") == absl::StatusCode::kUnavailable);
  CHECK(StatusCodeOfConnect("what") == absl::StatusCode::kUnknown);
  CHECK(ParseEndStream("{}", "x").ok());
  absl::Status st = ParseEndStream(R"({"error":{"code":"not_found","message":"no such file"}})", "envd");
  CHECK(st.code() == absl::StatusCode::kNotFound);
  CHECK(std::string(st.message()).find("no such file") != std::string::npos);
  CHECK(ErrorCodeOf(ParseEndStream("nope", "x")) == ErrorCode::kProtocol);
  // envd runs in the sandbox: its error text is data, escaped and bounded
  // (JSON's \u001b is a real ESC once parsed).
  st = ParseEndStream(
      absl::StrCat(R"({"error":{"code":"internal\u001b[2J","message":"\u001b]0;owned\u0007)", std::string(4000, 'x'),
                   R"("}})"),
      "envd");
  const std::string m(st.message());
  CHECK(m.find('\x1b') == std::string::npos);
  CHECK(m.find('\x07') == std::string::npos);
  CHECK(m.find("\\x1b]0;owned\\x07") != std::string::npos);
  CHECK(m.find("internal\\x1b[2J") != std::string::npos);
  CHECK(m.size() < 700);
  net::Response r{401, {}, R"({"code":"unauthenticated","message":"bad token"})"};
  CHECK(EnvdHttpError(r, "envd").code() == absl::StatusCode::kUnauthenticated);
  r = net::Response{503, {}, R"({"code":"internal","message":"overloaded"})"};
  CHECK(EnvdHttpError(r, "envd").code() == absl::StatusCode::kUnavailable);
}

TEST_CASE("envd versions parse and compare") {
  REQUIRE(ParseEnvdVersion("0.5.7").ok());
  CHECK(ParseEnvdVersion("v0.5.7")->AtLeast(0, 5, 7));
  CHECK_FALSE(ParseEnvdVersion("0.5.1")->AtLeast(0, 5, 2));
  CHECK(ParseEnvdVersion("1.0.0-beta")->AtLeast(0, 5, 7));
  CHECK(ParseEnvdVersion("99.99.99")->AtLeast(0, 5, 7));
  CHECK_FALSE(ParseEnvdVersion("0.5").ok());
  CHECK_FALSE(ParseEnvdVersion("").ok());
  CHECK_FALSE(ParseEnvdVersion("a.b.c").ok());
}

TEST_CASE("a channel reads stdout exactly, stderr into diagnostics, then the exit, byte by byte") {
  Fixture f;
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  const std::string stream = Start(42) + Out(all) + Event(R"({"keepalive":{}})") + Err("oops\n") + Out("tail") +
                             End(R"({"exitCode":3,"exited":true,"status":"exit status 3"})") + Trailer();
  f.Run([&]() -> asio::awaitable<void> {
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await f.Open(stream);
    REQUIRE(ch.ok());
    absl::Status end;
    const std::string out = co_await ReadAll(**ch, &end);
    CHECK(end.ok());
    CHECK(out == all + "tail");
    CHECK((*ch)->exit_code() == 3);
    CHECK((*ch)->Diagnostics() == "oops\n");
    (*ch)->Close();
  });
  CHECK(f.client->calls.empty());  // an ended process is not signalled
}

TEST_CASE("a finished channel's stream is read to its end, not closed: its connection can be kept") {
  Fixture f;
  auto log = std::make_shared<std::vector<std::string>>();
  const std::string stream = Start(42) + Out("x") + End(R"({"exitCode":0,"exited":true})") + Trailer();
  f.Run([&]() -> asio::awaitable<void> {
    auto s = std::make_unique<ScriptedStream>(f.io.get_executor(), stream + "\n", 1);
    s->log = log;
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await OpenEnvdChannel(f.session, std::move(s));
    REQUIRE(ch.ok());
    absl::Status end;
    CHECK(co_await ReadAll(**ch, &end) == "x");
    CHECK(end.ok());
    (*ch)->Close();
  });
  // The byte after the end-of-stream message was read in the background,
  // then the end; the stream was never closed.
  CHECK(*log == std::vector<std::string>{"end", "destroyed"});
  // Closed before its end-of-stream message: closed, as before.
  log->clear();
  Fixture g;
  g.Run([&]() -> asio::awaitable<void> {
    auto s = std::make_unique<ScriptedStream>(g.io.get_executor(), Start(42) + Out("x"), 100, true);
    s->log = log;
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await OpenEnvdChannel(g.session, std::move(s));
    REQUIRE(ch.ok());
    (*ch)->Close();
  });
  CHECK(*log == std::vector<std::string>{"closed", "destroyed"});
}

TEST_CASE("the start event must come first") {
  Fixture f;
  f.Run([&]() -> asio::awaitable<void> {
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await f.Open(Out("x") + Start(1) + Trailer());
    REQUIRE_FALSE(ch.ok());
    CHECK(ErrorCodeOf(ch.status()) == ErrorCode::kProtocol);
    ch = co_await f.Open(Trailer(R"({"error":{"code":"not_found","message":"no such file: /nope"}})"));
    REQUIRE_FALSE(ch.ok());
    CHECK(ch.status().code() == absl::StatusCode::kNotFound);
  });
}

TEST_CASE("a stream without its end-of-stream message was cut: kUnavailable") {
  Fixture f;
  f.Run([&]() -> asio::awaitable<void> {
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await f.Open(Start(5) + Out("abc"), 3);
    REQUIRE(ch.ok());
    absl::Status end;
    const std::string out = co_await ReadAll(**ch, &end);
    CHECK(out == "abc");
    CHECK(end.code() == absl::StatusCode::kUnavailable);
    CHECK(std::string(end.message()).find("cut") != std::string::npos);
    CHECK((*ch)->exit_code() == std::nullopt);
  });
}

TEST_CASE("an error in the end-of-stream message is the read's error") {
  Fixture f;
  f.Run([&]() -> asio::awaitable<void> {
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await f.Open(
        Start(5) + Out("a") + Trailer(R"({"error":{"code":"permission_denied","message":"no"}})"), 1000);
    REQUIRE(ch.ok());
    absl::Status end;
    CHECK(co_await ReadAll(**ch, &end) == "a");
    CHECK(end.code() == absl::StatusCode::kPermissionDenied);
  });
}

TEST_CASE("writes go as ordered SendInput pieces; CloseWrite follows them") {
  Fixture f;
  std::string big(150 * 1024, 'z');
  big[0] = '\0';
  big[big.size() - 1] = '\xff';
  f.Run([&]() -> asio::awaitable<void> {
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await f.Open(Start(77), 1000, true);
    REQUIRE(ch.ok());
    CHECK((co_await (*ch)->Write(big)).ok());
    (*ch)->CloseWrite();
    CHECK_FALSE((co_await (*ch)->Write("more")).ok());
    asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::milliseconds(10));
    co_await t.async_wait(asio::use_awaitable);
    (*ch)->Close();
  });
  // 3 pieces, CloseStdin, then the SIGKILL of a closed channel's process.
  REQUIRE(f.client->calls.size() == 5);
  std::string got;
  for (int i = 0; i < 3; ++i) {
    const net::Request& r = f.client->calls[i];
    CHECK(r.target == "/process.Process/SendInput");
    CHECK(HeaderOf(r, "Content-Type") == "application/json");
    CHECK(HeaderOf(r, "X-Access-Token") == "secret-token");
    CHECK(HeaderOf(r, "E2b-Sandbox-Id") == "sbx1");
    CHECK(HeaderOf(r, "E2b-Sandbox-Port") == "49983");
    CHECK(HeaderOf(r, "Connect-Protocol-Version") == "1");
    json::value v = json::parse(r.body);
    CHECK(v.at("process").at("pid").to_number<int>() == 77);
    std::string piece;
    REQUIRE(absl::Base64Unescape(std::string(v.at("input").at("stdin").as_string()), &piece));
    CHECK(piece.size() <= kInputPiece);
    got += piece;
  }
  CHECK(got == big);
  CHECK(f.client->calls[3].target == "/process.Process/CloseStdin");
  CHECK(json::parse(f.client->calls[3].body).at("process").at("pid").to_number<int>() == 77);
  CHECK(f.client->calls[4].target == "/process.Process/SendSignal");
  CHECK(json::parse(f.client->calls[4].body).at("signal").as_string() == "SIGNAL_SIGKILL");
}

TEST_CASE("an envd before 0.5.2 gets no CloseStdin") {
  Fixture f;
  f.session->version = EnvdVersion{0, 5, 1};
  f.Run([&]() -> asio::awaitable<void> {
    absl::StatusOr<std::unique_ptr<Channel>> ch =
        co_await f.Open(Start(8) + End(R"({"exited":true,"status":"exit status 0"})") + Trailer(), 1000);
    REQUIRE(ch.ok());
    (*ch)->CloseWrite();
    absl::Status end;
    co_await ReadAll(**ch, &end);
    CHECK((*ch)->exit_code() == 0);
  });
  CHECK(f.client->calls.empty());
}

TEST_CASE("a failed SendInput fails the channel with the mapped error, and it stays failed") {
  Fixture f;
  f.client->answer = net::Response{403, {}, R"({"code":"permission_denied","message":"no input for you"})"};
  f.Run([&]() -> asio::awaitable<void> {
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await f.Open(Start(9), 1000, true);
    REQUIRE(ch.ok());
    CHECK((co_await (*ch)->Write("x")).ok());  // queued
    // The pump's failure ends a pending read (nobody waits for an answer
    // to input that never arrived) and every later write.
    char buf[8];
    absl::StatusOr<std::size_t> n = co_await (*ch)->ReadSome({buf, sizeof buf});
    REQUIRE_FALSE(n.ok());
    CHECK(n.status().code() == absl::StatusCode::kPermissionDenied);
    CHECK(std::string(n.status().message()).find("secret-token") == std::string::npos);
    CHECK((co_await (*ch)->Write("y")).code() == absl::StatusCode::kPermissionDenied);
    (*ch)->Close();
  });
}

TEST_CASE("input to a process envd no longer knows fails writes, but its output is still read to the end") {
  Fixture f;
  f.client->answer = net::Response{404, {}, R"({"code":"not_found","message":"process 9 not found"})"};
  f.Run([&]() -> asio::awaitable<void> {
    absl::StatusOr<std::unique_ptr<Channel>> ch =
        co_await f.Open(Start(9) + Out("last words") + End(R"({"exitCode":0,"exited":true})") + Trailer(), 1);
    REQUIRE(ch.ok());
    CHECK((co_await (*ch)->Write("x")).ok());  // queued
    absl::Status end;
    CHECK(co_await ReadAll(**ch, &end) == "last words");
    CHECK(end.ok());
    CHECK((*ch)->exit_code() == 0);
    CHECK((co_await (*ch)->Write("y")).code() == absl::StatusCode::kNotFound);
  });
}

TEST_CASE("a SendInput answered 503 is sent again; writes queued meanwhile go together, in order") {
  Fixture f;
  f.Run([&]() -> asio::awaitable<void> {
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await f.Open(Start(11), 1000, true);
    REQUIRE(ch.ok());
    f.client->answer = net::Response{503, {}, R"({"code":"unavailable","message":"busy"})"};
    CHECK((co_await (*ch)->Write("a")).ok());
    CHECK((co_await (*ch)->Write("b")).ok());
    CHECK((co_await (*ch)->Write("c")).ok());
    asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::milliseconds(20));
    co_await t.async_wait(asio::use_awaitable);
    f.client->answer = net::Response{200, {}, "{}"};
    CHECK((co_await (*ch)->Write("d")).ok());
    t.expires_after(std::chrono::milliseconds(300));
    co_await t.async_wait(asio::use_awaitable);
    CHECK((co_await (*ch)->Write("e")).ok());
    t.expires_after(std::chrono::milliseconds(20));
    co_await t.async_wait(asio::use_awaitable);
    (*ch)->CloseWrite();
    t.expires_after(std::chrono::milliseconds(20));
    co_await t.async_wait(asio::use_awaitable);
  });
  // "a" at once, answered 503 and sent again (after 50 ms, by then
  // accepted); "b", "c" and "d" queued meanwhile go in one call; then "e",
  // CloseStdin after it, and the SIGKILL of a closed, unfinished process.
  std::vector<std::string> sent;
  for (const net::Request& r : f.client->calls) {
    if (r.target != "/process.Process/SendInput") {
      sent.push_back(r.target);
      continue;
    }
    std::string piece;
    REQUIRE(absl::Base64Unescape(std::string(json::parse(r.body).at("input").at("stdin").as_string()), &piece));
    sent.push_back(piece);
  }
  const std::vector<std::string> want = {"a", "a", "bcd", "e", "/process.Process/CloseStdin",
                                         "/process.Process/SendSignal"};
  CHECK(sent == want);
}

TEST_CASE("Close ends a pending read promptly") {
  Fixture f;
  f.Run([&]() -> asio::awaitable<void> {
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await f.Open(Start(10), 1000, true);
    REQUIRE(ch.ok());
    Channel* c = ch->get();
    asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::milliseconds(20));
    t.async_wait([c](boost::system::error_code) { c->Close(); });
    char buf[16];
    absl::StatusOr<std::size_t> n = co_await c->ReadSome({buf, sizeof buf});
    CHECK_FALSE(n.ok());
  });
}

TEST_CASE("Start sends one envelope with stdin on and no timeout, and retries a 503") {
  Fixture f;
  auto busy = std::make_unique<ScriptedStream>(f.io.get_executor(), R"({"code":"unavailable","message":"busy"})", 100);
  busy->head_.status = 503;
  f.client->streams.push_back(std::move(busy));
  f.client->streams.push_back(std::make_unique<ScriptedStream>(f.io.get_executor(), Start(3), 100, true));
  f.Run([&]() -> asio::awaitable<void> {
    std::vector<std::string> argv = {"/bin/echo", "a b", "c"};
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await StartProcess(f.session, argv);
    REQUIRE(ch.ok());
    (*ch)->Close();
  });
  REQUIRE(f.client->opens.size() == 2);
  const net::Request& r = f.client->opens[1];
  CHECK(r.target == "/process.Process/Start");
  CHECK(HeaderOf(r, "Content-Type") == "application/connect+json");
  CHECK(HeaderOf(r, "Connect-Timeout-Ms") == "<none>");
  codec::ConnectEnvelopeDecoder dec;
  std::string_view in = r.body;
  absl::StatusOr<std::optional<codec::ConnectEnvelope>> e = dec.Decode(&in);
  REQUIRE(e.ok());
  REQUIRE(e->has_value());
  CHECK(in.empty());
  json::value v = json::parse((*e)->message);
  CHECK(v.at("process").at("cmd").as_string() == "/bin/echo");
  CHECK(v.at("process").at("args").as_array().size() == 2);
  CHECK(v.at("process").at("args").at(0).as_string() == "a b");
  CHECK(v.at("stdin").as_bool());
}

TEST_CASE("Start reports a 404 as kNotFound without retrying") {
  Fixture f;
  auto gone = std::make_unique<ScriptedStream>(f.io.get_executor(), R"({"code":"not_found","message":"sandbox gone"})", 100);
  gone->head_.status = 404;
  f.client->streams.push_back(std::move(gone));
  f.Run([&]() -> asio::awaitable<void> {
    std::vector<std::string> argv = {"/bin/true"};
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await StartProcess(f.session, argv);
    REQUIRE_FALSE(ch.ok());
    CHECK(ch.status().code() == absl::StatusCode::kNotFound);
  });
  CHECK(f.client->opens.size() == 1);
}
