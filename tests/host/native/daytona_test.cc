// The daytona provider's sans-I/O parts (host/native/daytona/daytona_api.h):
// the answers it parses, the bodies it sends, argv quoting, the follow-logs
// demultiplexer (as the SDK reads the stream), error mapping; the transport's
// options and capabilities; that the armor the text tunnel sends through
// the log stream can never hold a byte the stream mangles; and the channel
// against an in-process server playing the API and the toolbox (scripted
// log streams, cuts, input, errors). End to end it runs against
// tests/emulators/daytona.mjs (conformance.daytona, conformance.daytona-faults,
// cli_daytona).
#include "host/native/daytona/daytona_api.h"

#include <doctest.h>
#include <stdlib.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <deque>
#include <map>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tether/providers/daytona.h"
#include "host/tunnel/choose.h"
#include "protocol/armor.h"
#include "tests/host/net/net_test_support.h"
#include "tether/errors.h"

namespace {

namespace asio = boost::asio;
namespace json = boost::json;
using namespace tether;
using namespace tether::net::testing;
using std::chrono::milliseconds;
namespace websocket = boost::beast::websocket;

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

// A string literal with every byte (none of them NUL).
template <std::size_t N>
std::string S(const char (&lit)[N]) {
  return std::string(lit, N - 1);
}

// Feeds `log` to a demuxer in pieces of `piece` bytes.
std::pair<std::string, std::string> Demux(std::string_view log, std::size_t piece) {
  daytona::LogDemuxer d;
  std::string out, err;
  for (std::size_t i = 0; i < log.size(); i += piece) d.Feed(log.substr(i, piece), &out, &err);
  CHECK(d.consumed() == log.size());
  return {out, err};
}

// Sets or unsets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    if (old) saved_ = old;
    had_ = old != nullptr;
    if (value) setenv(name, value, 1); else unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) setenv(name_, saved_.c_str(), 1); else unsetenv(name_);
  }

 private:
  const char* name_;
  std::string saved_;
  bool had_ = false;
};

TEST_CASE("ParseSandbox reads id, state and toolboxProxyUrl; absent fields are empty") {
  absl::StatusOr<daytona::SandboxView> v =
      daytona::ParseSandbox(R"({"id":"sb","state":"started","toolboxProxyUrl":"https://proxy/toolbox","cpu":1})");
  REQUIRE(v.ok());
  CHECK(v->id == "sb");
  CHECK(v->state == "started");
  CHECK(v->toolbox_proxy_url == "https://proxy/toolbox");
  v = daytona::ParseSandbox(R"({"id":"sb","toolboxProxyUrl":null})");
  REQUIRE(v.ok());
  CHECK(v->toolbox_proxy_url.empty());
  CHECK(v->state.empty());
}

TEST_CASE("ParseSandbox refuses what is not a sandbox as a protocol error, and a huge answer before parsing") {
  for (std::string_view bad : {"", "[]", "nope", R"({"id":3})", R"({"toolboxProxyUrl":{}})", R"({"state":true})"}) {
    absl::StatusOr<daytona::SandboxView> v = daytona::ParseSandbox(bad);
    CHECK(!v.ok());
    CHECK(ErrorCodeOf(v.status()) == ErrorCode::kProtocol);
  }
  const std::string big(daytona::kMaxAnswerBytes + 1, ' ');
  CHECK(daytona::ParseSandbox(big).status().code() == absl::StatusCode::kResourceExhausted);
}

TEST_CASE("ParseProxyUrl needs a non-empty url") {
  absl::StatusOr<std::string> u = daytona::ParseProxyUrl(R"({"url":"http://127.0.0.1:3/toolbox"})");
  REQUIRE(u.ok());
  CHECK(*u == "http://127.0.0.1:3/toolbox");
  CHECK(!daytona::ParseProxyUrl(R"({"url":""})").ok());
  CHECK(!daytona::ParseProxyUrl(R"({})").ok());
  CHECK(!daytona::ParseProxyUrl(R"({"url":1})").ok());
}

TEST_CASE("ParseExecAnswer takes a cmdId that is safe in a path") {
  absl::StatusOr<std::string> id = daytona::ParseExecAnswer(R"({"cmdId":"5b197ba8-1c29-4898-bc19-ecc9f6764ae9"})");
  REQUIRE(id.ok());
  CHECK(*id == "5b197ba8-1c29-4898-bc19-ecc9f6764ae9");
  for (std::string_view bad : {R"({})", R"({"cmdId":""})", R"({"cmdId":"../x"})", R"({"cmdId":".."})", R"({"cmdId":"a b"})",
                               R"({"cmdId":7})", "[1]"}) {
    CHECK(ErrorCodeOf(daytona::ParseExecAnswer(bad).status()) == ErrorCode::kProtocol);
  }
  CHECK(!daytona::ParseExecAnswer(absl::StrCat(R"({"cmdId":")", std::string(257, 'a'), R"("})")).ok());
}

TEST_CASE("ParseCommandAnswer: the exit code once there, nothing while running") {
  absl::StatusOr<std::optional<int>> c = daytona::ParseCommandAnswer(R"({"id":"c","command":"x","exitCode":143})");
  REQUIRE(c.ok());
  CHECK(*c == std::optional<int>(143));
  c = daytona::ParseCommandAnswer(R"({"id":"c","command":"x"})");
  REQUIRE(c.ok());
  CHECK(!c->has_value());
  c = daytona::ParseCommandAnswer(R"({"exitCode":null})");
  REQUIRE(c.ok());
  CHECK(!c->has_value());
  CHECK(*daytona::ParseCommandAnswer(R"({"exitCode":3.0})") == std::optional<int>(3));
  for (std::string_view bad : {R"({"exitCode":-1})", R"({"exitCode":256})", R"({"exitCode":"0"})",
                               R"({"exitCode":1.5})", R"({"exitCode":18446744073709551615})"}) {
    CHECK(ErrorCodeOf(daytona::ParseCommandAnswer(bad).status()) == ErrorCode::kProtocol);
  }
}

TEST_CASE("ToolboxBase is toolboxProxyUrl + / + id, as the SDK builds it") {
  CHECK(daytona::ToolboxBase("https://p.example/toolbox", "sb") == "https://p.example/toolbox/sb");
  CHECK(daytona::ToolboxBase("https://p.example/toolbox/", "sb") == "https://p.example/toolbox/sb");
}

TEST_CASE("CommandLine quotes every argument, without exec (the toolbox's wrapper must survive)") {
  std::vector<std::string> argv = {"/bin/sh", "-c", "echo 'hi' $HOME"};
  absl::StatusOr<std::string> line = daytona::CommandLine(argv);
  REQUIRE(line.ok());
  CHECK(*line == "'/bin/sh' '-c' 'echo '\\''hi'\\'' $HOME'");
  CHECK(!daytona::CommandLine({}).ok());
  CHECK(daytona::CommandLine({std::string("a\0b", 3)}).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(daytona::CommandLine({"\xff"}).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("the request bodies: session, exec with runAsync and suppressInputEcho, input as a JSON string") {
  CHECK(Obj(daytona::SessionRequestJson("tether-1")).at("sessionId") == "tether-1");
  json::object e = Obj(*daytona::ExecRequestJson("'cat'"));
  CHECK(e.at("command") == "'cat'");
  CHECK(e.at("runAsync") == true);
  CHECK(e.at("suppressInputEcho") == true);
  json::object in = Obj(*daytona::InputRequestJson("~T1>abc|00000000\n~T1>def|00000000\n"));
  CHECK(in.at("data") == "~T1>abc|00000000\n~T1>def|00000000\n");
  CHECK(daytona::InputRequestJson(std::string("a\0b", 3)).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(daytona::InputRequestJson("\xc3").status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(daytona::InputRequestJson(std::string(daytona::kMaxInputBytes + 1, 'a')).status().code() ==
        absl::StatusCode::kResourceExhausted);
  CHECK(!daytona::ExecRequestJson("\xff").ok());
}

TEST_CASE("BulkUploadBody is one multipart file with files[0].path and files[0].file, bytes untouched") {
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<char>(i));
  const std::string b = daytona::BulkUploadBody("/tmp/x/sup.up.1", bytes, "BOUNDARY");
  CHECK(absl::StartsWith(b, "--BOUNDARY\r\nContent-Disposition: form-data; name=\"files[0].path\"\r\n\r\n/tmp/x/sup.up.1\r\n"));
  CHECK(absl::StrContains(b, "name=\"files[0].file\"; filename=\"sup.up.1\"\r\n"));
  CHECK(absl::StrContains(b, absl::StrCat("\r\n\r\n", bytes, "\r\n--BOUNDARY--\r\n")));
}

TEST_CASE("LogDemuxer splits stdout and stderr at the markers, wherever they are, in any split") {
  const std::string log = std::string("\x01\x01\x01") + "out1\n" + "\x02\x02\x02" + "err1\n" + "\x01\x01\x01" +
                          "a\x02\x02\x02" + "b\xff" + "c\n";
  for (std::size_t piece : {1, 2, 3, 5, 1000}) {
    auto [out, err] = Demux(log, piece);
    CHECK(out == "out1\na");            // the marker in the payload switches, as in the SDK
    CHECK(err == "err1\nb\xff" "c\n");  // bytes are not decoded here
  }
}

TEST_CASE("LogDemuxer: bytes before any marker are dropped; lone 01/02 bytes are payload") {
  auto [out, err] = Demux(S("pre\x01\x01\x01x\x01y\x01\x01z\x02\x02w\x01"), 1);
  CHECK(out == S("x\x01y\x01\x01z\x02\x02w"));
  CHECK(err.empty());
  // A trailing 01 is held until it is known not to start a marker.
  daytona::LogDemuxer d;
  std::string o, e;
  d.Feed(std::string("\x01\x01\x01" "a\x01", 5), &o, &e);
  CHECK(o == "a");
  d.Feed("b", &o, &e);
  CHECK(o == "a\x01" "b");
  // 01 01 02 02 02: the first two bytes are payload, then stderr.
  auto [o2, e2] = Demux(S("\x01\x01\x01" "q\x01\x01\x02\x02\x02r"), 2);
  CHECK(o2 == "q\x01\x01");
  CHECK(e2 == "r");
}

TEST_CASE("the armor's alphabet never holds NUL, a marker byte or any control byte but the newline") {
  // What the log stream mangles: NUL (dropped), 01 and 02 (markers), 03.
  std::mt19937 rng(7);
  for (int round = 0; round < 50; ++round) {
    std::string frame(static_cast<std::size_t>(rng() % 20000), '\0');
    for (char& c : frame) c = static_cast<char>(rng());
    if (round == 0) {
      frame.clear();
      for (int i = 0; i < 256; ++i) frame.append(64, static_cast<char>(i));
    }
    for (protocol::ArmorDirection dir : {protocol::ArmorDirection::kToHost, protocol::ArmorDirection::kToSupervisor}) {
      const std::string line = protocol::ArmorLine(frame, dir);
      REQUIRE(!line.empty());
      CHECK(line.back() == '\n');
      for (std::size_t i = 0; i + 1 < line.size(); ++i) {
        const auto c = static_cast<unsigned char>(line[i]);
        if (c < 0x20 || c >= 0x7f) FAIL("armored byte ", int(c), " at ", i);
      }
    }
  }
}

TEST_CASE("HttpFailure maps the toolbox's statuses to codes a caller can act on") {
  CHECK(daytona::HttpFailure(Resp(401, R"({"message":"bad"})"), "GET /sandbox/sb", "sb").code() ==
        absl::StatusCode::kUnauthenticated);
  absl::Status st = daytona::HttpFailure(Resp(403, ""), "GET /sandbox/sb", "sb");
  CHECK(st.code() == absl::StatusCode::kPermissionDenied);
  CHECK(absl::StrContains(st.message(), "DAYTONA_API_KEY"));
  CHECK(daytona::HttpFailure(Resp(404, ""), "GET x", "sb").code() == absl::StatusCode::kNotFound);
  for (int s : {408, 429, 500, 502, 503, 504}) {
    CHECK(daytona::HttpFailure(Resp(s, ""), "POST x", "sb").code() == absl::StatusCode::kUnavailable);
  }
  CHECK(daytona::HttpFailure(Resp(400, R"({"message":"not running"})"), "POST x", "sb").code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(daytona::RetryableHttpStatus(502));
  CHECK(!daytona::RetryableHttpStatus(500));
  absl::Status scrubbed = daytona::Scrub(absl::UnauthenticatedError("echo dtn_secret back"), "dtn_secret");
  CHECK(scrubbed.code() == absl::StatusCode::kUnauthenticated);
  CHECK(scrubbed.message() == "echo <DAYTONA_API_KEY> back");
}

TEST_CASE("EffectHttpFailure: a 5xx on an exec or input may come after it took effect, so it is OUTCOME_UNKNOWN") {
  for (int s : {500, 502, 503, 504}) {
    CAPTURE(s);
    const absl::Status st = daytona::EffectHttpFailure(Resp(s, ""), "POST /process/session/x/exec", "sb");
    CHECK(ErrorCodeOf(st) == ErrorCode::kOutcomeUnknown);
    CHECK(absl::StrContains(st.message(), "may have taken effect"));
  }
  CHECK(ErrorCodeOf(daytona::EffectHttpFailure(Resp(429, ""), "x", "sb")) == ErrorCode::kUnavailable);
  CHECK(daytona::EffectHttpFailure(Resp(404, ""), "x", "sb").code() == absl::StatusCode::kNotFound);
}

TEST_CASE("ParseSessionCommands lists the session's command ids, each safe in a path") {
  absl::StatusOr<std::vector<std::string>> ids =
      daytona::ParseSessionCommands(R"({"sessionId":"s","commands":[{"id":"c1","command":"x"},{"id":"c-2","exitCode":0}]})");
  REQUIRE(ids.ok());
  CHECK(*ids == std::vector<std::string>{"c1", "c-2"});
  CHECK(daytona::ParseSessionCommands(R"({"sessionId":"s"})")->empty());
  CHECK(daytona::ParseSessionCommands(R"({"sessionId":"s","commands":null})")->empty());
  for (const char* bad : {R"({"commands":{}})", R"({"commands":[1]})", R"({"commands":[{"command":"x"}]})",
                          R"({"commands":[{"id":"../x"}]})", R"({"commands":[{"id":".."}]})", "[]"}) {
    CAPTURE(bad);
    CHECK(ErrorCodeOf(daytona::ParseSessionCommands(bad).status()) == ErrorCode::kProtocol);
  }
}

TEST_CASE("the transport streams text without stdin EOF, cut-prone: the text tunnel is chosen") {
  asio::io_context io;
  DaytonaOptions o;
  o.sandbox_id = "sb-1";
  o.api_url = "https://api.example.com/api";
  o.api_key = "k";
  absl::StatusOr<std::shared_ptr<Transport>> t = MakeDaytonaTransport(io.get_executor(), o);
  REQUIRE(t.ok());
  const ChannelCapabilities c = (*t)->capabilities();
  CHECK(c.streaming);
  CHECK(!c.exact_bytes);
  CHECK(!c.stdin_eof);
  CHECK(c.cut_prone);
  const tunnel::TunnelChoice choice = tunnel::ChooseTunnel(c);
  CHECK(choice.mode == TunnelMode::kText);
  CHECK(choice.always_reconnect);
  CHECK((*t)->name() == "daytona");
  CHECK((*t)->sandbox_id() == "sb-1");
}

TEST_CASE("MakeDaytonaTransport refuses bad options with a clear error; credentials come from the environment") {
  asio::io_context io;
  const auto make = [&](DaytonaOptions o) { return MakeDaytonaTransport(io.get_executor(), std::move(o)).status(); };
  ScopedEnv k("DAYTONA_API_KEY", nullptr), j("DAYTONA_JWT_TOKEN", nullptr), g("DAYTONA_ORGANIZATION_ID", nullptr),
      u("DAYTONA_API_URL", nullptr), s("DAYTONA_SERVER_URL", nullptr);
  DaytonaOptions good;
  good.sandbox_id = "sb-1";
  good.api_key = "k";
  CHECK(make(good).ok());  // the public API URL by default
  DaytonaOptions o = good;
  o.sandbox_id = "";
  CHECK(absl::StrContains(make(o).message(), "--sandbox"));
  o.sandbox_id = "a/b";
  CHECK(make(o).code() == absl::StatusCode::kInvalidArgument);
  o.sandbox_id = std::string(129, 'a');
  CHECK(make(o).code() == absl::StatusCode::kInvalidArgument);
  o = good;
  o.api_url = "http://api.example.com";  // plain http off loopback
  CHECK(make(o).code() == absl::StatusCode::kInvalidArgument);
  o.api_url = "ws://127.0.0.1:1";
  CHECK(make(o).code() == absl::StatusCode::kInvalidArgument);
  o = good;
  o.api_key = "two words";
  absl::Status st = make(o);
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK(!absl::StrContains(st.message(), "two words"));

  o = good;
  o.api_key = "";
  st = make(o);
  CHECK(st.code() == absl::StatusCode::kUnauthenticated);
  CHECK(absl::StrContains(st.message(), "DAYTONA_API_KEY"));
  {
    ScopedEnv key("DAYTONA_API_KEY", "from-env");
    CHECK(make(o).ok());
  }
  {
    ScopedEnv jwt("DAYTONA_JWT_TOKEN", "jwt");
    st = make(o);
    CHECK(st.code() == absl::StatusCode::kUnauthenticated);
    CHECK(absl::StrContains(st.message(), "DAYTONA_ORGANIZATION_ID"));
    ScopedEnv org("DAYTONA_ORGANIZATION_ID", "org-1");
    CHECK(make(o).ok());
  }
  {
    ScopedEnv key("DAYTONA_API_KEY", "from-env");
    ScopedEnv url("DAYTONA_API_URL", "not a url");
    CHECK(make(o).code() == absl::StatusCode::kInvalidArgument);
  }
}

// ---- the channel against an in-process API + toolbox ------------------------

asio::awaitable<void> Sleep(milliseconds d) {
  asio::steady_timer t(co_await asio::this_coro::executor, d);
  co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
}

// One log WebSocket connection: its messages, then a close (1000) or a cut
// (the TCP connection dropped, no close frame).
struct LogScript {
  std::vector<std::string> messages;
  bool normal_close = true;
  milliseconds delay{0};  // before the first message
};

// A scripted failure of one kind of call: `status` before the call takes
// effect, or (after) once it did, as a gateway that lost the answer.
struct Fault {
  int status = 502;
  bool after = false;
  std::string retry_after;  // a Retry-After header when not empty
};

struct FakeDaytona {
  std::string base;               // http://127.0.0.1:PORT
  bool proxy_url_in_dto = true;
  int sandbox_status = 200;
  std::vector<std::string> requests;  // "METHOD target"
  std::vector<std::string> inputs;    // the data of every input POST
  std::deque<LogScript> logs;         // one per WebSocket connection (the last repeats)
  std::optional<int> exit_code;
  int ws_connections = 0;
  // By kind ("session", "exec", "input", "list"): the next answers' faults.
  std::map<std::string, std::deque<Fault>> faults;
  std::map<std::string, int> session_execs;  // session id -> execs that took effect
  std::vector<std::chrono::steady_clock::time_point> input_times;  // every input POST that arrived
};

// The next scripted fault of `kind`, if any.
std::optional<Fault> NextFault(FakeDaytona& f, const std::string& kind) {
  auto it = f.faults.find(kind);
  if (it == f.faults.end() || it->second.empty()) return std::nullopt;
  Fault x = it->second.front();
  it->second.pop_front();
  return x;
}

asio::awaitable<void> RespondRetryAfter(Stream& s, int status, std::string retry_after) {
  http::response<http::string_body> res(static_cast<http::status>(status), 11);
  res.set(http::field::content_type, "application/json");
  if (!retry_after.empty()) res.set(http::field::retry_after, retry_after);
  res.keep_alive(true);
  res.body() = R"({"message":"scripted fault"})";
  res.prepare_payload();
  co_await http::async_write(s, res, asio::use_awaitable);
}

constexpr char kKey[] = "dtn-test-key-0123456789";

asio::awaitable<void> ServeLog(Stream& s, const ServerRequest& req, std::shared_ptr<FakeDaytona> fake) {
  ++fake->ws_connections;
  LogScript script = fake->logs.empty() ? LogScript{} : fake->logs.front();
  if (fake->logs.size() > 1) fake->logs.pop_front();
  websocket::stream<Stream> ws(std::move(s));
  co_await ws.async_accept(req, asio::use_awaitable);
  if (script.delay.count() > 0) co_await Sleep(script.delay);
  ws.binary(true);
  for (const std::string& m : script.messages) co_await ws.async_write(asio::buffer(m), asio::use_awaitable);
  if (script.normal_close) {
    co_await ws.async_close(websocket::close_code::normal, asio::use_awaitable);
  } else {
    boost::system::error_code ec;
    ws.next_layer().lowest().close(ec);
  }
}

Handler Serve(std::shared_ptr<FakeDaytona> fake) {
  return [fake](Stream& s) -> asio::awaitable<void> {
    boost::beast::flat_buffer buf;
    while (std::optional<ServerRequest> req = co_await ReadRequest(s, buf)) {
      const std::string target(req->target());
      fake->requests.push_back(absl::StrCat(std::string(req->method_string()), " ", target));
      if (std::string((*req)[http::field::authorization]) != absl::StrCat("Bearer ", kKey)) {
        co_await Respond(s, 401, absl::StrCat(R"({"message":"bad key )", kKey, R"("})"), true, "application/json");
        continue;
      }
      if (websocket::is_upgrade(*req)) {
        co_await ServeLog(s, *req, fake);
        co_return;
      }
      int status = 404;
      std::string body = R"({"message":"no route"})";
      const bool post = req->method() == http::verb::post;
      const std::string session_prefix = "/toolbox/sb-1/process/session/";
      std::string kind;
      if (post && target == "/toolbox/sb-1/process/session") kind = "session";
      if (post && absl::EndsWith(target, "/exec")) kind = "exec";
      if (post && absl::EndsWith(target, "/input")) kind = "input";
      if (req->method() == http::verb::get && absl::StartsWith(target, session_prefix) &&
          target.find('/', session_prefix.size()) == std::string::npos) {
        kind = "list";
      }
      if (kind == "input") fake->input_times.push_back(std::chrono::steady_clock::now());
      std::optional<Fault> fault = kind.empty() ? std::nullopt : NextFault(*fake, kind);
      if (fault && !fault->after) {
        co_await RespondRetryAfter(s, fault->status, fault->retry_after);
        continue;
      }
      if (kind == "list") {
        const std::string sid = target.substr(session_prefix.size());
        std::string cmds;
        for (int i = 0; i < fake->session_execs[sid]; ++i) absl::StrAppend(&cmds, i ? "," : "", R"({"id":"c1","command":"x"})");
        status = 200;
        body = absl::StrCat(R"({"sessionId":")", sid, R"(","commands":[)", cmds, "]}");
      } else if (target == "/api/sandbox/sb-1") {
        status = fake->sandbox_status;
        body = fake->proxy_url_in_dto
                   ? absl::StrCat(R"({"id":"sb-1","state":"started","toolboxProxyUrl":")", fake->base, R"(/toolbox"})")
                   : std::string(R"({"id":"sb-1","state":"started"})");
        if (status == 404) body = R"({"message":"Sandbox not found"})";
      } else if (target == "/api/sandbox/sb-1/toolbox-proxy-url") {
        status = 200;
        body = absl::StrCat(R"({"url":")", fake->base, R"(/toolbox"})");
      } else if (target == "/toolbox/sb-1/process/session" && req->method() == http::verb::post) {
        const std::string sid(Obj(req->body()).at("sessionId").as_string());
        if (fake->session_execs.count(sid)) {
          status = 409;
          body = R"({"message":"session exists"})";
        } else {
          fake->session_execs[sid] = 0;
          status = 201;
          body = "";
        }
      } else if (absl::EndsWith(target, "/exec")) {
        const std::size_t from = std::string_view("/toolbox/sb-1/process/session/").size();
        ++fake->session_execs[target.substr(from, target.size() - from - 5)];
        status = 202;
        body = R"({"cmdId":"c1"})";
      } else if (absl::EndsWith(target, "/command/c1") && req->method() == http::verb::get) {
        status = 200;
        body = fake->exit_code ? absl::StrCat(R"({"id":"c1","exitCode":)", *fake->exit_code, "}") : R"({"id":"c1"})";
      } else if (absl::EndsWith(target, "/command/c1/input")) {
        fake->inputs.push_back(std::string(Obj(req->body()).at("data").as_string()));
        status = 200;
        body = "";
      } else if (req->method() == http::verb::delete_) {
        status = 204;
        body = "";
      }
      if (fault) {
        co_await RespondRetryAfter(s, fault->status, fault->retry_after);  // the effect is done; the answer lost
        continue;
      }
      co_await Respond(s, status, body, true, "application/json");
    }
  };
}

struct Fixture {
  asio::io_context io;
  std::shared_ptr<FakeDaytona> fake = std::make_shared<FakeDaytona>();
  TestServer server{io, Serve(fake)};
  std::shared_ptr<Transport> transport;

  Fixture() {
    fake->base = server.url("http");
    DaytonaOptions o;
    o.sandbox_id = "sb-1";
    o.api_url = fake->base + "/api";
    o.api_key = kKey;
    absl::StatusOr<std::shared_ptr<Transport>> t = MakeDaytonaTransport(io.get_executor(), o);
    REQUIRE(t.ok());
    transport = *t;
  }
  int Count(std::string_view prefix) const {
    int n = 0;
    for (const std::string& r : fake->requests) n += r.rfind(prefix, 0) == 0 ? 1 : 0;
    return n;
  }
};

std::vector<std::string> Cat() { return {"/bin/cat"}; }

asio::awaitable<std::string> ReadAll(Channel& ch) {
  std::string all;
  char buf[7];  // small reads: what is left of a message waits for the next one
  for (;;) {
    absl::StatusOr<std::size_t> n = co_await ch.ReadSome({buf, sizeof buf});
    REQUIRE(n.ok());
    if (*n == 0) co_return all;
    all.append(buf, *n);
  }
}

TEST_CASE("Exec makes a session and an async command; stdout and stderr split; a normal close gives EOF and the exit") {
  Fixture f;
  f.fake->logs.push_back({{S("\x01\x01\x01hello\n\x02\x02"), S("\x02oops\n\x01\x01\x01world\n")}, true});
  f.fake->exit_code = 3;
  Run(f.io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await f.transport->Exec(Cat());
    REQUIRE(ch.ok());
    CHECK(co_await ReadAll(**ch) == "hello\nworld\n");
    CHECK((*ch)->exit_code() == std::optional<int>(3));
    CHECK(absl::StrContains((*ch)->Diagnostics(), "oops"));
    (*ch)->Close();
    co_await Sleep(milliseconds(100));  // the session's DELETE
  });
  CHECK(f.Count("GET /api/sandbox/sb-1") == 1);
  CHECK(f.Count("POST /toolbox/sb-1/process/session") == 2);  // the session, then the exec
  CHECK(f.Count("GET /toolbox/sb-1/process/session/tether-") == 2);  // the log stream, then the command
  CHECK(f.Count("DELETE /toolbox/sb-1/process/session/tether-") == 1);
}

TEST_CASE("a log stream cut mid-line is reopened and its replay from byte 0 skipped: every byte once") {
  Fixture f;
  const std::string log = S("\x01\x01\x01line one\n\x01\x01\x01line two\n\x01\x01\x01line three\n");
  f.fake->logs.push_back({{log.substr(0, 5), log.substr(5, 9)}, false});  // cut inside "line two"'s marker run
  f.fake->logs.push_back({{log.substr(0, 20)}, false, milliseconds(20)});  // a replay, cut again
  f.fake->logs.push_back({{log}, true});                                   // the whole log, then the end
  f.fake->exit_code = 0;
  Run(f.io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await f.transport->Exec(Cat());
    REQUIRE(ch.ok());
    CHECK(co_await ReadAll(**ch) == "line one\nline two\nline three\n");
    CHECK((*ch)->exit_code() == std::optional<int>(0));
    CHECK(absl::StrContains((*ch)->Diagnostics(), "reopened 2 times"));
  });
  CHECK(f.fake->ws_connections == 3);
}

TEST_CASE("input goes as complete lines in JSON strings; a partial line waits for its newline") {
  Fixture f;
  f.fake->logs.push_back({{}, true, milliseconds(300)});
  f.fake->exit_code = 0;
  Run(f.io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await f.transport->Exec(Cat());
    REQUIRE(ch.ok());
    CHECK((co_await (*ch)->Write("~T1>one|00\n~T1>tw")).ok());
    co_await Sleep(milliseconds(50));
    CHECK((co_await (*ch)->Write("o|00\n")).ok());
    co_await Sleep(milliseconds(50));
    CHECK(!(co_await (*ch)->Write(std::string("bad\0\n", 5))).ok());
    (*ch)->CloseWrite();  // no EOF exists: nothing is sent
    CHECK(co_await ReadAll(**ch) == "");
  });
  REQUIRE(f.fake->inputs.size() == 2);
  CHECK(f.fake->inputs[0] == "~T1>one|00\n");
  CHECK(f.fake->inputs[1] == "~T1>two|00\n");
}

TEST_CASE("a ReadSome cancelled while the log is silent consumes nothing; Close ends a pending read promptly") {
  using namespace asio::experimental::awaitable_operators;
  Fixture f;
  f.fake->logs.push_back({{S("\x01\x01\x01late\n")}, true, milliseconds(200)});
  f.fake->exit_code = 0;
  Run(f.io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await f.transport->Exec(Cat());
    REQUIRE(ch.ok());
    char buf[64];
    std::span<char> span(buf, sizeof buf);
    auto first = co_await ((*ch)->ReadSome(span) || Sleep(milliseconds(50)));
    CHECK(first.index() == 1);
    absl::StatusOr<std::size_t> n = co_await (*ch)->ReadSome(span);
    REQUIRE(n.ok());
    CHECK(std::string(buf, *n) == "late\n");
    // A read that waits, ended by Close.
    f.fake->logs.push_back({{}, true, milliseconds(5000)});
    absl::StatusOr<std::unique_ptr<Channel>> ch2 = co_await f.transport->Exec(Cat());
    REQUIRE(ch2.ok());
    Channel* c2 = ch2->get();
    asio::steady_timer closer(f.io, milliseconds(50));
    closer.async_wait([c2](boost::system::error_code) { c2->Close(); });
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::size_t> r = co_await c2->ReadSome(span);
    CHECK(!r.ok());
    CHECK(std::chrono::steady_clock::now() - start < milliseconds(1000));
  });
}

TEST_CASE("a refused key and an unknown sandbox are clear errors, without the key even when the server echoes it") {
  {
    Fixture f;
    f.fake->sandbox_status = 404;
    Run(f.io, [&]() -> asio::awaitable<void> {
      absl::StatusOr<std::unique_ptr<Channel>> ch = co_await f.transport->Exec(Cat());
      CHECK(ch.status().code() == absl::StatusCode::kNotFound);
      CHECK(absl::StrContains(ch.status().message(), "sandbox 'sb-1' not found"));
    });
  }
  {
    Fixture f;
    DaytonaOptions o;
    o.sandbox_id = "sb-1";
    o.api_url = f.fake->base + "/api";
    o.api_key = "wrong-key-42";
    std::shared_ptr<Transport> t = *MakeDaytonaTransport(f.io.get_executor(), o);
    Run(f.io, [&]() -> asio::awaitable<void> {
      absl::StatusOr<std::unique_ptr<Channel>> ch = co_await t->Exec(Cat());
      CHECK(ch.status().code() == absl::StatusCode::kUnauthenticated);
      CHECK(absl::StrContains(ch.status().message(), "DAYTONA_API_KEY"));
      CHECK(!absl::StrContains(ch.status().message(), "wrong-key-42"));
    });
  }
}

TEST_CASE("without toolboxProxyUrl the API's /toolbox-proxy-url is asked, once") {
  Fixture f;
  f.fake->proxy_url_in_dto = false;
  f.fake->logs.push_back({{S("\x01\x01\x01ok\n")}, true});
  f.fake->exit_code = 0;
  Run(f.io, [&]() -> asio::awaitable<void> {
    for (int i = 0; i < 2; ++i) {
      absl::StatusOr<std::unique_ptr<Channel>> ch = co_await f.transport->Exec(Cat());
      REQUIRE(ch.ok());
      CHECK(co_await ReadAll(**ch) == "ok\n");
    }
  });
  CHECK(f.Count("GET /api/sandbox/sb-1/toolbox-proxy-url") == 1);
  CHECK(f.Count("GET /api/sandbox/sb-1") == 2);  // the sandbox and its proxy URL
}

}  // namespace

namespace {

TEST_CASE("an exec whose answer was lost is found in its session, not started again") {
  Fixture f;
  f.fake->faults["exec"].push_back({502, true});
  f.fake->logs.push_back({{S("\x01\x01\x01once\n")}, true});
  f.fake->exit_code = 0;
  Run(f.io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await f.transport->Exec(Cat());
    REQUIRE(ch.ok());
    CHECK(co_await ReadAll(**ch) == "once\n");
  });
  CHECK(f.Count("POST /toolbox/sb-1/process/session/tether-") == 1);  // one exec
  REQUIRE(f.fake->session_execs.size() == 1);
  CHECK(f.fake->session_execs.begin()->second == 1);
}

TEST_CASE("an exec refused with a 5xx before it ran (its session empty) is sent again, once more") {
  Fixture f;
  f.fake->faults["exec"].push_back({503, false});
  f.fake->logs.push_back({{S("\x01\x01\x01ok\n")}, true});
  f.fake->exit_code = 0;
  Run(f.io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await f.transport->Exec(Cat());
    REQUIRE(ch.ok());
    CHECK(co_await ReadAll(**ch) == "ok\n");
  });
  CHECK(f.Count("POST /toolbox/sb-1/process/session/tether-") == 2);
  REQUIRE(f.fake->session_execs.size() == 1);
  CHECK(f.fake->session_execs.begin()->second == 1);
}

TEST_CASE("an exec lost when its session cannot be listed is OUTCOME_UNKNOWN: the session is deleted, nothing resent") {
  Fixture f;
  f.fake->faults["exec"].push_back({504, true});
  f.fake->faults["list"].push_back({500, false});  // (a 500 on a GET is not sent again)
  Run(f.io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await f.transport->Exec(Cat());
    REQUIRE(!ch.ok());
    CHECK(ErrorCodeOf(ch.status()) == ErrorCode::kOutcomeUnknown);
    CHECK(absl::StrContains(ch.status().message(), "not started again"));
    co_await Sleep(milliseconds(100));  // the DELETE
  });
  CHECK(f.Count("POST /toolbox/sb-1/process/session/tether-") == 1);
  CHECK(f.Count("DELETE /toolbox/sb-1/process/session/tether-") == 1);
  CHECK(f.Count("POST /toolbox/sb-1/process/session") == 2);  // the session and the one exec
}

TEST_CASE("a session whose creation lost its answer is sent again; its 409 means the first one made it") {
  Fixture f;
  f.fake->faults["session"].push_back({502, true});
  f.fake->logs.push_back({{S("\x01\x01\x01x\n")}, true});
  f.fake->exit_code = 0;
  Run(f.io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await f.transport->Exec(Cat());
    REQUIRE(ch.ok());
    CHECK(co_await ReadAll(**ch) == "x\n");
  });
  CHECK(f.Count("POST /toolbox/sb-1/process/session") == 3);  // the session twice (201 lost, 409), the exec
  CHECK(f.fake->session_execs.size() == 1);
}

TEST_CASE("an input whose answer was lost is not sent again: the channel is given up, reads and writes fail") {
  Fixture f;
  f.fake->faults["input"].push_back({502, true});
  f.fake->logs.push_back({{}, true, milliseconds(5000)});
  Run(f.io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await f.transport->Exec(Cat());
    REQUIRE(ch.ok());
    CHECK((co_await (*ch)->Write("~T1>one|00\n")).ok());  // queued; the POST goes beside
    char buf[16];
    absl::StatusOr<std::size_t> n = co_await (*ch)->ReadSome({buf, sizeof buf});  // ended by the loss, not by the log
    REQUIRE(!n.ok());
    CHECK(ErrorCodeOf(n.status()) == ErrorCode::kUnavailable);
    CHECK(absl::StrContains(n.status().message(), "may have taken effect"));
    absl::Status w = co_await (*ch)->Write("~T1>two|00\n");
    CHECK(ErrorCodeOf(w) == ErrorCode::kUnavailable);
    (*ch)->Close();
  });
  REQUIRE(f.fake->inputs.size() == 1);  // applied once, never again
  CHECK(f.fake->inputs[0] == "~T1>one|00\n");
}

TEST_CASE("an input refused on every try (429 without Retry-After, 5 times) gives the channel up too") {
  Fixture f;
  for (int i = 0; i < 5; ++i) f.fake->faults["input"].push_back({429, false});
  f.fake->logs.push_back({{}, true, milliseconds(10000)});
  Run(f.io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await f.transport->Exec(Cat());
    REQUIRE(ch.ok());
    CHECK((co_await (*ch)->Write("~T1>one|00\n")).ok());
    char buf[16];
    absl::StatusOr<std::size_t> n = co_await (*ch)->ReadSome({buf, sizeof buf});  // not waiting for the log's 10 s
    REQUIRE(!n.ok());
    CHECK(ErrorCodeOf(n.status()) == ErrorCode::kUnavailable);
    CHECK(absl::StrContains(n.status().message(), "given up"));
    (*ch)->Close();
  });
  CHECK(f.fake->input_times.size() == 5);
  CHECK(f.fake->inputs.empty());
}

TEST_CASE("an input answered 429 is sent again after its Retry-After, once applied") {
  Fixture f;
  f.fake->faults["input"].push_back({429, false, "1"});
  f.fake->logs.push_back({{}, true, milliseconds(3000)});
  f.fake->exit_code = 0;
  Run(f.io, [&]() -> asio::awaitable<void> {
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await f.transport->Exec(Cat());
    REQUIRE(ch.ok());
    CHECK((co_await (*ch)->Write("~T1>one|00\n")).ok());
    CHECK(co_await ReadAll(**ch) == "");
  });
  REQUIRE(f.fake->input_times.size() == 2);
  // A lower bound (the delay the server asked for), not a timing: it holds however loaded the machine is.
  CHECK(f.fake->input_times[1] - f.fake->input_times[0] >= std::chrono::seconds(1));
  REQUIRE(f.fake->inputs.size() == 1);
}

}  // namespace
