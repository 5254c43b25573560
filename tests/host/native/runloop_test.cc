// The runloop provider: its request bodies, execution view parser, SSE
// decoder, output chunks, argv quoting and error mapping (sans-I/O,
// host/native/runloop/runloop_api.h), and the transport against an
// in-process HTTP server that plays Runloop (routes scripted per path):
// the streaming channel across a 408 end and a cut, stdin, EOF, kill,
// the stdin-kills detection and the one-shot fallback. The end-to-end
// tests run against tests/emulators/runloop.mjs (tests/cli/runloop_test.sh,
// conformance.runloop*).
#include "host/native/runloop/runloop_api.h"

#include <doctest.h>
#include <stdlib.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <functional>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tether/providers/runloop.h"
#include "host/tunnel/choose.h"
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

std::vector<runloop::SseEvent> FeedAll(runloop::SseDecoder& d, std::string_view bytes, std::size_t step) {
  std::vector<runloop::SseEvent> out;
  for (std::size_t i = 0; i < bytes.size(); i += step) {
    REQUIRE(d.Feed(bytes.substr(i, step), out).ok());
  }
  return out;
}

// ---- sans-I/O --------------------------------------------------------------

TEST_CASE("CommandLine quotes every argument behind exec and refuses NUL, invalid UTF-8 and an empty argv") {
  std::vector<std::string> argv = {"/bin/sh", "-c", "echo 'hi' $HOME"};
  absl::StatusOr<std::string> line = runloop::CommandLine(argv);
  REQUIRE(line.ok());
  CHECK(*line == "exec '/bin/sh' '-c' 'echo '\\''hi'\\'' $HOME'");
  CHECK(runloop::CommandLine({}).status().code() == absl::StatusCode::kInvalidArgument);
  std::vector<std::string> nul = {std::string("a\0b", 3)};
  CHECK(runloop::CommandLine(nul).status().code() == absl::StatusCode::kInvalidArgument);
  std::vector<std::string> bad = {"\xff"};
  CHECK(absl::StrContains(runloop::CommandLine(bad).status().message(), "UTF-8"));
}

TEST_CASE("the request bodies carry the fields the SDK sends") {
  json::object a = Obj(*runloop::ExecuteAsyncJson("exec 'cat'", true));
  CHECK(a.at("command").as_string() == "exec 'cat'");
  CHECK(a.at("attach_stdin").as_bool());
  json::object e = Obj(*runloop::ExecuteJson("true", "id-1", 25));
  CHECK(e.at("command_id").as_string() == "id-1");
  CHECK(e.at("optimistic_timeout").as_int64() == 25);
  CHECK(runloop::ExecuteJson("true", "id", 26).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(runloop::ExecuteJson("true", "", 1).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(runloop::ExecuteAsyncJson("", true).status().code() == absl::StatusCode::kInvalidArgument);
  json::object s = Obj(*runloop::SendStdinJson(std::string("a\0b\n", 4)));
  CHECK(s.at("text").as_string() == json::string_view("a\0b\n", 4));
  CHECK(runloop::SendStdinJson("\xc3").status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(runloop::SendStdinJson(std::string(runloop::kMaxStdinTextBytes + 1, 'a')).status().code() ==
        absl::StatusCode::kResourceExhausted);
  json::object eof = Obj(runloop::SendEofJson());
  CHECK(eof.at("text").is_null());
  CHECK(eof.at("signal").as_string() == "EOF");
  CHECK(Obj(runloop::WaitCompletedJson()).at("statuses").as_array().at(0).as_string() == "completed");
  CHECK(Obj(runloop::KillJson()).at("kill_process_group").as_bool());
}

TEST_CASE("NewCommandId is a UUIDv7, different every time") {
  const std::string a = runloop::NewCommandId(), b = runloop::NewCommandId();
  CHECK(a != b);
  REQUIRE(a.size() == 36);
  CHECK(a[14] == '7');
  CHECK((a[19] == '8' || a[19] == '9' || a[19] == 'a' || a[19] == 'b'));
}

TEST_CASE("ParseExecutionView reads a running and a completed view") {
  absl::StatusOr<runloop::ExecutionView> v = runloop::ParseExecutionView(
      R"({"execution_id":"exe_1","devbox_id":"d","status":"running","exit_status":null,"stdout":null})");
  REQUIRE(v.ok());
  CHECK(v->execution_id == "exe_1");
  CHECK(!v->completed());
  CHECK(!v->exit_status);
  v = runloop::ParseExecutionView(
      R"({"execution_id":"exe_1","status":"completed","exit_status":3.0,"stdout":"o\u0000","stderr":"e","stdout_truncated":false})");
  REQUIRE(v.ok());
  CHECK(v->completed());
  CHECK(*v->exit_status == 3);
  CHECK(v->stdout_text == std::string("o\0", 2));
  CHECK(v->stderr_text == "e");
}

TEST_CASE("ParseExecutionView refuses malformed views as protocol errors, and a huge one before parsing") {
  for (const char* bad : {"", "[]", "{", R"({"status":"running"})", R"({"execution_id":"e"})",
                          R"({"execution_id":"e","status":"completed"})",
                          R"({"execution_id":"e","status":"completed","exit_status":256})",
                          R"({"execution_id":"e","status":"completed","exit_status":-1})",
                          R"({"execution_id":"e","status":"completed","exit_status":"0"})",
                          R"({"execution_id":"e","status":"running","stdout":5})",
                          R"({"execution_id":"e","status":"running","stdout_truncated":"no"})"}) {
    absl::StatusOr<runloop::ExecutionView> v = runloop::ParseExecutionView(bad);
    CHECK_MESSAGE(!v.ok(), bad);
    CHECK_MESSAGE(ErrorCodeOf(v.status()) == ErrorCode::kProtocol, bad);
  }
  CHECK(runloop::ParseExecutionView(std::string(runloop::kMaxViewBytes + 1, ' ')).status().code() ==
        absl::StatusCode::kResourceExhausted);
}

TEST_CASE("SseDecoder gives the same events whatever the splits and line endings") {
  const std::string lf =
      ": keepalive\n"
      "data: {\"output\":\"a\",\"offset\":1}\n\n"
      "event: error\ndata: {\"code\":408,\"message\":\"idle\"}\n\n"
      "data:one\ndata: two\nid: 7\nretry: 5\n\n";
  std::string crlf, cr;
  for (char c : lf) {
    if (c == '\n') {
      crlf += "\r\n";
      cr += "\r";
    } else {
      crlf += c;
      cr += c;
    }
  }
  const std::vector<const std::string*> texts = {&lf, &crlf, &cr};
  for (const std::string* text : texts) {
    for (std::size_t step : {std::size_t{1}, std::size_t{2}, std::size_t{7}, text->size()}) {
      runloop::SseDecoder d;
      std::vector<runloop::SseEvent> ev = FeedAll(d, *text, step);
      REQUIRE(ev.size() == 3);
      CHECK(ev[0].event.empty());
      CHECK(ev[0].data == R"({"output":"a","offset":1})");
      CHECK(ev[1].event == "error");
      CHECK(runloop::ErrorEventCode(ev[1].data) == 408);
      CHECK(ev[2].data == "one\ntwo");
      CHECK(!d.partial());
    }
  }
  runloop::SseDecoder d;
  std::vector<runloop::SseEvent> ev;
  REQUIRE(d.Feed("data: {\"output\":\"x\"", ev).ok());
  CHECK(ev.empty());
  CHECK(d.partial());  // a stream ending here was cut mid-event
}

TEST_CASE("SseDecoder refuses a line or an event above kMaxSseEventBytes") {
  runloop::SseDecoder d;
  std::vector<runloop::SseEvent> ev;
  const std::string big(runloop::kMaxSseEventBytes / 2 + 1, 'a');
  REQUIRE(d.Feed("data: ", ev).ok());
  REQUIRE(d.Feed(big, ev).ok());
  CHECK(d.Feed(big, ev).code() == absl::StatusCode::kResourceExhausted);
  CHECK(!d.Feed("\n", ev).ok());  // unusable afterwards
  runloop::SseDecoder d2;
  std::string half = "data: " + big + "\n";
  REQUIRE(d2.Feed(half, ev).ok());
  CHECK(d2.Feed(half, ev).code() == absl::StatusCode::kResourceExhausted);
}

TEST_CASE("ParseOutputChunk reads output and offset and refuses anything else") {
  absl::StatusOr<runloop::OutputChunk> c = runloop::ParseOutputChunk(R"({"output":"a\ufffdb","offset":12})");
  REQUIRE(c.ok());
  CHECK(c->output == "a\xef\xbf\xbd" "b");
  CHECK(*c->offset == 12);
  c = runloop::ParseOutputChunk(R"({"output":""})");
  REQUIRE(c.ok());
  CHECK(!c->offset);
  for (const char* bad : {"", "1", R"({"offset":1})", R"({"output":1})", R"({"output":"a","offset":-1})",
                          R"({"output":"a","offset":"1"})", R"({"output":"a","offset":1.5})"}) {
    CHECK_MESSAGE(ErrorCodeOf(runloop::ParseOutputChunk(bad).status()) == ErrorCode::kProtocol, bad);
  }
  CHECK(runloop::ErrorEventCode(R"({"code":"408"})") == 408);
  CHECK(runloop::ErrorEventCode("not json") == 0);
  CHECK(runloop::ErrorEventCode(R"({"code":-5})") == 0);
}

TEST_CASE("MultipartBody has the path and file fields, the bytes untouched") {
  const std::string bytes("\0\r\n--x\xff", 7);
  const std::string b = runloop::MultipartBody("BOUND", "/tmp/f", bytes);
  CHECK(absl::StartsWith(b, "--BOUND\r\nContent-Disposition: form-data; name=\"path\"\r\n\r\n/tmp/f\r\n--BOUND\r\n"));
  CHECK(absl::StrContains(b, "name=\"file\"; filename=\"file\""));
  CHECK(absl::StrContains(b, absl::StrCat("\r\n\r\n", bytes, "\r\n--BOUND--\r\n")));
}

TEST_CASE("HttpFailure maps statuses to codes a caller can act on; Scrub removes the key") {
  CHECK(runloop::HttpFailure(Resp(401, "{}"), "GET x", "d1").code() == absl::StatusCode::kUnauthenticated);
  CHECK(absl::StrContains(runloop::HttpFailure(Resp(403, "{}"), "GET x", "d1").message(), "RUNLOOP_API_KEY"));
  absl::Status nf = runloop::HttpFailure(Resp(404, R"({"message":"gone"})"), "GET x", "d1");
  CHECK(nf.code() == absl::StatusCode::kNotFound);
  CHECK(absl::StrContains(nf.message(), "'d1'"));
  for (int s : {408, 429, 500, 502, 503, 504}) {
    CHECK(runloop::HttpFailure(Resp(s, ""), "GET x", "d1").code() == absl::StatusCode::kUnavailable);
  }
  CHECK(runloop::HttpFailure(Resp(400, ""), "GET x", "d1").code() == absl::StatusCode::kInvalidArgument);
  absl::Status s = runloop::Scrub(absl::UnavailableError("echo key-123 back"), "key-123");
  CHECK(s.code() == absl::StatusCode::kUnavailable);
  CHECK(s.message() == "echo <RUNLOOP_API_KEY> back");
}

TEST_CASE("EffectHttpFailure: a 5xx on execute_async may come after it started, so it is OUTCOME_UNKNOWN") {
  for (int st : {500, 502, 503, 504}) {
    CAPTURE(st);
    const absl::Status f = runloop::EffectHttpFailure(Resp(st, ""), "POST .../execute_async", "d1");
    CHECK(ErrorCodeOf(f) == ErrorCode::kOutcomeUnknown);
    CHECK(absl::StrContains(f.message(), "may have taken effect"));
  }
  // Refused before it took effect, or not ours to guess: as HttpFailure says.
  CHECK(ErrorCodeOf(runloop::EffectHttpFailure(Resp(429, ""), "x", "d1")) == ErrorCode::kUnavailable);
  CHECK(runloop::EffectHttpFailure(Resp(404, ""), "x", "d1").code() == absl::StatusCode::kNotFound);
}

TEST_CASE("WithCallId puts the call's id in a comment line before the command; NewCallId differs each time") {
  CHECK(runloop::WithCallId("exec 'a'", "0123abcd") == "# tether-call 0123abcd\nexec 'a'");
  const std::string a = runloop::NewCallId(), b = runloop::NewCallId();
  CHECK(a.size() == 16);
  CHECK(a != b);
}

// ---- the transport against a scripted server ---------------------------------

constexpr char kKey[] = "runloop-test-key-0123456789";

// A route answers one request with raw response bytes; the connection is
// closed after it when `close` is set (how an SSE body ends).
struct Answer {
  std::string raw;
  bool close = false;
};
using Route = std::function<Answer(const ServerRequest&)>;

struct FakeRunloop {
  std::vector<ServerRequest> requests;
  std::map<std::string, Route> routes;  // by the last path segment ("execute_async", ...)
};

Answer Json(int status, std::string body) {
  return {absl::StrCat("HTTP/1.1 ", status, " X\r\nContent-Type: application/json\r\nContent-Length: ", body.size(),
                       "\r\n\r\n", body)};
}
Answer Sse(std::string events) {
  return {absl::StrCat("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n", events),
          true};
}
// A 429 with `retry_after` (seconds) as its Retry-After.
Answer TooMany(std::string retry_after) {
  const std::string body = R"({"code":429,"message":"slow down"})";
  return {absl::StrCat("HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRetry-After: ",
                       retry_after, "\r\nContent-Length: ", body.size(), "\r\n\r\n", body)};
}
std::string View(std::string status, std::string extra = "") {
  return absl::StrCat(R"({"execution_id":"exe_1","devbox_id":"dbx_1","status":")", status, "\"", extra, "}");
}
std::string Event(std::string output, std::uint64_t offset) {
  json::object o;
  o["output"] = output;
  o["offset"] = offset;
  return absl::StrCat("data: ", json::serialize(o), "\n\n");
}

Handler Serve(std::shared_ptr<FakeRunloop> fake) {
  return [fake](Stream& s) -> asio::awaitable<void> {
    boost::beast::flat_buffer buf;
    while (std::optional<ServerRequest> req = co_await ReadRequest(s, buf)) {
      fake->requests.push_back(*req);
      std::string path(req->target());
      path = path.substr(0, path.find('?'));
      const std::string last = path.substr(path.rfind('/') + 1);
      Answer a = Json(500, R"({"message":"no route"})");
      if (auto it = fake->routes.find(last); it != fake->routes.end()) a = it->second(*req);
      co_await WriteRaw(s, a.raw);
      if (a.close) co_return;
    }
  };
}

std::shared_ptr<Transport> MakeTransport(asio::io_context& io, const TestServer& server,
                                         RunloopOptions::Mode mode = RunloopOptions::Mode::kAuto) {
  RunloopOptions o;
  o.devbox_id = "dbx_1";
  o.api_url = server.url("http");
  o.api_key = kKey;
  o.mode = mode;
  absl::StatusOr<std::shared_ptr<Transport>> t = MakeRunloopTransport(io.get_executor(), std::move(o));
  REQUIRE(t.ok());
  return *t;
}

// The command an execute_async carries, without its "# tether-call ID"
// line (the id into *id when given).
std::string CommandOf(const ServerRequest& req, std::string* id = nullptr) {
  const std::string c(Obj(req.body()).at("command").as_string());
  const std::string_view prefix = "# tether-call ";
  REQUIRE(c.rfind(prefix, 0) == 0);
  const std::size_t nl = c.find('\n');
  REQUIRE(nl == prefix.size() + 16);  // 8 random bytes in hex
  if (id != nullptr) *id = c.substr(prefix.size(), nl - prefix.size());
  return c.substr(nl + 1);
}

// A stream that never sends anything and never ends (the reader waits).
Answer SilentStream() {
  return {"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n", false};
}

int Count(const FakeRunloop& f, const std::string& segment) {
  int n = 0;
  for (const ServerRequest& r : f.requests) n += absl::StrContains(std::string(r.target()), segment);
  return n;
}

// The last send_std_in was the EOF signal.
bool SawEof(const FakeRunloop& f) {
  bool saw_eof = false;
  for (const ServerRequest& r : f.requests) {
    if (absl::StrContains(std::string(r.target()), "send_std_in")) {
      json::object o = Obj(r.body());
      saw_eof = o.at("text").is_null() && o.at("signal").as_string() == "EOF";
    }
  }
  return saw_eof;
}

TEST_CASE("capabilities: streaming text (the text tunnel), or one-shot (the exchange tunnel)") {
  asio::io_context io;
  RunloopOptions o;
  o.devbox_id = "dbx_1";
  o.api_url = "https://api.example.com";
  o.api_key = kKey;
  absl::StatusOr<std::shared_ptr<Transport>> t = MakeRunloopTransport(io.get_executor(), o);
  REQUIRE(t.ok());
  CHECK(tunnel::ChooseTunnel((*t)->capabilities()).mode == TunnelMode::kText);
  CHECK((*t)->capabilities().cut_prone);
  CHECK((*t)->name() == "runloop");
  CHECK((*t)->sandbox_id() == "dbx_1");
  o.mode = RunloopOptions::Mode::kExchange;
  t = MakeRunloopTransport(io.get_executor(), o);
  REQUIRE(t.ok());
  CHECK(tunnel::ChooseTunnel((*t)->capabilities()).mode == TunnelMode::kExchange);
}

TEST_CASE("MakeRunloopTransport refuses bad options with a clear error; key and URL from the environment") {
  asio::io_context io;
  const auto make = [&](RunloopOptions o) { return MakeRunloopTransport(io.get_executor(), std::move(o)).status(); };
  RunloopOptions good;
  good.devbox_id = "dbx_1";
  good.api_url = "https://api.example.com";
  good.api_key = kKey;
  CHECK(make(good).ok());
  RunloopOptions o = good;
  o.devbox_id = "";
  CHECK(absl::StrContains(make(o).message(), "--devbox"));
  o.devbox_id = "a/b";
  CHECK(make(o).code() == absl::StatusCode::kInvalidArgument);
  o.devbox_id = std::string(129, 'a');
  CHECK(make(o).code() == absl::StatusCode::kInvalidArgument);
  o = good;
  o.api_url = "http://api.example.com";  // plain http off loopback
  CHECK(make(o).code() == absl::StatusCode::kInvalidArgument);
  o.api_url = "wss://api.example.com";
  CHECK(make(o).code() == absl::StatusCode::kInvalidArgument);
  o = good;
  o.api_key = "two words";
  absl::Status st = make(o);
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK(!absl::StrContains(st.message(), "two words"));

  const char* saved_key = std::getenv("RUNLOOP_API_KEY");
  const std::string key_copy = saved_key ? saved_key : "";
  const char* saved_url = std::getenv("RUNLOOP_BASE_URL");
  const std::string url_copy = saved_url ? saved_url : "";
  unsetenv("RUNLOOP_API_KEY");
  unsetenv("RUNLOOP_BASE_URL");
  o = good;
  o.api_key = "";
  st = make(o);
  CHECK(st.code() == absl::StatusCode::kUnauthenticated);
  CHECK(absl::StrContains(st.message(), "RUNLOOP_API_KEY"));
  setenv("RUNLOOP_API_KEY", "from-env", 1);
  o.api_url = "";
  CHECK(make(o).ok());  // the default https://api.runloop.ai
  setenv("RUNLOOP_BASE_URL", "ftp://x", 1);
  CHECK(make(o).code() == absl::StatusCode::kInvalidArgument);
  if (saved_key) setenv("RUNLOOP_API_KEY", key_copy.c_str(), 1); else unsetenv("RUNLOOP_API_KEY");
  if (saved_url) setenv("RUNLOOP_BASE_URL", url_copy.c_str(), 1); else unsetenv("RUNLOOP_BASE_URL");
}

TEST_CASE("a streaming Exec: stdin, output across a 408 end and a cut, resumed from the offset, then the exit") {
  asio::io_context io;
  auto fake = std::make_shared<FakeRunloop>();
  fake->routes["execute_async"] = [](const ServerRequest&) { return Json(200, View("running")); };
  fake->routes["send_std_in"] = [](const ServerRequest&) { return Json(200, View("running")); };
  int streams = 0;
  fake->routes["stream_stdout_updates"] = [&](const ServerRequest& r) {
    ++streams;
    const std::string t(r.target());
    if (streams == 1) {
      CHECK(absl::EndsWith(t, "?offset=0"));
      return Sse(Event("hel", 3) + "event: error\ndata: {\"code\":408}\n\n");
    }
    if (streams == 2) {
      CHECK(absl::EndsWith(t, "?offset=3"));
      return Sse(Event("lo ", 6) + "data: {\"output\":\"cu");  // cut inside an event
    }
    CHECK(absl::EndsWith(t, "?offset=6"));
    return Sse(Event("world", 11));
  };
  fake->routes["wait_for_status"] = [](const ServerRequest&) {
    return Json(200, View("completed", R"(,"exit_status":4,"stdout":"hello world","stderr":"oops\n")"));
  };
  TestServer server(io, Serve(fake));
  std::shared_ptr<Transport> t = MakeTransport(io, server, RunloopOptions::Mode::kStream);
  Run(io, [&]() -> asio::awaitable<void> {
    std::vector<std::string> argv = {"/bin/cat"};
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await t->Exec(argv);
    REQUIRE(ch.ok());
    absl::Status w = co_await (*ch)->Write("line\n");
    CHECK(w.ok());
    absl::Status bad = co_await (*ch)->Write("\xff");
    CHECK(bad.code() == absl::StatusCode::kInvalidArgument);
    std::string out;
    char buf[4];
    for (;;) {
      absl::StatusOr<std::size_t> n = co_await (*ch)->ReadSome({buf, sizeof buf});
      REQUIRE(n.ok());
      if (*n == 0) break;
      out.append(buf, *n);
    }
    CHECK(out == "hello world");
    REQUIRE((*ch)->exit_code().has_value());
    CHECK(*(*ch)->exit_code() == 4);
    CHECK((*ch)->Diagnostics() == "oops\n");
    (*ch)->Close();
  });
  CHECK(streams == 3);
  CHECK(Count(*fake, "kill") == 0);  // completed: nothing to abandon
  const ServerRequest& first = fake->requests[0];
  CHECK(first.target() == "/v1/devboxes/dbx_1/execute_async");
  CHECK(std::string(first[boost::beast::http::field::authorization]) == absl::StrCat("Bearer ", kKey));
  json::object body = Obj(first.body());
  CHECK(CommandOf(first) == "exec '/bin/cat'");
  CHECK(body.at("attach_stdin").as_bool());
  bool saw_text = false;
  for (const ServerRequest& r : fake->requests) {
    if (absl::StrContains(std::string(r.target()), "send_std_in")) {
      CHECK(Obj(r.body()).at("text").as_string() == "line\n");
      saw_text = true;
    }
  }
  CHECK(saw_text);
}

TEST_CASE("Close ends a pending read promptly and kills the execution; CloseWrite sends EOF") {
  asio::io_context io;
  auto fake = std::make_shared<FakeRunloop>();
  fake->routes["execute_async"] = [](const ServerRequest&) { return Json(200, View("running")); };
  fake->routes["send_std_in"] = [](const ServerRequest&) { return Json(200, View("running")); };
  fake->routes["kill"] = [](const ServerRequest&) {
    return Json(200, View("completed", R"(,"exit_status":137)"));
  };
  // The stream never sends anything and never ends (the reader waits).
  fake->routes["stream_stdout_updates"] = [](const ServerRequest&) {
    return Answer{"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n", false};
  };
  TestServer server(io, Serve(fake));
  std::shared_ptr<Transport> t = MakeTransport(io, server, RunloopOptions::Mode::kStream);
  Run(io, [&]() -> asio::awaitable<void> {
    std::vector<std::string> argv = {"/bin/cat"};
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await t->Exec(argv);
    REQUIRE(ch.ok());
    (*ch)->CloseWrite();
    Channel* c = ch->get();
    // The stream never ends, so only the Close can end the read: what is
    // checked is that it did (after the Close, with an error), not how long
    // it took. The 30 s backstop only turns a read Close failed to end into
    // a failure instead of a hang.
    bool closed = false;
    asio::steady_timer timer(co_await asio::this_coro::executor, milliseconds(200));
    timer.async_wait([c, &closed](boost::system::error_code) {
      closed = true;
      c->Close();
    });
    char buf[8];
    using namespace asio::experimental::awaitable_operators;
    asio::steady_timer backstop(co_await asio::this_coro::executor, std::chrono::seconds(30));
    auto raced = co_await (c->ReadSome({buf, sizeof buf}) || backstop.async_wait(asio::as_tuple(asio::use_awaitable)));
    REQUIRE(raced.index() == 0);
    CHECK(closed);
    CHECK(!std::get<0>(raced).ok());
    // The detached EOF and kill: wait for them (bounded), not a fixed 200 ms.
    for (int i = 0; i < 600 && (Count(*fake, "kill") == 0 || !SawEof(*fake)); ++i) co_await Sleep(milliseconds(50));
  });
  CHECK(Count(*fake, "kill") == 1);
  CHECK(SawEof(*fake));
}

TEST_CASE("Prepare detects that stdin kills executions and switches to one-shot execute") {
  asio::io_context io;
  auto fake = std::make_shared<FakeRunloop>();
  fake->routes["execute_async"] = [](const ServerRequest&) { return Json(200, View("running")); };
  fake->routes["send_std_in"] = [](const ServerRequest&) {
    return Json(200, View("completed", R"(,"exit_status":137)"));
  };
  fake->routes["execute"] = [](const ServerRequest& r) {
    CHECK(absl::StrContains(std::string(r.target()), "last_n="));
    json::object o = Obj(r.body());
    CHECK(o.at("command").as_string() == "exec '/bin/echo' 'hi'");
    CHECK(o.at("command_id").as_string().size() == 36);
    return Json(200, View("completed", R"(,"exit_status":0,"stdout":"hi\n","stderr":"")"));
  };
  TestServer server(io, Serve(fake));
  std::shared_ptr<Transport> t = MakeTransport(io, server);
  CHECK(tunnel::ChooseTunnel(t->capabilities()).mode == TunnelMode::kText);  // before Prepare
  Run(io, [&]() -> asio::awaitable<void> {
    absl::Status st = co_await t->Prepare();
    CHECK(st.ok());
    CHECK(tunnel::ChooseTunnel(t->capabilities()).mode == TunnelMode::kExchange);
    std::vector<std::string> argv = {"/bin/echo", "hi"};
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await t->Exec(argv);
    REQUIRE(ch.ok());
    CHECK((co_await (*ch)->Write("x")).code() == absl::StatusCode::kFailedPrecondition);
    char buf[16];
    absl::StatusOr<std::size_t> n = co_await (*ch)->ReadSome({buf, sizeof buf});
    REQUIRE(n.ok());
    CHECK(std::string(buf, *n) == "hi\n");
    CHECK(*(*ch)->exit_code() == 0);
    st = co_await t->Prepare();  // once only
    CHECK(st.ok());
  });
  CHECK(Count(*fake, "execute_async") == 1);
}

TEST_CASE("Prepare keeps the text tunnel where stdin works") {
  asio::io_context io;
  auto fake = std::make_shared<FakeRunloop>();
  fake->routes["execute_async"] = [](const ServerRequest&) { return Json(200, View("running")); };
  fake->routes["send_std_in"] = [](const ServerRequest&) { return Json(200, View("running")); };
  int polls = 0;
  fake->routes["wait_for_status"] = [&](const ServerRequest&) {
    if (++polls == 1) return Json(408, R"({"code":408})");  // the long poll's "not yet"
    return Json(200, View("completed", R"(,"exit_status":0,"stdout":"tether-stdin:ok\n")"));
  };
  TestServer server(io, Serve(fake));
  std::shared_ptr<Transport> t = MakeTransport(io, server);
  Run(io, [&]() -> asio::awaitable<void> {
    CHECK((co_await t->Prepare()).ok());
    CHECK(tunnel::ChooseTunnel(t->capabilities()).mode == TunnelMode::kText);
  });
  CHECK(polls == 2);
}

TEST_CASE("a refused key is kUnauthenticated and never shows the key; an unknown devbox is kNotFound") {
  asio::io_context io;
  auto fake = std::make_shared<FakeRunloop>();
  fake->routes["execute_async"] = [](const ServerRequest&) {
    return Json(401, absl::StrCat(R"({"message":"bad token )", kKey, "\"}"));
  };
  fake->routes["execute"] = [](const ServerRequest&) { return Json(404, R"({"message":"no devbox"})"); };
  TestServer server(io, Serve(fake));
  std::shared_ptr<Transport> t = MakeTransport(io, server, RunloopOptions::Mode::kStream);
  Run(io, [&]() -> asio::awaitable<void> {
    std::vector<std::string> argv = {"/bin/true"};
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await t->Exec(argv);
    CHECK(ch.status().code() == absl::StatusCode::kUnauthenticated);
    CHECK(!absl::StrContains(ch.status().message(), kKey));
    CHECK(absl::StrContains(ch.status().message(), "RUNLOOP_API_KEY"));
    absl::StatusOr<SandboxInfo> info = co_await t->Probe();
    CHECK(info.status().code() == absl::StatusCode::kNotFound);
    CHECK(absl::StrContains(info.status().message(), "dbx_1"));
  });
}

TEST_CASE("execute is sent again with the same command_id after a 503; a 408 long poll is polled again") {
  asio::io_context io;
  auto fake = std::make_shared<FakeRunloop>();
  std::vector<std::string> ids;
  fake->routes["execute"] = [&](const ServerRequest& r) {
    ids.push_back(std::string(Obj(r.body()).at("command_id").as_string()));
    if (ids.size() == 1) return Json(503, "busy");
    return Json(200, View("running"));
  };
  int polls = 0;
  fake->routes["wait_for_status"] = [&](const ServerRequest&) {
    if (++polls < 3) return Json(408, R"({"code":408})");
    return Json(200, View("completed", R"(,"exit_status":2,"stdout":"late","stderr":"")"));
  };
  TestServer server(io, Serve(fake));
  std::shared_ptr<Transport> t = MakeTransport(io, server, RunloopOptions::Mode::kExchange);
  Run(io, [&]() -> asio::awaitable<void> {
    std::vector<std::string> argv = {"/bin/true"};
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await t->Exec(argv);
    REQUIRE(ch.ok());
    char buf[16];
    absl::StatusOr<std::size_t> n = co_await (*ch)->ReadSome({buf, sizeof buf});
    REQUIRE(n.ok());
    CHECK(std::string(buf, *n) == "late");
    CHECK(*(*ch)->exit_code() == 2);
  });
  REQUIRE(ids.size() == 2);
  CHECK(ids[0] == ids[1]);
  CHECK(polls == 3);
}

TEST_CASE("PutFile uploads multipart to a temporary name, then one command checks, chmods and renames it") {
  asio::io_context io;
  auto fake = std::make_shared<FakeRunloop>();
  std::string uploaded_path, uploaded_body;
  fake->routes["upload_file"] = [&](const ServerRequest& r) {
    CHECK(absl::StartsWith(std::string(r[boost::beast::http::field::content_type]), "multipart/form-data; boundary="));
    uploaded_body = r.body();
    return Json(200, "{}");
  };
  std::string script;
  fake->routes["execute"] = [&](const ServerRequest& r) {
    script = std::string(Obj(r.body()).at("command").as_string());
    return Json(200, View("completed", R"(,"exit_status":0,"stdout":"tether-put-ok\n","stderr":"")"));
  };
  TestServer server(io, Serve(fake));
  std::shared_ptr<Transport> t = MakeTransport(io, server, RunloopOptions::Mode::kStream);
  const std::string bytes("\0\x01\xff\r\n", 5);
  Run(io, [&]() -> asio::awaitable<void> {
    absl::Status st = co_await t->PutNewFile("/tmp/x/f", bytes, 0700);
    CHECK(st.ok());
    st = co_await t->PutFile("/tmp/x/f", bytes, 0700);  // known installed: no call
    CHECK(st.ok());
    st = co_await t->PutFile("relative", bytes, 0700);
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  });
  CHECK(absl::StrContains(uploaded_body, "/tmp/x/f.up."));
  CHECK(absl::StrContains(uploaded_body, bytes));
  CHECK(absl::StrContains(script, "/tmp/x/f.up."));
  CHECK(absl::StrContains(script, "/tmp/x/f"));
  CHECK(Count(*fake, "upload_file") == 1);
}

// ---- what is sent again (issue 29: a 5xx may come after the call took
// effect; a 429 comes before it, with Retry-After) ----------------------------

TEST_CASE("an execute_async answered 5xx may have started: OUTCOME_UNKNOWN, never sent again") {
  for (int status : {502, 503, 504}) {
    CAPTURE(status);
    asio::io_context io;
    auto fake = std::make_shared<FakeRunloop>();
    fake->routes["execute_async"] = [&](const ServerRequest&) {
      return Json(status, R"({"message":"gateway timed out"})");
    };
    TestServer server(io, Serve(fake));
    std::shared_ptr<Transport> t = MakeTransport(io, server, RunloopOptions::Mode::kStream);
    Run(io, [&]() -> asio::awaitable<void> {
      std::vector<std::string> argv = {"/bin/cat"};
      absl::StatusOr<std::unique_ptr<Channel>> ch = co_await t->Exec(argv);
      REQUIRE(!ch.ok());
      CHECK(ErrorCodeOf(ch.status()) == ErrorCode::kOutcomeUnknown);
      CHECK(absl::StrContains(ch.status().message(), "not sent again"));
      CHECK(!absl::StrContains(ch.status().message(), kKey));
    });
    CHECK(Count(*fake, "execute_async") == 1);
  }
}

TEST_CASE("every execute_async is a call of its own: a new Exec of the same argv carries a new call id") {
  asio::io_context io;
  auto fake = std::make_shared<FakeRunloop>();
  fake->routes["execute_async"] = [](const ServerRequest&) { return Json(200, View("running")); };
  fake->routes["stream_stdout_updates"] = [](const ServerRequest&) { return SilentStream(); };
  fake->routes["kill"] = [](const ServerRequest&) { return Json(200, View("completed", R"(,"exit_status":137)")); };
  TestServer server(io, Serve(fake));
  std::shared_ptr<Transport> t = MakeTransport(io, server, RunloopOptions::Mode::kStream);
  Run(io, [&]() -> asio::awaitable<void> {
    for (int i = 0; i < 2; ++i) {
      std::vector<std::string> argv = {"/bin/cat"};
      absl::StatusOr<std::unique_ptr<Channel>> ch = co_await t->Exec(argv);
      REQUIRE(ch.ok());
      (*ch)->Close();
    }
  });
  std::vector<std::string> ids;
  for (const ServerRequest& r : fake->requests) {
    if (!absl::EndsWith(std::string(r.target()), "/execute_async")) continue;
    std::string id;
    CHECK(CommandOf(r, &id) == "exec '/bin/cat'");
    ids.push_back(id);
  }
  REQUIRE(ids.size() == 2);
  CHECK(ids[0] != ids[1]);
}

TEST_CASE("an execute_async answered 429 is the same call sent again after its Retry-After") {
  asio::io_context io;
  auto fake = std::make_shared<FakeRunloop>();
  std::vector<std::chrono::steady_clock::time_point> at;
  fake->routes["execute_async"] = [&](const ServerRequest&) {
    at.push_back(std::chrono::steady_clock::now());
    if (at.size() == 1) return TooMany("1");
    return Json(200, View("running"));
  };
  fake->routes["stream_stdout_updates"] = [](const ServerRequest&) { return SilentStream(); };
  fake->routes["kill"] = [](const ServerRequest&) { return Json(200, View("completed", R"(,"exit_status":137)")); };
  TestServer server(io, Serve(fake));
  std::shared_ptr<Transport> t = MakeTransport(io, server, RunloopOptions::Mode::kStream);
  Run(io, [&]() -> asio::awaitable<void> {
    std::vector<std::string> argv = {"/bin/cat"};
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await t->Exec(argv);
    REQUIRE(ch.ok());
    (*ch)->Close();
  });
  REQUIRE(at.size() == 2);
  // A lower bound (the delay the server asked for), not a timing: it holds
  // however loaded the machine is.
  CHECK(at[1] - at[0] >= std::chrono::seconds(1));
  std::vector<std::string> bodies;
  for (const ServerRequest& r : fake->requests) {
    if (absl::EndsWith(std::string(r.target()), "/execute_async")) bodies.push_back(r.body());
  }
  REQUIRE(bodies.size() == 2);
  CHECK(bodies[0] == bodies[1]);  // the same call: the same id
}

TEST_CASE("a 429 asking for more than 30 s is UNAVAILABLE at once, not waited for") {
  asio::io_context io;
  auto fake = std::make_shared<FakeRunloop>();
  fake->routes["execute_async"] = [](const ServerRequest&) { return TooMany("3600"); };
  TestServer server(io, Serve(fake));
  std::shared_ptr<Transport> t = MakeTransport(io, server, RunloopOptions::Mode::kStream);
  Run(io, [&]() -> asio::awaitable<void> {
    std::vector<std::string> argv = {"/bin/true"};
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await t->Exec(argv);
    REQUIRE(!ch.ok());
    CHECK(ErrorCodeOf(ch.status()) == ErrorCode::kUnavailable);
    CHECK(absl::StrContains(ch.status().message(), "Retry-After 3600"));
  });
  CHECK(Count(*fake, "execute_async") == 1);
}

TEST_CASE("stdin text answered 5xx may have been applied: never sent again; the channel is given up") {
  asio::io_context io;
  auto fake = std::make_shared<FakeRunloop>();
  fake->routes["execute_async"] = [](const ServerRequest&) { return Json(200, View("running")); };
  fake->routes["send_std_in"] = [](const ServerRequest&) { return Json(502, "bad gateway"); };
  fake->routes["stream_stdout_updates"] = [](const ServerRequest&) { return SilentStream(); };
  fake->routes["kill"] = [](const ServerRequest&) { return Json(200, View("completed", R"(,"exit_status":137)")); };
  TestServer server(io, Serve(fake));
  std::shared_ptr<Transport> t = MakeTransport(io, server, RunloopOptions::Mode::kStream);
  Run(io, [&]() -> asio::awaitable<void> {
    std::vector<std::string> argv = {"/bin/cat"};
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await t->Exec(argv);
    REQUIRE(ch.ok());
    CHECK((co_await (*ch)->Write("~T1>one|00\n")).ok());  // queued; the POST goes beside
    char buf[16];
    // Ended by the lost answer, not by the stream (which never ends).
    absl::StatusOr<std::size_t> n = co_await (*ch)->ReadSome({buf, sizeof buf});
    REQUIRE(!n.ok());
    CHECK(ErrorCodeOf(n.status()) == ErrorCode::kUnavailable);
    CHECK(absl::StrContains(n.status().message(), "not sent again"));
    CHECK(ErrorCodeOf(co_await (*ch)->Write("~T1>two|00\n")) == ErrorCode::kUnavailable);
    (*ch)->Close();
    for (int i = 0; i < 600 && Count(*fake, "kill") == 0; ++i) co_await Sleep(milliseconds(50));
  });
  CHECK(Count(*fake, "send_std_in") == 1);
  CHECK(Count(*fake, "kill") == 1);  // the abandoned execution
}

TEST_CASE("stdin text answered 429 is sent again after its Retry-After, once applied") {
  asio::io_context io;
  auto fake = std::make_shared<FakeRunloop>();
  fake->routes["execute_async"] = [](const ServerRequest&) { return Json(200, View("running")); };
  std::vector<std::chrono::steady_clock::time_point> at;
  fake->routes["send_std_in"] = [&](const ServerRequest&) {
    at.push_back(std::chrono::steady_clock::now());
    if (at.size() == 1) return TooMany("1");
    return Json(200, View("running"));
  };
  fake->routes["stream_stdout_updates"] = [](const ServerRequest&) { return Sse(Event("one", 3)); };
  fake->routes["wait_for_status"] = [](const ServerRequest&) {
    return Json(200, View("completed", R"(,"exit_status":0,"stdout":"one","stderr":"")"));
  };
  TestServer server(io, Serve(fake));
  std::shared_ptr<Transport> t = MakeTransport(io, server, RunloopOptions::Mode::kStream);
  Run(io, [&]() -> asio::awaitable<void> {
    std::vector<std::string> argv = {"/bin/cat"};
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await t->Exec(argv);
    REQUIRE(ch.ok());
    CHECK((co_await (*ch)->Write("one")).ok());
    for (int i = 0; i < 600 && at.size() < 2; ++i) co_await Sleep(milliseconds(50));
    (*ch)->Close();
  });
  REQUIRE(at.size() == 2);
  CHECK(at[1] - at[0] >= std::chrono::seconds(1));  // a lower bound, as above
}

TEST_CASE("the EOF signal is safe to repeat: sent again after a 5xx; 'not running' then means it was applied") {
  asio::io_context io;
  auto fake = std::make_shared<FakeRunloop>();
  fake->routes["execute_async"] = [](const ServerRequest&) { return Json(200, View("running")); };
  int eofs = 0;
  fake->routes["send_std_in"] = [&](const ServerRequest&) {
    // The first EOF took effect (the command exited) and its answer was lost.
    if (++eofs == 1) return Json(503, "lost");
    return Json(400, R"({"message":"execution exe_1 is not running"})");
  };
  fake->routes["stream_stdout_updates"] = [](const ServerRequest&) { return Sse(Event("done", 4)); };
  fake->routes["wait_for_status"] = [](const ServerRequest&) {
    return Json(200, View("completed", R"(,"exit_status":0,"stdout":"done","stderr":"")"));
  };
  TestServer server(io, Serve(fake));
  std::shared_ptr<Transport> t = MakeTransport(io, server, RunloopOptions::Mode::kStream);
  Run(io, [&]() -> asio::awaitable<void> {
    std::vector<std::string> argv = {"/bin/cat"};
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await t->Exec(argv);
    REQUIRE(ch.ok());
    (*ch)->CloseWrite();
    for (int i = 0; i < 600 && eofs < 2; ++i) co_await Sleep(milliseconds(50));
    std::string out;
    char buf[16];
    for (;;) {
      absl::StatusOr<std::size_t> n = co_await (*ch)->ReadSome({buf, sizeof buf});
      REQUIRE(n.ok());
      if (*n == 0) break;
      out.append(buf, *n);
    }
    CHECK(out == "done");
    CHECK(*(*ch)->exit_code() == 0);
  });
  CHECK(eofs == 2);
}

TEST_CASE("Prepare's probe whose input lost its answer is not sent the line again: the kill's view tells") {
  asio::io_context io;
  auto fake = std::make_shared<FakeRunloop>();
  fake->routes["execute_async"] = [](const ServerRequest&) { return Json(200, View("running")); };
  fake->routes["send_std_in"] = [](const ServerRequest&) { return Json(502, "lost"); };
  fake->routes["kill"] = [](const ServerRequest&) {
    return Json(200, View("completed", R"(,"exit_status":0,"stdout":"tether-stdin:ok\n")"));
  };
  TestServer server(io, Serve(fake));
  std::shared_ptr<Transport> t = MakeTransport(io, server);
  Run(io, [&]() -> asio::awaitable<void> {
    CHECK((co_await t->Prepare()).ok());
    CHECK(tunnel::ChooseTunnel(t->capabilities()).mode == TunnelMode::kText);
  });
  CHECK(Count(*fake, "send_std_in") == 1);
  CHECK(Count(*fake, "execute_async") == 1);
}

TEST_CASE("Prepare runs a new probe when one's start lost its answer, never the same call again") {
  asio::io_context io;
  auto fake = std::make_shared<FakeRunloop>();
  int starts = 0;
  fake->routes["execute_async"] = [&](const ServerRequest&) {
    if (++starts == 1) return Json(504, "lost");
    return Json(200, View("running"));
  };
  fake->routes["send_std_in"] = [](const ServerRequest&) {
    return Json(200, View("completed", R"(,"exit_status":137)"));
  };
  TestServer server(io, Serve(fake));
  std::shared_ptr<Transport> t = MakeTransport(io, server);
  Run(io, [&]() -> asio::awaitable<void> {
    CHECK((co_await t->Prepare()).ok());
    CHECK(tunnel::ChooseTunnel(t->capabilities()).mode == TunnelMode::kExchange);
  });
  std::vector<std::string> ids;
  for (const ServerRequest& r : fake->requests) {
    if (!absl::EndsWith(std::string(r.target()), "/execute_async")) continue;
    std::string id;
    CommandOf(r, &id);
    ids.push_back(id);
  }
  REQUIRE(ids.size() == 2);
  CHECK(ids[0] != ids[1]);
}

}  // namespace
