// The modal provider: its pure decoders (host/native/modal/modal_config.h:
// the ~/.modal.toml profile, a JWT's exp, V1/V2 sandbox ids, server URLs),
// its exec ids and retry policy, the factory's option checks, and the
// gRPC-to-Asio bridge (grpc_asio.h) against an in-process gRPC server: a
// unary call completes on the executor, cancelling the Asio operation
// cancels the RPC, a server stream arrives whole and in order.
// The end-to-end tests run against tests/emulators/modal.mjs
// (tests/cli/modal_test.sh, conformance.modal, chaos.modal).
#include "host/native/modal/modal_config.h"

#include <doctest.h>
#include <grpcpp/grpcpp.h>
#include <stdlib.h>

#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "host/native/modal/modal_channel.h"
#include "host/native/modal/modal_client.grpc.pb.h"
#include "host/native/grpc/grpc_asio.h"
#include "host/native/modal/modal_session.h"
#include "tether/providers/modal.h"

namespace {

namespace asio = boost::asio;
namespace rt = ::modal::task_command_router;
using namespace tether;
using namespace tether::modal;

std::string Jwt(std::string_view payload) {
  return "eyJhbGciOiJIUzI1NiJ9." + absl::WebSafeBase64Escape(std::string(payload)) + ".c2ln";
}

// ---- ~/.modal.toml ---------------------------------------------------------------

TEST_CASE("ParseModalToml takes the active profile, or the one named") {
  const std::string text =
      "# the SDK's file\n"
      "[default]\n"
      "token_id = \"ak-1\"\n"
      "token_secret = 'as-1'   # literal\n"
      "\n"
      "[work]\n"
      "token_id = \"ak-2\"\n"
      "token_secret = \"as-\\\"2\\\"\"\n"
      "server_url = \"https://modal.example:8443\"\n"
      "active = true\n"
      "image_builder_version = 2024\n";
  absl::StatusOr<ModalProfile> p = ParseModalToml(text, "");
  REQUIRE(p.ok());
  CHECK(p->token_id == "ak-2");
  CHECK(p->token_secret == "as-\"2\"");
  CHECK(p->server_url == "https://modal.example:8443");
  p = ParseModalToml(text, "default");
  REQUIRE(p.ok());
  CHECK(p->token_id == "ak-1");
  CHECK(p->token_secret == "as-1");
  CHECK(p->server_url.empty());
}

TEST_CASE("ParseModalToml: no active profile is an empty one; a missing named one is kNotFound") {
  absl::StatusOr<ModalProfile> p = ParseModalToml("[a]\ntoken_id = \"x\"\n", "");
  REQUIRE(p.ok());
  CHECK(p->token_id.empty());
  CHECK(ParseModalToml("[a]\n", "b").status().code() == absl::StatusCode::kNotFound);
  CHECK(ParseModalToml("", "").ok());
}

TEST_CASE("ParseModalToml refuses malformed text with its line number") {
  for (const char* bad : {"[a\n", "[a]\ntoken_id\n", "[a]\ntoken_id = \"open\n", "[a]\nactive = yes\n",
                          "[a]\ntoken_id = \"x\" trailing\n", "[a]\nto ken = \"x\"\n", "[a]\nk = \"\\q\"\n",
                          "[]\n"}) {
    absl::StatusOr<ModalProfile> p = ParseModalToml(bad, "");
    CAPTURE(bad);
    CHECK(p.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(p.status().message().find("line") != std::string_view::npos);
  }
}

TEST_CASE("ParseModalToml refuses a file above kMaxTomlBytes before reading it") {
  std::string big(kMaxTomlBytes + 1, '#');
  CHECK(ParseModalToml(big, "").status().code() == absl::StatusCode::kInvalidArgument);
}

// ---- JWT, ids, URLs ---------------------------------------------------------------

TEST_CASE("JwtExpiry reads exp, or nothing") {
  CHECK(JwtExpiry(Jwt("{\"sub\":\"x\",\"exp\":1767225600}")) == std::optional<std::int64_t>(1767225600));
  CHECK(JwtExpiry(Jwt("{\"exp\": 1767225600.5}")) == std::optional<std::int64_t>(1767225600));
  CHECK_FALSE(JwtExpiry(Jwt("{\"sub\":\"x\"}")).has_value());
  CHECK_FALSE(JwtExpiry(Jwt("{\"exp\":\"soon\"}")).has_value());
  CHECK_FALSE(JwtExpiry(Jwt("{\"exp\":-5}")).has_value());
  CHECK_FALSE(JwtExpiry("not-a-jwt").has_value());
  CHECK_FALSE(JwtExpiry("a.!!!.c").has_value());
  CHECK_FALSE(JwtExpiry("").has_value());
  CHECK_FALSE(JwtExpiry(std::string(kMaxJwtBytes + 1, 'a')).has_value());
}

TEST_CASE("IsV1SandboxId: sb- and 22 base62 characters") {
  CHECK(IsV1SandboxId("sb-AbCdEfGhIjKlMnOpQrSt01"));
  CHECK_FALSE(IsV1SandboxId("sb-AbCdEfGhIjKlMnOpQrSt0"));    // 21
  CHECK_FALSE(IsV1SandboxId("sb-AbCdEfGhIjKlMnOpQrSt012"));  // 23
  CHECK_FALSE(IsV1SandboxId("sb-AbCdEfGhIjKlMnOpQrSt-1"));
  CHECK_FALSE(IsV1SandboxId("sx-AbCdEfGhIjKlMnOpQrSt01"));
  CHECK_FALSE(IsV1SandboxId("sbx-v2-test"));
}

TEST_CASE("ParseGrpcUrl gives the gRPC target, TLS or not, and whether it is loopback") {
  absl::StatusOr<GrpcTarget> t = ParseGrpcUrl("https://api.modal.com:443");
  REQUIRE(t.ok());
  CHECK(t->tls);
  CHECK(t->target() == "api.modal.com:443");
  CHECK_FALSE(t->loopback);
  t = ParseGrpcUrl("http://127.0.0.1:5000/");
  REQUIRE(t.ok());
  CHECK_FALSE(t->tls);
  CHECK(t->loopback);
  CHECK(t->target() == "127.0.0.1:5000");
  t = ParseGrpcUrl("https://[::1]:9");
  REQUIRE(t.ok());
  CHECK(t->target() == "[::1]:9");
  CHECK(t->loopback);
  t = ParseGrpcUrl("https://router.modal.host");
  REQUIRE(t.ok());
  CHECK(t->port == 443);
  CHECK(ParseGrpcUrl("http://h").value().port == 80);
  // Loopback as host/net has it: addresses parsed, names only "localhost".
  for (const char* yes : {"http://localhost:1", "http://LOCALHOST", "http://127.9.8.7", "http://[::1]",
                          "http://[::ffff:127.0.0.1]:5"}) {
    CAPTURE(yes);
    CHECK(ParseGrpcUrl(yes).value().loopback);
  }
  for (const char* no : {"http://127.evil.example", "http://127.0.0.1.example", "http://0.0.0.0:5", "http://128.0.0.1",
                         "http://[::2]", "http://localhost.example", "http://10.0.0.1"}) {
    CAPTURE(no);
    CHECK_FALSE(ParseGrpcUrl(no).value().loopback);
  }
  for (const char* bad : {"ftp://h", "https://", "https://h:0", "https://h:70000", "https://h:x", "https://h/path",
                          "https://u@h", "https://::1:5", "https://[::1", "https://h:", "h:443", "https://h h"}) {
    CAPTURE(bad);
    CHECK(ParseGrpcUrl(bad).status().code() == absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("NewExecId is a fresh version 4 UUID") {
  const std::string a = NewExecId(), b = NewExecId();
  CHECK(a != b);
  REQUIRE(a.size() == 36);
  CHECK(a[8] == '-');
  CHECK(a[13] == '-');
  CHECK(a[14] == '4');
  CHECK(std::string("89ab").find(a[19]) != std::string::npos);
}

TEST_CASE("Retryable: the codes the SDK retries, and no others") {
  auto code = [](grpc::StatusCode c) { return grpc::Status(c, "x"); };
  CHECK(Retryable(code(grpc::StatusCode::UNAVAILABLE)));
  CHECK(Retryable(code(grpc::StatusCode::DEADLINE_EXCEEDED)));
  CHECK(Retryable(code(grpc::StatusCode::CANCELLED)));
  CHECK(Retryable(code(grpc::StatusCode::INTERNAL)));
  CHECK(Retryable(code(grpc::StatusCode::UNKNOWN)));
  CHECK_FALSE(Retryable(code(grpc::StatusCode::UNAUTHENTICATED)));
  CHECK_FALSE(Retryable(code(grpc::StatusCode::NOT_FOUND)));
  CHECK_FALSE(Retryable(code(grpc::StatusCode::INVALID_ARGUMENT)));
  CHECK_FALSE(Retryable(code(grpc::StatusCode::OUT_OF_RANGE)));
  CHECK(FromGrpc(grpc::Status(grpc::StatusCode::NOT_FOUND, "x"), "Call").code() == absl::StatusCode::kNotFound);
}

TEST_CASE("Retryable: a refused certificate is not retried, and says so") {
  // gRPC 1.51's own messages (UNAVAILABLE both): OpenSSL's chain check, and
  // gRPC's name check.
  const grpc::Status expired(grpc::StatusCode::UNAVAILABLE,
                             "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Ssl "
                             "handshake failed: SSL_ERROR_SSL: error:0A000086:SSL routines::certificate verify failed");
  const grpc::Status name(grpc::StatusCode::UNAVAILABLE, "Peer name 127.0.0.1 is not in peer certificate");
  const grpc::Status reset(grpc::StatusCode::UNAVAILABLE, "Connection reset by peer");
  for (const grpc::Status& st : {expired, name}) {
    CHECK(CertificateRefused(st));
    CHECK_FALSE(Retryable(st));
    const absl::Status got = FromGrpc(st, "AuthTokenGet");
    CHECK(got.code() == absl::StatusCode::kPermissionDenied);
    CHECK(absl::StrContains(got.message(), "modal: AuthTokenGet: "));
    CHECK(absl::StrContains(got.message(), "not retried"));
  }
  CHECK_FALSE(CertificateRefused(reset));
  CHECK(Retryable(reset));
  // (the words alone, on another code, are the server's own message)
  CHECK_FALSE(CertificateRefused(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "certificate verify failed")));
}

// ---- the factory -------------------------------------------------------------------

struct EnvVar {
  EnvVar(const char* n, const char* v) : name(n) {
    if (const char* old = getenv(n)) saved = old;
    if (v != nullptr) {
      setenv(n, v, 1);
    } else {
      unsetenv(n);
    }
  }
  ~EnvVar() {
    if (saved) {
      setenv(name, saved->c_str(), 1);
    } else {
      unsetenv(name);
    }
  }
  const char* name;
  std::optional<std::string> saved;
};

TEST_CASE("MakeModalTransport checks its options, and names the token variables") {
  asio::io_context io;
  EnvVar home("HOME", "/nonexistent-tether-home");
  EnvVar cfg("MODAL_CONFIG_PATH", nullptr);
  EnvVar id("MODAL_TOKEN_ID", "ak-x");
  EnvVar secret("MODAL_TOKEN_SECRET", "as-secret-value");
  EnvVar url("MODAL_SERVER_URL", nullptr);
  ModalOptions o;
  CHECK(MakeModalTransport(io.get_executor(), o).status().code() == absl::StatusCode::kInvalidArgument);
  o.sandbox_id = "sb-bad id";
  CHECK(MakeModalTransport(io.get_executor(), o).status().code() == absl::StatusCode::kInvalidArgument);
  o.sandbox_id = std::string(129, 'a');
  CHECK(MakeModalTransport(io.get_executor(), o).status().code() == absl::StatusCode::kInvalidArgument);
  o.sandbox_id = "sbx-v2-test";
  absl::StatusOr<std::shared_ptr<Transport>> t = MakeModalTransport(io.get_executor(), o);
  REQUIRE(t.ok());
  CHECK((*t)->name() == "modal");
  CHECK((*t)->capabilities().exact_bytes);
  CHECK((*t)->capabilities().cut_prone);
  o.server_url = "ftp://x";
  absl::Status st = MakeModalTransport(io.get_executor(), o).status();
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  o.server_url.clear();
  o.ca_file = "/nonexistent/ca.pem";
  CHECK(MakeModalTransport(io.get_executor(), o).status().code() == absl::StatusCode::kInvalidArgument);
  o.ca_file.clear();
  {
    EnvVar no_id("MODAL_TOKEN_ID", nullptr);
    st = MakeModalTransport(io.get_executor(), o).status();
    CHECK(st.code() == absl::StatusCode::kUnauthenticated);
    CHECK(st.message().find("MODAL_TOKEN_ID") != std::string_view::npos);
    CHECK(st.message().find("as-secret-value") == std::string_view::npos);
  }
}

TEST_CASE("MakeModalTransport reads the token from $MODAL_CONFIG_PATH, and refuses a broken one") {
  asio::io_context io;
  const std::string path = std::string(getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp") + "/tether-modal-test.toml";
  EnvVar cfg("MODAL_CONFIG_PATH", path.c_str());
  EnvVar id("MODAL_TOKEN_ID", nullptr);
  EnvVar secret("MODAL_TOKEN_SECRET", nullptr);
  EnvVar profile("MODAL_PROFILE", nullptr);
  ModalOptions o;
  o.sandbox_id = "sbx-v2-test";
  std::ofstream(path) << "[p]\ntoken_id = \"ak-1\"\ntoken_secret = \"as-1\"\nactive = true\n";
  CHECK(MakeModalTransport(io.get_executor(), o).ok());
  std::ofstream(path) << "[p\n";
  absl::Status st = MakeModalTransport(io.get_executor(), o).status();
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK(st.message().find(path) != std::string_view::npos);
  std::remove(path.c_str());
}

// ---- the gRPC bridge against an in-process server ------------------------------------

// The value of metadata `key` a call carried ("" when it had none).
std::string Metadata(const grpc::ServerContext* ctx, const char* key) {
  auto it = ctx->client_metadata().find(key);
  return it == ctx->client_metadata().end() ? std::string() : std::string(it->second.data(), it->second.size());
}

class Router final : public rt::TaskCommandRouter::Service {
 public:
  std::atomic<bool> wait_cancelled{false};
  std::mutex mu;
  std::vector<std::string> authorizations;  // of every TaskExecWait call
  int expired_jwts = 0;  // TaskExecWait calls answered "the router JWT expired"
  grpc::Status TaskExecWait(grpc::ServerContext* ctx, const rt::TaskExecWaitRequest* req,
                            rt::TaskExecWaitResponse* resp) override {
    {
      std::lock_guard<std::mutex> lock(mu);
      authorizations.push_back(Metadata(ctx, "authorization"));
      if (expired_jwts > 0) {
        --expired_jwts;
        return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "the router JWT expired");
      }
    }
    if (req->exec_id() == "quick") {
      resp->set_code(42);
      return grpc::Status::OK;
    }
    while (!ctx->IsCancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    wait_cancelled = true;
    return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
  }
  grpc::Status TaskExecStdioRead(grpc::ServerContext*, const rt::TaskExecStdioReadRequest* req,
                                 grpc::ServerWriter<rt::TaskExecStdioReadResponse>* w) override {
    for (int i = 0; i < 200; ++i) {
      rt::TaskExecStdioReadResponse m;
      m.set_data(std::string(1000, static_cast<char>('a' + i % 26)));
      if (!w->Write(m)) break;
    }
    return req->offset() == 7 ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "cut") : grpc::Status::OK;
  }
};

struct Server {
  // `listen` "0.0.0.0:0" (every interface) is what a URL of a host that is
  // not loopback reaches here: connecting to 0.0.0.0 lands on this machine.
  explicit Server(const std::string& listen = "127.0.0.1:0") {
    grpc::ServerBuilder b;
    b.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
    b.RegisterService(&svc);
    server = b.BuildAndStart();
    REQUIRE(server);
    stub = rt::TaskCommandRouter::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  }
  ~Server() { server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1)); }
  Router svc;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<rt::TaskCommandRouter::Stub> stub;
};

TEST_CASE("AwaitUnary completes on the executor's thread") {
  Server s;
  asio::io_context io;
  grpc::Status got(grpc::StatusCode::UNKNOWN, "not run");
  int code = 0;
  bool same_thread = false;
  const std::thread::id io_thread = std::this_thread::get_id();
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    auto ctx = std::make_shared<grpc::ClientContext>();
    rt::TaskExecWaitRequest req;
    req.set_exec_id("quick");
    rt::TaskExecWaitResponse resp;
    got = co_await AwaitUnary(ctx, [&](std::function<void(grpc::Status)> done) {
      s.stub->async()->TaskExecWait(ctx.get(), &req, &resp, std::move(done));
    });
    same_thread = std::this_thread::get_id() == io_thread;
    code = resp.code();
  }, asio::detached);
  io.run();  // returns only once the call completed (tracked work)
  CHECK(got.ok());
  CHECK(code == 42);
  CHECK(same_thread);
}

TEST_CASE("cancelling the awaiting operation cancels the RPC (TryCancel)") {
  using namespace asio::experimental::awaitable_operators;
  Server s;
  asio::io_context io;
  grpc::Status got;
  bool timer_won = false;
  const auto t0 = std::chrono::steady_clock::now();
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    auto ctx = std::make_shared<grpc::ClientContext>();
    rt::TaskExecWaitRequest req;
    req.set_exec_id("forever");
    rt::TaskExecWaitResponse resp;
    asio::steady_timer t(io, std::chrono::milliseconds(200));
    auto r = co_await (AwaitUnary(ctx, [&](std::function<void(grpc::Status)> done) {
                         s.stub->async()->TaskExecWait(ctx.get(), &req, &resp, std::move(done));
                       }) ||
                       t.async_wait(asio::use_awaitable));
    timer_won = r.index() == 1;
  }, asio::detached);
  io.run();
  CHECK(timer_won);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  for (int i = 0; i < 200 && !s.svc.wait_cancelled; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(s.svc.wait_cancelled);
}

struct Collect final : StreamSink {
  std::string bytes;
  int messages = 0;
  std::optional<grpc::Status> done;
  std::shared_ptr<ServerStream<rt::TaskExecStdioReadResponse>> stream;
  void OnMessage(std::string data) override {
    bytes += data;
    ++messages;
    stream->Next();
  }
  void OnDone(const grpc::Status& s) override { done = s; }
};

TEST_CASE("ServerStream delivers every message in order, then the status") {
  Server s;
  for (int offset : {0, 7}) {
    asio::io_context io;
    auto sink = std::make_shared<Collect>();
    rt::TaskExecStdioReadRequest req;
    req.set_offset(offset);
    sink->stream = std::make_shared<ServerStream<rt::TaskExecStdioReadResponse>>(io.get_executor(), sink);
    sink->stream->Start([&](auto* r) { s.stub->async()->TaskExecStdioRead(r->context(), &req, r); });
    io.run();
    REQUIRE(sink->done.has_value());
    CHECK(sink->messages == 200);
    REQUIRE(sink->bytes.size() == 200000);
    CHECK(sink->bytes[0] == 'a');
    CHECK(sink->bytes[199999] == static_cast<char>('a' + 199 % 26));
    CHECK(sink->done->error_code() == (offset == 7 ? grpc::StatusCode::UNAVAILABLE : grpc::StatusCode::OK));
    sink->stream.reset();
  }
}

TEST_CASE("ServerStream::Cancel ends a paused stream with OnDone") {
  Server s;
  asio::io_context io;
  struct Pause final : StreamSink {
    int messages = 0;
    std::optional<grpc::Status> done;
    std::shared_ptr<ServerStream<rt::TaskExecStdioReadResponse>> stream;
    void OnMessage(std::string) override {
      ++messages;
      stream->Cancel();  // no Next(): the stream is paused, then cancelled
    }
    void OnDone(const grpc::Status& st) override { done = st; }
  };
  auto sink = std::make_shared<Pause>();
  rt::TaskExecStdioReadRequest req;
  sink->stream = std::make_shared<ServerStream<rt::TaskExecStdioReadResponse>>(io.get_executor(), sink);
  sink->stream->Start([&](auto* r) { s.stub->async()->TaskExecStdioRead(r->context(), &req, r); });
  io.run();  // returns: OnDone came, the work it held is released
  CHECK(sink->messages == 1);
  REQUIRE(sink->done.has_value());
  CHECK(sink->done->error_code() == grpc::StatusCode::CANCELLED);
  sink->stream.reset();
}

// ---- cleartext only to loopback ------------------------------------------------------

// A plaintext control plane: every call's token recorded; the router it
// names is `router_url`.
class ControlPlane final : public ::modal::client::ModalClient::Service {
 public:
  std::mutex mu;
  std::vector<std::string> secrets;  // x-modal-token-secret of every AuthTokenGet
  std::vector<std::string> clients;  // "<x-modal-client-type> <x-modal-client-version>" of every call
  std::string router_url;
  // Pads AuthTokenGet's answer with this many bytes of header (initial) or
  // trailer metadata: an endpoint that lies about its size.
  std::size_t pad_initial = 0, pad_trailer = 0;
  int router_accesses = 0;  // JWTs handed out
  grpc::Status AuthTokenGet(grpc::ServerContext* ctx, const ::modal::client::AuthTokenGetRequest*,
                            ::modal::client::AuthTokenGetResponse* resp) override {
    std::lock_guard<std::mutex> lock(mu);
    secrets.push_back(Metadata(ctx, "x-modal-token-secret"));
    Client(ctx);
    if (pad_initial > 0) ctx->AddInitialMetadata("x-pad", std::string(pad_initial, 'p'));
    if (pad_trailer > 0) ctx->AddTrailingMetadata("x-pad", std::string(pad_trailer, 'p'));
    resp->set_token("auth-token");
    return grpc::Status::OK;
  }
  grpc::Status SandboxGetTaskIdV2(grpc::ServerContext* ctx, const ::modal::client::SandboxGetTaskIdRequest*,
                                  ::modal::client::SandboxGetTaskIdResponse* resp) override {
    std::lock_guard<std::mutex> lock(mu);
    Client(ctx);
    resp->set_task_id("ta-test");
    return grpc::Status::OK;
  }
  grpc::Status SandboxGetCommandRouterAccess(grpc::ServerContext* ctx,
                                             const ::modal::client::SandboxGetCommandRouterAccessRequest*,
                                             ::modal::client::TaskGetCommandRouterAccessResponse* resp) override {
    std::lock_guard<std::mutex> lock(mu);
    Client(ctx);
    ++router_accesses;
    resp->set_url(router_url);
    resp->set_jwt("router-jwt");
    return grpc::Status::OK;
  }

 private:
  void Client(const grpc::ServerContext* ctx) {
    clients.push_back(Metadata(ctx, "x-modal-client-type") + " " + Metadata(ctx, "x-modal-client-version"));
  }
};

struct ControlServer {
  explicit ControlServer(const std::string& listen) {
    grpc::ServerBuilder b;
    b.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
    b.RegisterService(&svc);
    server = b.BuildAndStart();
    REQUIRE(server);
  }
  ~ControlServer() { server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1)); }
  std::size_t calls() {
    std::lock_guard<std::mutex> lock(svc.mu);
    return svc.secrets.size();
  }
  ControlPlane svc;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
};

// Ready(), then (when it succeeded) one router call; bounded, so that a
// regression that dials cannot hang the test.
struct SessionRun {
  absl::Status ready = absl::UnknownError("not run");
  grpc::Status wait{grpc::StatusCode::UNKNOWN, "not run"};
  int code = -1;
};
SessionRun RunSession(SessionOptions so) {
  using namespace asio::experimental::awaitable_operators;
  asio::io_context io;
  auto session = std::make_shared<ModalSession>(io.get_executor(), std::move(so));
  SessionRun out;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    asio::steady_timer limit(io, std::chrono::seconds(20));
    auto body = [&]() -> asio::awaitable<void> {
      out.ready = co_await session->Ready();
      if (!out.ready.ok()) co_return;
      rt::TaskExecWaitRequest req;
      req.set_exec_id("quick");
      rt::TaskExecWaitResponse resp;
      out.wait = co_await session->RouterCall(req, &resp, [](auto* a, auto* c, auto* q, auto* p, auto done) {
        a->TaskExecWait(c, q, p, std::move(done));
      }, nullptr, std::chrono::milliseconds(3000), 1);
      out.code = resp.code();
    };
    co_await (body() || limit.async_wait(asio::as_tuple(asio::use_awaitable)));
  }, asio::detached);
  io.run();
  return out;
}

SessionOptions Options(const std::string& server_url) {
  SessionOptions so;
  so.sandbox_id = "sbx-v2-test";
  so.token_id = "ak-x";
  so.token_secret = "as-secret-value";
  so.server = ParseGrpcUrl(server_url).value();
  return so;
}

TEST_CASE("a plain http:// server that is not loopback is refused before any connection") {
  // 0.0.0.0 is not loopback by name, yet reaches this server: a regression
  // that dials it shows up as a token received here in cleartext.
  ControlServer control("0.0.0.0:0");
  const std::string url = "http://0.0.0.0:" + std::to_string(control.port);
  asio::io_context io;
  EnvVar home("HOME", "/nonexistent-tether-home");
  EnvVar cfg("MODAL_CONFIG_PATH", nullptr);
  EnvVar id("MODAL_TOKEN_ID", "ak-x");
  EnvVar secret("MODAL_TOKEN_SECRET", "as-secret-value");
  EnvVar server_url("MODAL_SERVER_URL", url.c_str());
  ModalOptions o;
  o.sandbox_id = "sbx-v2-test";
  absl::StatusOr<std::shared_ptr<Transport>> t = MakeModalTransport(io.get_executor(), o);
  CHECK(t.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(t.status().message().find("refused") != std::string_view::npos);
  CHECK(t.status().message().find("loopback") != std::string_view::npos);
  CHECK(t.status().message().find("https://") != std::string_view::npos);  // says what to do instead
  CHECK(t.status().message().find("as-secret-value") == std::string_view::npos);
  if (t.ok()) {
    // (Only when the check is broken: show what it lets through.)
    asio::co_spawn(io, [&]() -> asio::awaitable<void> { (void)co_await (*t)->Probe(); }, asio::detached);
    io.run_for(std::chrono::seconds(10));
  }
  // The session refuses it too, for a caller that makes one directly.
  SessionRun run = RunSession(Options(url));
  CHECK(run.ready.code() == absl::StatusCode::kInvalidArgument);
  CHECK(control.calls() == 0);  // no token ever reached it
}

TEST_CASE("a plaintext loopback server naming a router that is not loopback: refused before dialling it") {
  Server router("0.0.0.0:0");
  ControlServer control("127.0.0.1:0");
  control.svc.router_url = "https://0.0.0.0:" + std::to_string(router.port);
  SessionRun run = RunSession(Options("http://127.0.0.1:" + std::to_string(control.port)));
  CAPTURE(run.ready);
  CHECK(run.ready.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(run.ready.message().find("not loopback") != std::string_view::npos);
  CHECK(control.calls() == 1);  // the loopback control plane was used
  std::lock_guard<std::mutex> lock(router.svc.mu);
  CHECK(router.svc.authorizations.empty());  // the router JWT never went out
}

TEST_CASE("a plaintext loopback server and its loopback router still work (the emulator's setup)") {
  Server router("127.0.0.1:0");
  ControlServer control("127.0.0.1:0");
  control.svc.router_url = "https://127.0.0.1:" + std::to_string(router.port);
  SessionRun run = RunSession(Options("http://127.0.0.1:" + std::to_string(control.port)));
  CAPTURE(run.ready);
  CHECK(run.ready.ok());
  CHECK(run.wait.ok());
  CHECK(run.code == 42);
  std::lock_guard<std::mutex> lock(router.svc.mu);
  REQUIRE(router.svc.authorizations.size() == 1);
  CHECK(router.svc.authorizations[0] == "Bearer router-jwt");
}

TEST_CASE("a router call refused for an expired JWT gets a new one, up to kMaxJwtRefreshes times") {
  Server router("127.0.0.1:0");
  ControlServer control("127.0.0.1:0");
  control.svc.router_url = "https://127.0.0.1:" + std::to_string(router.port);
  // Expired twice in a row (a call that outlived its refreshed JWT): the
  // third JWT is taken.
  router.svc.expired_jwts = 2;
  SessionRun run = RunSession(Options("http://127.0.0.1:" + std::to_string(control.port)));
  CAPTURE(run.ready);
  CAPTURE(run.wait.error_message());
  REQUIRE(run.ready.ok());
  CHECK(run.wait.ok());
  CHECK(run.code == 42);
  {
    std::lock_guard<std::mutex> lock(control.svc.mu);
    CHECK(control.svc.router_accesses == 3);  // Ready's, then one per refusal
  }
  // A router that refuses every JWT: the call ends, after 1 + kMaxJwtRefreshes tries.
  Server refusing("127.0.0.1:0");
  ControlServer control2("127.0.0.1:0");
  control2.svc.router_url = "https://127.0.0.1:" + std::to_string(refusing.port);
  refusing.svc.expired_jwts = 1000;
  run = RunSession(Options("http://127.0.0.1:" + std::to_string(control2.port)));
  REQUIRE(run.ready.ok());
  CHECK(run.wait.error_code() == grpc::StatusCode::UNAUTHENTICATED);
  std::lock_guard<std::mutex> lock(refusing.svc.mu);
  CHECK(refusing.svc.authorizations.size() == 1 + kMaxJwtRefreshes);
}

// ---- an endpoint's metadata is bounded (kMaxMetadataBytes) -------------------------

TEST_CASE("metadata up to kMaxMetadataBytes is taken, above gRPC's own 8 KiB default") {
  // Without the explicit limit gRPC 1.51 refuses this answer at 8 KiB.
  static_assert(kMaxMetadataBytes == 16 << 10);
  for (const bool trailer : {false, true}) {
    CAPTURE(trailer);
    Server router("127.0.0.1:0");
    ControlServer control("127.0.0.1:0");
    control.svc.router_url = "https://127.0.0.1:" + std::to_string(router.port);
    (trailer ? control.svc.pad_trailer : control.svc.pad_initial) = 12 << 10;
    SessionRun run = RunSession(Options("http://127.0.0.1:" + std::to_string(control.port)));
    CAPTURE(run.ready);
    CHECK(run.ready.ok());
    CHECK(run.code == 42);
  }
}

TEST_CASE("an answer with 1 MiB of header or trailer metadata fails its call, once, with a clear error") {
  for (const bool trailer : {false, true}) {
    CAPTURE(trailer);
    Server router("127.0.0.1:0");
    ControlServer control("127.0.0.1:0");
    control.svc.router_url = "https://127.0.0.1:" + std::to_string(router.port);
    (trailer ? control.svc.pad_trailer : control.svc.pad_initial) = 1 << 20;
    SessionRun run = RunSession(Options("http://127.0.0.1:" + std::to_string(control.port)));
    MESSAGE(run.ready.ToString());
    CHECK(run.ready.code() == absl::StatusCode::kResourceExhausted);
    CHECK(std::string(run.ready.message()).find("AuthTokenGet") != std::string::npos);
    CHECK(std::string(run.ready.message()).find("metadata") != std::string::npos);
    CHECK(control.calls() == 1);  // not retried: the same answer would come again
    std::lock_guard<std::mutex> lock(router.svc.mu);
    CHECK(router.svc.authorizations.empty());  // nothing went on to the router
  }
}

TEST_CASE("every control-plane call carries the SDK's client type and version") {
  // modal-js 0.11.1 sends x-modal-client-type 8 and x-modal-client-version
  // 1.0.0 on every control-plane call (EMULATORS.md section 5).
  Server router("127.0.0.1:0");
  ControlServer control("127.0.0.1:0");
  control.svc.router_url = "https://127.0.0.1:" + std::to_string(router.port);
  SessionRun run = RunSession(Options("http://127.0.0.1:" + std::to_string(control.port)));
  REQUIRE(run.ready.ok());
  std::lock_guard<std::mutex> lock(control.svc.mu);
  CHECK(control.svc.clients.size() == 3);  // AuthTokenGet, SandboxGetTaskIdV2, SandboxGetCommandRouterAccess
  for (const std::string& c : control.svc.clients) CHECK(c == "8 1.0.0");
}

}  // namespace
