// The boat provider: its request and answer JSON, argv quoting and error
// mapping (sans-I/O, host/native/boat/boat_api.h), and the transport against
// an in-process HTTP server that plays Boat (requests recorded, answers
// scripted): the one-shot channel, what is sent again (429) and what never is
// (a 5xx), errors without the key, PutFile.
// The end-to-end tests run against tests/emulators/boat.mjs
// (tests/cli/boat_test.sh, conformance.boat).
#include "host/native/boat/boat_api.h"

#include <doctest.h>
#include <stdlib.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <deque>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "host/tunnel/exchange_channel.h"
#include "tether/providers/boat.h"
#include "host/tunnel/choose.h"
#include "tether/shell_setup.h"
#include "tests/host/net/net_test_support.h"
#include "tether/errors.h"

namespace {

namespace asio = boost::asio;
namespace json = boost::json;
using namespace tether;
using namespace tether::net::testing;
using std::chrono::milliseconds;

json::object Obj(std::string_view text) {
  json::value v = json::parse(json::string_view(text.data(), text.size()));
  REQUIRE(v.is_object());
  return v.get_object();
}

net::Response Resp(int status, std::string body) {
  net::Response r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

// ---- sans-I/O --------------------------------------------------------------

TEST_CASE("CommandLine quotes every argument for the shell, behind exec") {
  std::vector<std::string> argv;
  argv.push_back("/bin/sh");
  argv.push_back("-c");
  argv.push_back("echo 'hi' $HOME");
  absl::StatusOr<std::string> line = boat::CommandLine(argv);
  REQUIRE(line.ok());
  CHECK(*line == "exec '/bin/sh' '-c' 'echo '\\''hi'\\'' $HOME'");
  argv.push_back("");
  CHECK(*boat::CommandLine(argv) == "exec '/bin/sh' '-c' 'echo '\\''hi'\\'' $HOME' ''");
}

TEST_CASE("CommandLine refuses an empty argv and a NUL byte") {
  CHECK(boat::CommandLine({}).status().code() == absl::StatusCode::kInvalidArgument);
  std::vector<std::string> argv;
  argv.push_back(std::string("a\0b", 3));
  absl::Status st = boat::CommandLine(argv).status();
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(st.message(), "NUL"));
}

TEST_CASE("CommandRequestJson writes command and timeoutSeconds") {
  absl::StatusOr<std::string> body = boat::CommandRequestJson("exec 'echo' \"x\"\n\xc3\xa9", 120);
  REQUIRE(body.ok());
  json::object o = Obj(*body);
  CHECK(o.at("command").as_string() == "exec 'echo' \"x\"\n\xc3\xa9");
  CHECK(o.at("timeoutSeconds").as_int64() == 120);
  CHECK(o.size() == 2);
}

TEST_CASE("CommandRequestJson refuses a timeout outside 1..600 and invalid UTF-8") {
  CHECK(boat::CommandRequestJson("true", 0).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(boat::CommandRequestJson("true", 601).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(boat::CommandRequestJson("true", 600).ok());
  absl::Status st = boat::CommandRequestJson("echo \xff", 10).status();
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(st.message(), "UTF-8"));
  CHECK(!boat::CommandRequestJson("\xed\xa0\x80", 10).ok());  // a surrogate
  CHECK(!boat::CommandRequestJson("\xc0\xaf", 10).ok());      // an overlong
  CHECK(!boat::CommandRequestJson("\xe2\x82", 10).ok());      // cut short
  CHECK(boat::CommandRequestJson("\xf0\x9f\x9a\xa2", 10).ok());
}

TEST_CASE("FileRequestJson writes path and base64 content of every byte value") {
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<char>(i));
  absl::StatusOr<std::string> body = boat::FileRequestJson("/tmp/x.up", bytes);
  REQUIRE(body.ok());
  json::object o = Obj(*body);
  CHECK(o.at("path").as_string() == "/tmp/x.up");
  std::string decoded;
  REQUIRE(absl::Base64Unescape(std::string(o.at("content").as_string()), &decoded));
  CHECK(decoded == bytes);
  CHECK(o.size() == 2);
}

TEST_CASE("FileRequestJson refuses a relative path, a NUL, and a file above kMaxFileBytes") {
  CHECK(boat::FileRequestJson("tmp/x", "a").status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(boat::FileRequestJson("", "a").status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(boat::FileRequestJson(std::string("/a\0b", 4), "a").status().code() == absl::StatusCode::kInvalidArgument);
  const std::string big(boat::kMaxFileBytes + 1, 'x');
  CHECK(boat::FileRequestJson("/tmp/x", big).status().code() == absl::StatusCode::kResourceExhausted);
}

TEST_CASE("ParseCommandResponse reads exitCode, stdout, stderr and timedOut") {
  absl::StatusOr<boat::CommandResult> r =
      boat::ParseCommandResponse(R"({"exitCode":7,"stdout":"a\u0000\ufffdb","stderr":"err\n","timedOut":false})");
  REQUIRE(r.ok());
  CHECK(r->exit_code == 7);
  CHECK(r->stdout_text == std::string("a\0\xef\xbf\xbd" "b", 6));
  CHECK(r->stderr_text == "err\n");
  CHECK(!r->timed_out);

  r = boat::ParseCommandResponse(R"({"exitCode":0})");
  REQUIRE(r.ok());
  CHECK(r->stdout_text.empty());
  CHECK(r->stderr_text.empty());

  r = boat::ParseCommandResponse(R"({"exitCode":null,"stdout":"part","stderr":"","timedOut":true})");
  REQUIRE(r.ok());
  CHECK(r->timed_out);
  CHECK(r->stdout_text == "part");
}

TEST_CASE("ParseCommandResponse refuses malformed answers as protocol errors") {
  const char* bad[] = {
      "",
      "not json",
      "[1,2]",
      R"({"stdout":"x"})",                      // no exitCode, not timed out
      R"({"exitCode":"0"})",
      R"({"exitCode":1.5})",
      R"({"exitCode":256})",
      R"({"exitCode":-1})",
      R"({"exitCode":0,"stdout":5})",
      R"({"exitCode":0,"stderr":{}})",
      R"({"exitCode":0,"timedOut":"no"})",
  };
  for (const char* body : bad) {
    CAPTURE(body);
    absl::Status st = boat::ParseCommandResponse(body).status();
    CHECK(!st.ok());
    CHECK(ErrorCodeOf(st) == ErrorCode::kProtocol);
  }
}

TEST_CASE("ParseCommandResponse refuses an answer above kMaxResponseBytes before parsing") {
  const std::string big(boat::kMaxResponseBytes + 1, ' ');
  CHECK(boat::ParseCommandResponse(big).status().code() == absl::StatusCode::kResourceExhausted);
}

TEST_CASE("HttpFailure maps Boat's statuses to codes a caller can act on") {
  absl::Status st = boat::HttpFailure(Resp(401, R"({"message":"bad key"})"), "POST /sandboxes/sb/commands", "sb");
  CHECK(st.code() == absl::StatusCode::kUnauthenticated);
  CHECK(absl::StrContains(st.message(), "BOAT_API_KEY"));
  CHECK(absl::StrContains(st.message(), "bad key"));
  CHECK(boat::HttpFailure(Resp(403, "{}"), "x", "sb").code() == absl::StatusCode::kPermissionDenied);
  st = boat::HttpFailure(Resp(404, R"({"message":"no such sandbox"})"), "x", "sb-42");
  CHECK(st.code() == absl::StatusCode::kNotFound);
  CHECK(absl::StrContains(st.message(), "sandbox 'sb-42' not found"));
  for (int s : {408, 429, 500, 501, 502, 503, 504}) {
    CAPTURE(s);
    CHECK(boat::HttpFailure(Resp(s, ""), "x", "sb").code() == absl::StatusCode::kUnavailable);
  }
  CHECK(boat::HttpFailure(Resp(400, R"({"message":"command must be a string"})"), "x", "sb").code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(boat::RetryableHttpStatus(503));
  CHECK(!boat::RetryableHttpStatus(500));
  CHECK(!boat::RetryableHttpStatus(404));
}

TEST_CASE("CommandHttpFailure: a 5xx may come after the command ran, so it is OUTCOME_UNKNOWN") {
  for (int s : {500, 502, 503, 504}) {
    CAPTURE(s);
    const absl::Status st = boat::CommandHttpFailure(Resp(s, "bad gateway"), "POST /sandboxes/sb/commands", "sb");
    CHECK(ErrorCodeOf(st) == ErrorCode::kOutcomeUnknown);
    CHECK(absl::StrContains(st.message(), "may have run"));
  }
  // Refused before it ran: as HttpFailure says.
  CHECK(ErrorCodeOf(boat::CommandHttpFailure(Resp(429, ""), "x", "sb")) == ErrorCode::kUnavailable);
  CHECK(ErrorCodeOf(boat::CommandHttpFailure(Resp(408, ""), "x", "sb")) == ErrorCode::kUnavailable);
  CHECK(boat::CommandHttpFailure(Resp(404, ""), "x", "sb").code() == absl::StatusCode::kNotFound);
}

TEST_CASE("WithCallId puts the call's id in a comment line before the command") {
  CHECK(boat::WithCallId("exec 'a'", "0123abcd") == "# tether-call 0123abcd\nexec 'a'");
}

TEST_CASE("Scrub takes the key out of a message and keeps the code") {
  absl::Status st = boat::Scrub(absl::UnauthenticatedError("server said: key k-123 is wrong (k-123)"), "k-123");
  CHECK(st.code() == absl::StatusCode::kUnauthenticated);
  CHECK(!absl::StrContains(st.message(), "k-123"));
  CHECK(absl::StrContains(st.message(), "<BOAT_API_KEY>"));
  CHECK(boat::Scrub(absl::OkStatus(), "k").ok());
}

// ---- the transport against a scripted server ---------------------------------

struct Reply {
  int status = 200;
  std::string body;
  milliseconds delay{0};
  std::string retry_after;  // a Retry-After header when not empty
};

// Records every request; answers them in order from `replies` (500 when
// none is left).
struct FakeBoat {
  std::vector<ServerRequest> requests;
  std::deque<Reply> replies;
};

Handler Serve(std::shared_ptr<FakeBoat> fake) {
  return [fake](Stream& s) -> asio::awaitable<void> {
    boost::beast::flat_buffer buf;
    while (std::optional<ServerRequest> req = co_await ReadRequest(s, buf)) {
      fake->requests.push_back(*req);
      Reply r;
      r.status = 500;
      r.body = R"({"message":"no scripted reply"})";
      if (!fake->replies.empty()) {
        r = fake->replies.front();
        fake->replies.pop_front();
      }
      if (r.delay.count() > 0) co_await Sleep(r.delay);
      if (r.retry_after.empty()) {
        co_await Respond(s, r.status, r.body, true, "application/json");
        continue;
      }
      boost::beast::http::response<boost::beast::http::string_body> res(
          static_cast<boost::beast::http::status>(r.status), 11);
      res.set(boost::beast::http::field::content_type, "application/json");
      res.set(boost::beast::http::field::retry_after, r.retry_after);
      res.keep_alive(true);
      res.body() = r.body;
      res.prepare_payload();
      co_await boost::beast::http::async_write(s, res, asio::use_awaitable);
    }
  };
}

constexpr char kKey[] = "boat-test-key-0123456789";

std::shared_ptr<Transport> MakeTransport(asio::io_context& io, const TestServer& server,
                                         std::string sandbox = "sb-1") {
  BoatOptions o;
  o.sandbox_id = std::move(sandbox);
  o.api_url = server.url("http");
  o.api_key = kKey;
  absl::StatusOr<std::shared_ptr<Transport>> t = MakeBoatTransport(io.get_executor(), std::move(o));
  REQUIRE(t.ok());
  return *t;
}

// The command a request carries, without its "# tether-call ID" line (the
// id, when `id` is given).
std::string CommandOf(const ServerRequest& req, std::string* id = nullptr) {
  const std::string c(Obj(req.body()).at("command").as_string());
  const std::string_view prefix = "# tether-call ";
  REQUIRE(c.rfind(prefix, 0) == 0);
  const std::size_t nl = c.find('\n');
  REQUIRE(nl != std::string::npos);
  CHECK(nl == prefix.size() + 16);  // 8 random bytes in hex
  if (id != nullptr) *id = c.substr(prefix.size(), nl - prefix.size());
  return c.substr(nl + 1);
}

std::vector<std::string> Argv(std::string a, std::string b) {
  std::vector<std::string> v;
  v.push_back(std::move(a));
  v.push_back(std::move(b));
  return v;
}

TEST_CASE("the transport is one-shot, text only, without stdin EOF: the exchange tunnel is chosen") {
  asio::io_context io;
  BoatOptions o;
  o.sandbox_id = "sb-1";
  o.api_url = "https://boat.example.com";
  o.api_key = kKey;
  absl::StatusOr<std::shared_ptr<Transport>> t = MakeBoatTransport(io.get_executor(), o);
  REQUIRE(t.ok());
  const ChannelCapabilities c = (*t)->capabilities();
  CHECK(!c.streaming);
  CHECK(!c.exact_bytes);
  CHECK(!c.stdin_eof);
  CHECK(c.costly_bytes);
  const tunnel::TunnelChoice choice = tunnel::ChooseTunnel(c);
  CHECK(choice.mode == TunnelMode::kExchange);
  CHECK(choice.zstd);
  CHECK(choice.always_reconnect);
  CHECK((*t)->name() == "boat");
  CHECK((*t)->sandbox_id() == "sb-1");
}

TEST_CASE("MakeBoatTransport refuses bad options with a clear error") {
  asio::io_context io;
  const auto make = [&](BoatOptions o) { return MakeBoatTransport(io.get_executor(), std::move(o)).status(); };
  BoatOptions good;
  good.sandbox_id = "sb-1";
  good.api_url = "https://boat.example.com";
  good.api_key = kKey;
  CHECK(make(good).ok());
  BoatOptions o = good;
  o.sandbox_id = "";
  CHECK(absl::StrContains(make(o).message(), "--sandbox"));
  o.sandbox_id = "a/b";
  CHECK(make(o).code() == absl::StatusCode::kInvalidArgument);
  o.sandbox_id = std::string(129, 'a');
  CHECK(make(o).code() == absl::StatusCode::kInvalidArgument);
  o = good;
  o.api_url = "http://boat.example.com";  // plain http off loopback
  CHECK(make(o).code() == absl::StatusCode::kInvalidArgument);
  o.api_url = "wss://boat.example.com";
  CHECK(make(o).code() == absl::StatusCode::kInvalidArgument);
  o = good;
  o.command_timeout_seconds = 601;
  CHECK(make(o).code() == absl::StatusCode::kInvalidArgument);
  o.command_timeout_seconds = 0;
  CHECK(make(o).code() == absl::StatusCode::kInvalidArgument);
  o = good;
  o.api_key = "two words";
  absl::Status st = make(o);
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK(!absl::StrContains(st.message(), "two words"));

  // From the environment: the key and the URL.
  const char* saved_key = std::getenv("BOAT_API_KEY");
  const std::string key_copy = saved_key ? saved_key : "";
  const char* saved_url = std::getenv("BOAT_API_URL");
  const std::string url_copy = saved_url ? saved_url : "";
  unsetenv("BOAT_API_KEY");
  unsetenv("BOAT_API_URL");
  o = good;
  o.api_key = "";
  st = make(o);
  CHECK(st.code() == absl::StatusCode::kUnauthenticated);
  CHECK(absl::StrContains(st.message(), "BOAT_API_KEY"));
  setenv("BOAT_API_KEY", "from-env", 1);
  CHECK(make(o).ok());
  o.api_url = "";
  st = make(o);
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(st.message(), "BOAT_API_URL"));
  setenv("BOAT_API_URL", "https://boat.example.com", 1);
  CHECK(make(o).ok());
  if (saved_key) setenv("BOAT_API_KEY", key_copy.c_str(), 1); else unsetenv("BOAT_API_KEY");
  if (saved_url) setenv("BOAT_API_URL", url_copy.c_str(), 1); else unsetenv("BOAT_API_URL");
}

TEST_CASE("Exec posts the quoted argv with the bearer key; the channel gives stdout, then EOF, the exit code and stderr") {
  asio::io_context io;
  auto fake = std::make_shared<FakeBoat>();
  fake->replies.push_back({200, R"({"exitCode":3,"stdout":"out\n","stderr":"err\n","timedOut":false})"});
  TestServer server(io, Serve(fake));
  std::shared_ptr<Transport> t = MakeTransport(io, server);
  Run(io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await t->Exec(Argv("/bin/echo", "a b"));
    REQUIRE(ch.ok());
    absl::Status w = co_await (*ch)->Write("input");
    CHECK(w.code() == absl::StatusCode::kFailedPrecondition);
    CHECK(absl::StrContains(w.message(), "no stdin"));
    absl::Status empty = co_await (*ch)->Write("");
    CHECK(empty.ok());
    (*ch)->CloseWrite();
    char buf[2];
    std::string out;
    while (true) {
      absl::StatusOr<std::size_t> n = co_await (*ch)->ReadSome({buf, sizeof buf});
      REQUIRE(n.ok());
      if (*n == 0) break;
      out.append(buf, *n);
    }
    CHECK(out == "out\n");
    REQUIRE((*ch)->exit_code().has_value());
    CHECK(*(*ch)->exit_code() == 3);
    CHECK((*ch)->Diagnostics() == "err\n");
    (*ch)->Close();
  });
  REQUIRE(fake->requests.size() == 1);
  const ServerRequest& req = fake->requests[0];
  CHECK(req.method_string() == "POST");
  CHECK(req.target() == "/sandboxes/sb-1/commands");
  CHECK(std::string(req[boost::beast::http::field::authorization]) == absl::StrCat("Bearer ", kKey));
  json::object o = Obj(req.body());
  CHECK(CommandOf(req) == "exec '/bin/echo' 'a b'");
  CHECK(o.at("timeoutSeconds").as_int64() == 120);
}

TEST_CASE("RunOneShot works over a Boat channel") {
  asio::io_context io;
  auto fake = std::make_shared<FakeBoat>();
  fake->replies.push_back({200, R"({"exitCode":0,"stdout":"tether-relay-ok\n","stderr":""})"});
  TestServer server(io, Serve(fake));
  std::shared_ptr<Transport> t = MakeTransport(io, server);
  Run(io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<std::string> out = co_await internal::RunOneShot(*t, Argv("/x/tether-supervisor", "relay"));
    REQUIRE(out.ok());
    CHECK(*out == "tether-relay-ok\n");
  });
}

// Reads a channel until EOF or an error; the error.
asio::awaitable<absl::Status> Drain(Channel& ch) {
  char buf[256];
  while (true) {
    absl::StatusOr<std::size_t> n = co_await ch.ReadSome({buf, sizeof buf});
    if (!n.ok()) co_return n.status();
    if (*n == 0) co_return absl::OkStatus();
  }
}

TEST_CASE("a timed-out command is a clear error, with no exit code") {
  asio::io_context io;
  auto fake = std::make_shared<FakeBoat>();
  fake->replies.push_back({200, R"({"exitCode":null,"stdout":"","stderr":"slow","timedOut":true})"});
  TestServer server(io, Serve(fake));
  std::shared_ptr<Transport> t = MakeTransport(io, server);
  Run(io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await t->Exec(Argv("/bin/sleep", "1000"));
    REQUIRE(ch.ok());
    absl::Status st = co_await Drain(**ch);
    CHECK(st.code() == absl::StatusCode::kDeadlineExceeded);
    CHECK(absl::StrContains(st.message(), "timeout of 120 s"));
    CHECK(!(*ch)->exit_code().has_value());
  });
}

TEST_CASE("a refused key is kUnauthenticated and never shows the key, even when the server echoes it") {
  asio::io_context io;
  auto fake = std::make_shared<FakeBoat>();
  fake->replies.push_back({401, absl::StrCat(R"({"message":"key )", kKey, R"( is not valid"})")});
  TestServer server(io, Serve(fake));
  std::shared_ptr<Transport> t = MakeTransport(io, server);
  Run(io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await t->Exec(Argv("/bin/true", "x"));
    REQUIRE(ch.ok());
    absl::Status st = co_await Drain(**ch);
    CHECK(st.code() == absl::StatusCode::kUnauthenticated);
    CHECK(absl::StrContains(st.message(), "BOAT_API_KEY"));
    CHECK(!absl::StrContains(st.message(), kKey));
  });
}

TEST_CASE("an unknown sandbox is kNotFound naming it; a 500 is OUTCOME_UNKNOWN and not retried") {
  asio::io_context io;
  auto fake = std::make_shared<FakeBoat>();
  fake->replies.push_back({404, R"({"message":"sandbox not found"})"});
  fake->replies.push_back({500, R"({"message":"boom"})"});
  TestServer server(io, Serve(fake));
  std::shared_ptr<Transport> t = MakeTransport(io, server, "sb-missing");
  Run(io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await t->Exec(Argv("/bin/true", "x"));
    REQUIRE(ch.ok());
    absl::Status st = co_await Drain(**ch);
    CHECK(st.code() == absl::StatusCode::kNotFound);
    CHECK(absl::StrContains(st.message(), "sandbox 'sb-missing' not found"));
    ch = co_await t->Exec(Argv("/bin/true", "x"));
    REQUIRE(ch.ok());
    st = co_await Drain(**ch);
    CHECK(ErrorCodeOf(st) == ErrorCode::kOutcomeUnknown);
    CHECK(absl::StrContains(st.message(), "boom"));
  });
  CHECK(fake->requests.size() == 2);
}

TEST_CASE("a 502, 503 or 504 may come after the command ran: OUTCOME_UNKNOWN, never sent again") {
  for (int status : {502, 503, 504}) {
    CAPTURE(status);
    asio::io_context io;
    auto fake = std::make_shared<FakeBoat>();
    fake->replies.push_back({status, "gateway"});
    fake->replies.push_back({200, R"({"exitCode":0,"stdout":"ran twice"})"});
    TestServer server(io, Serve(fake));
    std::shared_ptr<Transport> t = MakeTransport(io, server);
    Run(io, [&]() -> asio::awaitable<void> {
      absl::StatusOr<std::unique_ptr<Channel>> ch = co_await t->Exec(Argv("/bin/echo", "once"));
      REQUIRE(ch.ok());
      absl::Status st = co_await Drain(**ch);
      CHECK(ErrorCodeOf(st) == ErrorCode::kOutcomeUnknown);
      CHECK(absl::StrContains(st.message(), absl::StrCat(status)));
      CHECK(absl::StrContains(st.message(), "not sent again"));
      CHECK(!(*ch)->exit_code().has_value());
    });
    CHECK(fake->requests.size() == 1);
  }
}

TEST_CASE("a 429 is the same call sent again after its Retry-After") {
  asio::io_context io;
  auto fake = std::make_shared<FakeBoat>();
  fake->replies.push_back({429, R"({"message":"slow down"})", milliseconds(0), "1"});
  fake->replies.push_back({200, R"({"exitCode":0,"stdout":"ok"})"});
  TestServer server(io, Serve(fake));
  std::shared_ptr<Transport> t = MakeTransport(io, server);
  const auto start = std::chrono::steady_clock::now();
  Run(io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<std::string> out = co_await internal::RunOneShot(*t, Argv("/bin/echo", "ok"));
    REQUIRE(out.ok());
    CHECK(*out == "ok");
  });
  // A lower bound (the delay the server asked for), not a timing: it holds
  // however loaded the machine is.
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::seconds(1));
  REQUIRE(fake->requests.size() == 2);
  CHECK(fake->requests[0].body() == fake->requests[1].body());  // the same call: the same id
}

TEST_CASE("a 429 asking for more than 30 s is UNAVAILABLE at once; 429s without Retry-After stop after 5 tries") {
  asio::io_context io;
  auto fake = std::make_shared<FakeBoat>();
  fake->replies.push_back({429, "{}", milliseconds(0), "3600"});
  for (int i = 0; i < 5; ++i) fake->replies.push_back({429, "{}"});
  TestServer server(io, Serve(fake));
  std::shared_ptr<Transport> t = MakeTransport(io, server);
  Run(io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await t->Exec(Argv("/bin/true", "x"));
    REQUIRE(ch.ok());
    absl::Status st = co_await Drain(**ch);
    CHECK(ErrorCodeOf(st) == ErrorCode::kUnavailable);
    CHECK(absl::StrContains(st.message(), "Retry-After 3600"));
    ch = co_await t->Exec(Argv("/bin/true", "y"));
    REQUIRE(ch.ok());
    st = co_await Drain(**ch);
    CHECK(ErrorCodeOf(st) == ErrorCode::kUnavailable);
  });
  CHECK(fake->requests.size() == 6);
}

TEST_CASE("Close ends a read that waits for the answer, promptly") {
  asio::io_context io;
  auto fake = std::make_shared<FakeBoat>();
  fake->replies.push_back({200, R"({"exitCode":0})", milliseconds(5000)});
  TestServer server(io, Serve(fake));
  std::shared_ptr<Transport> t = MakeTransport(io, server);
  Run(io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await t->Exec(Argv("/bin/sleep", "5"));
    REQUIRE(ch.ok());
    Channel* c = ch->get();
    asio::steady_timer timer(io, milliseconds(50));
    timer.async_wait([c](boost::system::error_code) { c->Close(); });
    const auto start = std::chrono::steady_clock::now();
    absl::Status st = co_await Drain(*c);
    CHECK(st.code() == absl::StatusCode::kUnavailable);
    CHECK(std::chrono::steady_clock::now() - start < milliseconds(2000));
  });
}

TEST_CASE("a ReadSome cancelled while the answer is pending consumes nothing; the next one gets the output") {
  using namespace boost::asio::experimental::awaitable_operators;
  asio::io_context io;
  auto fake = std::make_shared<FakeBoat>();
  fake->replies.push_back({200, R"({"exitCode":0,"stdout":"late"})", milliseconds(300)});
  TestServer server(io, Serve(fake));
  std::shared_ptr<Transport> t = MakeTransport(io, server);
  Run(io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await t->Exec(Argv("/bin/echo", "late"));
    REQUIRE(ch.ok());
    char buf[16];
    const std::span<char> span(buf, sizeof buf);
    const auto start = std::chrono::steady_clock::now();
    auto first = co_await ((*ch)->ReadSome(span) || Sleep(milliseconds(50)));
    CHECK(first.index() == 1);
    CHECK(std::chrono::steady_clock::now() - start < milliseconds(250));
    absl::StatusOr<std::size_t> n = co_await (*ch)->ReadSome(span);
    REQUIRE(n.ok());
    CHECK(std::string(buf, *n) == "late");
  });
}

TEST_CASE("PutFile uploads to a temporary name, then one command checks, chmods and renames it") {
  asio::io_context io;
  auto fake = std::make_shared<FakeBoat>();
  fake->replies.push_back({200, R"({"path":"x","size":3})"});
  fake->replies.push_back({200, R"({"exitCode":0,"stdout":"tether-put-ok\n"})"});
  TestServer server(io, Serve(fake));
  std::shared_ptr<Transport> t = MakeTransport(io, server);
  const std::string bytes("\0\xff\n", 3);
  Run(io, [&]() -> asio::awaitable<void> {
    absl::Status st = co_await t->PutFile("/tmp/r/run/x.init", bytes, 0600);
    CHECK(st.ok());
    // The same content again: known, no call.
    st = co_await t->PutFile("/tmp/r/run/x.init", bytes, 0600);
    CHECK(st.ok());
  });
  REQUIRE(fake->requests.size() == 2);
  CHECK(fake->requests[0].method_string() == "PUT");
  CHECK(fake->requests[0].target() == "/sandboxes/sb-1/files");
  json::object put = Obj(fake->requests[0].body());
  const std::string tmp(put.at("path").as_string());
  CHECK(tmp.rfind("/tmp/r/run/x.init.up.", 0) == 0);
  std::string decoded;
  REQUIRE(absl::Base64Unescape(std::string(put.at("content").as_string()), &decoded));
  CHECK(decoded == bytes);
  const std::string script = CommandOf(fake->requests[1]);
  CHECK(absl::StrContains(script, "chmod 600"));
  CHECK(absl::StrContains(script, "mv -f"));
  CHECK(absl::StrContains(script, tmp));
  CHECK(absl::StrContains(script, "sha256sum"));
}

TEST_CASE("PutFile of a large file asks first and skips one already there; a bad checksum is kDataLoss") {
  asio::io_context io;
  auto fake = std::make_shared<FakeBoat>();
  fake->replies.push_back({200, R"({"exitCode":0,"stdout":"tether-have\n"})"});
  fake->replies.push_back({200, R"({"exitCode":0,"stdout":"tether-need\n"})"});
  fake->replies.push_back({200, R"({"path":"x","size":1})"});
  fake->replies.push_back({200, R"({"exitCode":0,"stdout":"tether-put-bad 00\n"})"});
  TestServer server(io, Serve(fake));
  std::shared_ptr<Transport> t = MakeTransport(io, server);
  const std::string big(100 * 1024, 'b');
  Run(io, [&]() -> asio::awaitable<void> {
    absl::Status have = co_await t->PutFile("/tmp/r/bin/sup", big, 0700);
    CHECK(have.ok());
    absl::Status st = co_await t->PutFile("/tmp/r/bin/other", big, 0700);
    CHECK(st.code() == absl::StatusCode::kDataLoss);
  });
  REQUIRE(fake->requests.size() == 4);
  CHECK(fake->requests[0].method_string() == "POST");
  CHECK(fake->requests[2].method_string() == "PUT");
}

TEST_CASE("PutFile whose placing script lost its answer and found its file gone on the rerun asks whether it is in place") {
  asio::io_context io;
  auto fake = std::make_shared<FakeBoat>();
  fake->replies.push_back({200, R"({"path":"x","size":3})"});
  fake->replies.push_back({502, "answer lost"});
  fake->replies.push_back({200, R"({"exitCode":0,"stdout":"tether-put-bad \n"})"});
  fake->replies.push_back({200, R"({"exitCode":0,"stdout":"tether-have\n"})"});
  TestServer server(io, Serve(fake));
  std::shared_ptr<Transport> t = MakeTransport(io, server);
  Run(io, [&]() -> asio::awaitable<void> {
    absl::Status st = co_await t->PutFile("/tmp/r/run/y.init", "abc", 0600);
    CHECK(st.ok());
  });
  REQUIRE(fake->requests.size() == 4);
  std::string id1, id2;
  CHECK(CommandOf(fake->requests[1], &id1) == CommandOf(fake->requests[2], &id2));
  CHECK(id1 != id2);  // run again as a new call
  CHECK(absl::StrContains(CommandOf(fake->requests[3]), "tether-have"));
}

TEST_CASE("Probe runs the probe script as the command itself, again as a new call after a lost answer") {
  asio::io_context io;
  auto fake = std::make_shared<FakeBoat>();
  fake->replies.push_back({503, "busy"});
  fake->replies.push_back({200, R"({"exitCode":0,"stdout":"x86_64\n/tmp/tether-0\ntether-probe-ok\n"})"});
  TestServer server(io, Serve(fake));
  std::shared_ptr<Transport> t = MakeTransport(io, server);
  Run(io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<SandboxInfo> info = co_await t->Probe();
    REQUIRE(info.ok());
    CHECK(info->arch == "x86_64");
    CHECK(info->state_root.rfind("/tmp/tether-0", 0) == 0);
  });
  REQUIRE(fake->requests.size() == 2);
  std::string id1, id2;
  CHECK(CommandOf(fake->requests[0], &id1) == ProbeScript());
  CHECK(CommandOf(fake->requests[1], &id2) == ProbeScript());
  CHECK(id1 != id2);
}

}  // namespace
