// The docker provider against a real engine: podman's Docker API service
// with a real container, started by tests/host/native/with_podman_docker.sh (which
// exports TETHER_TEST_DOCKER_HOST, _CONTAINER and _STOPPED). Without them
// every case is skipped.
#include "tether/providers/docker.h"

#include <doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tether/errors.h"
#include "tether/shell_setup.h"

namespace tether {
namespace {

namespace asio = boost::asio;
using asio::awaitable;
using namespace std::chrono_literals;
constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

bool HaveEngine() {
  if (Env("TETHER_TEST_DOCKER_HOST") != nullptr && Env("TETHER_TEST_DOCKER_CONTAINER") != nullptr) return true;
  MESSAGE("skipped: run through tests/host/native/with_podman_docker.sh");
  return false;
}

DockerOptions Options(std::string container = "") {
  DockerOptions o;
  o.container = container.empty() ? Env("TETHER_TEST_DOCKER_CONTAINER") : container;
  o.endpoint = Env("TETHER_TEST_DOCKER_HOST");
  o.tls = DockerTls{};
  return o;
}

// Runs `body` on a fresh io_context until every coroutine is done, bounded
// by a wall-clock guard.
void Run(std::function<awaitable<void>(asio::io_context&)> body) {
  asio::io_context io;
  bool finished = false;
  asio::co_spawn(io, body(io), [&](std::exception_ptr e) {
    finished = true;
    if (e) std::rethrow_exception(e);
  });
  io.run_for(120s);
  CHECK(finished);
}

struct Result {
  absl::Status status;
  std::string out, diag;
  std::optional<int> exit_code;
};

// (Coroutines take their state as parameters: a coroutine lambda's
// captures die with the lambda.)
awaitable<void> WriteAll(Channel* c, std::string input, std::shared_ptr<std::optional<absl::Status>> done) {
  absl::Status st;
  for (std::size_t off = 0; off < input.size() && st.ok(); off += 65536) {
    st = co_await c->Write(std::string_view(input).substr(off, 65536));
  }
  if (st.ok()) c->CloseWrite();
  *done = st;
}

awaitable<void> CloseAfter(asio::steady_timer* timer, Channel* c) {
  co_await timer->async_wait(kNoThrow);
  c->Close();
}

// Runs argv with `input` on stdin (then CloseWrite), reading stdout to EOF
// meanwhile.
awaitable<Result> RunCommand(Transport& t, std::vector<std::string> argv, std::string input) {
  Result r;
  absl::StatusOr<std::unique_ptr<Channel>> ch = co_await t.Exec(std::move(argv));
  if (!ch.ok()) {
    r.status = ch.status();
    co_return r;
  }
  Channel* c = ch->get();
  auto write_status = std::make_shared<std::optional<absl::Status>>();
  asio::co_spawn(t.executor(), WriteAll(c, std::move(input), write_status), asio::detached);
  std::string buf(16384, '\0');
  while (true) {
    absl::StatusOr<std::size_t> n = co_await c->ReadSome({buf.data(), buf.size()});
    if (!n.ok()) {
      r.status = n.status();
      break;
    }
    if (*n == 0) break;
    r.out.append(buf.data(), *n);
  }
  if (r.status.ok() && write_status->has_value()) r.status = **write_status;
  r.diag = c->Diagnostics();
  r.exit_code = c->exit_code();
  c->Close();
  // The writer ends (Close ended its Write) before the channel goes.
  asio::steady_timer wait(t.executor());
  while (!write_status->has_value()) {
    wait.expires_after(1ms);
    co_await wait.async_wait(kNoThrow);
  }
  co_return r;
}

std::vector<std::string> Argv(std::string a, std::string b = "") {
  std::vector<std::string> argv;
  argv.push_back(std::move(a));
  if (!b.empty()) argv.push_back(std::move(b));
  return argv;
}

awaitable<void> Sleep(int ms) {
  asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::milliseconds(ms));
  co_await t.async_wait(kNoThrow);
}

std::vector<std::string> Sh(std::string script) {
  std::vector<std::string> argv;
  argv.push_back("/bin/sh");
  argv.push_back("-c");
  argv.push_back(std::move(script));
  return argv;
}

TEST_CASE("exact bytes on stdout, stderr as diagnostics, the exit status from the engine") {
  if (!HaveEngine()) return;
  Run([](asio::io_context& io) -> awaitable<void> {
    auto t = MakeDockerTransport(io.get_executor(), Options());
    REQUIRE(t.ok());
    Result r = co_await RunCommand(**t, Sh("printf '\\000\\377'; echo oops >&2; exit 7"), "");
    REQUIRE(r.status.ok());
    CHECK(r.out == std::string("\0\377", 2));
    CHECK(r.diag.find("oops") != std::string::npos);
    REQUIRE(r.exit_code.has_value());
    CHECK(*r.exit_code == 7);
  });
}

TEST_CASE("every byte value through cat, both ways, 4 MiB") {
  if (!HaveEngine()) return;
  Run([](asio::io_context& io) -> awaitable<void> {
    auto t = MakeDockerTransport(io.get_executor(), Options());
    REQUIRE(t.ok());
    std::string input;
    for (int i = 0; i < 4 * 1024 * 1024; ++i) input.push_back(static_cast<char>((i * 131 + i / 256) & 0xff));
    Result r = co_await RunCommand(**t, Argv("/bin/cat"), input);
    REQUIRE(r.status.ok());
    CHECK(r.out.size() == input.size());
    CHECK(r.out == input);
    CHECK(r.exit_code == std::optional<int>(0));
  });
}

TEST_CASE("Close ends a pending read at once") {
  if (!HaveEngine()) return;
  Run([](asio::io_context& io) -> awaitable<void> {
    auto t = MakeDockerTransport(io.get_executor(), Options());
    REQUIRE(t.ok());
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await (*t)->Exec(Sh("sleep 30"));
    REQUIRE(ch.ok());
    Channel* c = ch->get();
    asio::steady_timer timer(io, 200ms);
    asio::co_spawn(io, CloseAfter(&timer, c), asio::detached);
    const auto start = std::chrono::steady_clock::now();
    char buf[16];
    absl::StatusOr<std::size_t> n = co_await c->ReadSome({buf, sizeof buf});
    CHECK(!n.ok());
    CHECK(std::chrono::steady_clock::now() - start < 5s);
    CHECK(!c->exit_code().has_value());
  });
}

TEST_CASE("a cancelled read completes promptly and loses nothing") {
  if (!HaveEngine()) return;
  Run([](asio::io_context& io) -> awaitable<void> {
    using namespace asio::experimental::awaitable_operators;
    auto t = MakeDockerTransport(io.get_executor(), Options());
    REQUIRE(t.ok());
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await (*t)->Exec(Sh("sleep 1; printf hello"));
    REQUIRE(ch.ok());
    std::string buf(16, '\0');  // (not an array: g++ 12 and coroutine frames)
    asio::steady_timer timer(io, 100ms);
    auto first = co_await ((*ch)->ReadSome({buf.data(), buf.size()}) || timer.async_wait(kNoThrow));
    CHECK(first.index() == 1);  // the timer won: the read was cancelled
    std::string out;
    while (true) {
      absl::StatusOr<std::size_t> n = co_await (*ch)->ReadSome({buf.data(), buf.size()});
      REQUIRE(n.ok());
      if (*n == 0) break;
      out.append(buf.data(), *n);
    }
    CHECK(out == "hello");
    CHECK((*ch)->exit_code() == std::optional<int>(0));
  });
}

// Echoes `bytes` through a running cat: true when they come back.
awaitable<bool> Echoes(Channel& c, std::string bytes) {
  if (!(co_await c.Write(bytes)).ok()) co_return false;
  std::string got, buf(4096, '\0');
  while (got.size() < bytes.size()) {
    absl::StatusOr<std::size_t> n = co_await c.ReadSome({buf.data(), buf.size()});
    if (!n.ok() || *n == 0) co_return false;
    got.append(buf.data(), *n);
  }
  co_return got == bytes;
}

TEST_CASE("a channel abandoned with output pending does not leave its command running") {
  if (!HaveEngine()) return;
  Run([](asio::io_context& io) -> awaitable<void> {
    auto t = MakeDockerTransport(io.get_executor(), Options());
    REQUIRE(t.ok());
    // (Podman stops draining an exec whose client went away: without the
    // transport's reaping this cat would block on its stdout forever.)
    // It replaces the shell the engine started, so its command line is not
    // the one the transport asked for: the supervisor zeroes its own too.
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await (*t)->Exec(Sh("exec cat"));
    REQUIRE(ch.ok());
    // Another command, left alone: a live one is never ended with it.
    absl::StatusOr<std::unique_ptr<Channel>> other = co_await (*t)->Exec(Argv("/bin/cat"));
    REQUIRE(other.ok());
    CHECK(co_await Echoes(**other, "before"));
    auto done = std::make_shared<std::optional<absl::Status>>();
    asio::co_spawn(io, WriteAll(ch->get(), std::string(4 << 20, 'x'), done), asio::detached);
    asio::steady_timer timer(io, 500ms);
    co_await timer.async_wait(kNoThrow);
    (*ch)->Close();
    while (!done->has_value()) {
      timer.expires_after(1ms);
      co_await timer.async_wait(kNoThrow);
    }
    ch->reset();
    // (The next Exec waits for the reaping.)
    Result r = co_await RunCommand(**t, Sh("ps -o pid,args | grep -c '[ ]cat$' || true"), "");
    REQUIRE(r.status.ok());
    CHECK(r.out == "0\n");
    CHECK(co_await Echoes(**other, "after"));
    (*other)->Close();
  });
}

TEST_CASE("a missing container is kNotFound naming it") {
  if (!HaveEngine()) return;
  Run([](asio::io_context& io) -> awaitable<void> {
    auto t = MakeDockerTransport(io.get_executor(), Options("tether-no-such-box"));
    REQUIRE(t.ok());
    Result r = co_await RunCommand(**t, Sh("true"), "");
    CAPTURE(r.status);
    CHECK(absl::IsNotFound(r.status));
    CHECK(r.status.message().find("tether-no-such-box") != absl::string_view::npos);
    absl::StatusOr<SandboxInfo> info = co_await (*t)->Probe();
    CHECK(absl::IsNotFound(info.status()));
  });
}

TEST_CASE("a stopped container is kFailedPrecondition with the engine's message") {
  if (!HaveEngine() || Env("TETHER_TEST_DOCKER_STOPPED") == nullptr) return;
  Run([](asio::io_context& io) -> awaitable<void> {
    auto t = MakeDockerTransport(io.get_executor(), Options(Env("TETHER_TEST_DOCKER_STOPPED")));
    REQUIRE(t.ok());
    Result r = co_await RunCommand(**t, Sh("true"), "");
    CAPTURE(r.status);
    CHECK(absl::IsFailedPrecondition(r.status));
    CHECK(r.status.message().find(Env("TETHER_TEST_DOCKER_STOPPED")) != absl::string_view::npos);
    CHECK(r.status.message().find("not running") != absl::string_view::npos);
  });
}

TEST_CASE("an engine that refuses the connection is kUnavailable naming DOCKER_HOST") {
  Run([](asio::io_context& io) -> awaitable<void> {
    const std::string sock = "/tmp/tether-docker-test-nothing-" + std::to_string(::getpid()) + ".sock";
    ::setenv("DOCKER_HOST", ("unix://" + sock).c_str(), 1);
    DockerOptions o;
    o.container = "box";
    o.tls = DockerTls{};
    auto t = MakeDockerTransport(io.get_executor(), o);
    ::unsetenv("DOCKER_HOST");
    REQUIRE(t.ok());
    Result r = co_await RunCommand(**t, Sh("true"), "");
    CAPTURE(r.status);
    CHECK(absl::IsUnavailable(r.status));
    CHECK(r.status.message().find("DOCKER_HOST") != absl::string_view::npos);
    CHECK(r.status.message().find(sock) != absl::string_view::npos);
  });
}

TEST_CASE("bad options are refused before anything is contacted") {
  asio::io_context io;
  DockerOptions o;
  o.tls = DockerTls{};
  o.endpoint = "unix:///tmp/x.sock";
  CHECK(absl::IsInvalidArgument(MakeDockerTransport(io.get_executor(), o).status()));  // no container
  o.container = "box";
  o.api_version = "v1.41";
  CHECK(absl::IsInvalidArgument(MakeDockerTransport(io.get_executor(), o).status()));
  o.api_version = "/v1.41";
  o.endpoint = "gopher://x";
  CHECK(absl::IsInvalidArgument(MakeDockerTransport(io.get_executor(), o).status()));
  o.endpoint = "http://example.com:2375";  // plain HTTP off this machine
  CHECK(!MakeDockerTransport(io.get_executor(), o).ok());
}

TEST_CASE("TLS settings come from DOCKER_TLS_VERIFY and DOCKER_CERT_PATH; key material never shows") {
  char dir[] = "/tmp/tether-docker-certs-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  const std::string d = dir;
  for (const char* f : {"ca.pem", "cert.pem", "key.pem"}) {
    FILE* out = std::fopen((d + "/" + f).c_str(), "w");
    REQUIRE(out != nullptr);
    std::fputs("-----BEGIN PRIVATE KEY-----\nSECRET-KEY-MATERIAL\n-----END PRIVATE KEY-----\n", out);
    std::fclose(out);
  }
  ::setenv("DOCKER_TLS_VERIFY", "1", 1);
  ::setenv("DOCKER_CERT_PATH", dir, 1);
  const DockerTls tls = DockerTlsFromEnvironment();
  ::unsetenv("DOCKER_TLS_VERIFY");
  ::unsetenv("DOCKER_CERT_PATH");
  CHECK(tls.verify);
  CHECK(tls.cert_path == d);
  Run([&](asio::io_context& io) -> awaitable<void> {
    DockerOptions o;
    o.container = "box";
    o.endpoint = "tcp://127.0.0.1:1";
    o.tls = tls;
    auto t = MakeDockerTransport(io.get_executor(), o);
    if (!t.ok()) {  // (net refuses certificates that do not parse, naming neither)
      CAPTURE(t.status());
      CHECK(absl::IsInvalidArgument(t.status()));
      CHECK(t.status().message().find("SECRET") == absl::string_view::npos);
      co_return;
    }
    Result r = co_await RunCommand(**t, Sh("true"), "");
    CAPTURE(r.status);
    CHECK(!r.status.ok());
    CHECK(r.status.message().find("SECRET") == absl::string_view::npos);
  });
  CHECK(!DockerTlsFromEnvironment().verify);
  std::system(("rm -rf " + d).c_str());
}

TEST_CASE("the probe finds the container's architecture and a private root") {
  if (!HaveEngine()) return;
  Run([](asio::io_context& io) -> awaitable<void> {
    auto t = MakeDockerTransport(io.get_executor(), Options());
    REQUIRE(t.ok());
    absl::StatusOr<SandboxInfo> info = co_await (*t)->Probe();
    REQUIRE(info.ok());
    CHECK(!info->arch.empty());
    CHECK(info->bin_dir.rfind("/tmp/tether-", 0) == 0);
    CHECK((*t)->sandbox_id() == std::string("docker:") + Env("TETHER_TEST_DOCKER_CONTAINER"));
  });
}

TEST_CASE("PutFile installs exact bytes with their mode, and leaves the same content alone") {
  if (!HaveEngine()) return;
  Run([](asio::io_context& io) -> awaitable<void> {
    std::vector<std::pair<std::size_t, std::size_t>> progress;
    DockerOptions o = Options();
    o.upload_progress = [&](std::size_t done, std::size_t total) { progress.emplace_back(done, total); };
    auto t = MakeDockerTransport(io.get_executor(), o);
    REQUIRE(t.ok());
    absl::StatusOr<SandboxInfo> info = co_await (*t)->Probe();
    REQUIRE(info.ok());
    std::string bytes;
    for (int i = 0; i < 300000; ++i) bytes.push_back(static_cast<char>(i * 7 + 3));
    const std::string path = info->bin_dir + "/put-test-" + std::to_string(::getpid());
    REQUIRE((co_await (*t)->PutFile(path, bytes, 0750)).ok());
    REQUIRE(!progress.empty());
    CHECK(progress.back() == std::make_pair(bytes.size(), bytes.size()));
    Result back = co_await RunCommand(**t, Argv("/bin/cat", path), "");
    CHECK(back.out == bytes);
    Result mode = co_await RunCommand(**t, Sh("stat -c %a " + ShellQuote(path) + "; ls -a " +
                                              ShellQuote(info->bin_dir) + " | grep -c tether-up || true"), "");
    CHECK(mode.out == "750\n0\n");

    // Same content: nothing is sent (a new transport looks, finds it).
    progress.clear();
    auto t2 = MakeDockerTransport(io.get_executor(), o);
    REQUIRE(t2.ok());
    REQUIRE((co_await (*t2)->PutFile(path, bytes, 0750)).ok());
    CHECK(progress.empty());
    // Other content replaces it atomically.
    REQUIRE((co_await (*t2)->PutFile(path, "new", 0600)).ok());
    back = co_await RunCommand(**t, Argv("/bin/cat", path), "");
    CHECK(back.out == "new");
    // An empty file (the cancel marker's kind).
    REQUIRE((co_await (*t2)->PutFile(path + ".empty", "", 0600)).ok());
    back = co_await RunCommand(**t, Sh("wc -c < " + ShellQuote(path + ".empty")), "");
    CHECK(back.out == "0\n");
    (void)co_await RunCommand(**t, Sh("rm -f " + ShellQuote(path) + " " + ShellQuote(path + ".empty")), "");
  });
}

TEST_CASE("PutFile under a path that cannot be a directory fails and leaves nothing") {
  if (!HaveEngine()) return;
  Run([](asio::io_context& io) -> awaitable<void> {
    auto t = MakeDockerTransport(io.get_executor(), Options());
    REQUIRE(t.ok());
    // (Podman creates a missing directory, Docker answers 404; under a
    // regular file both must fail.)
    REQUIRE((co_await RunCommand(**t, Sh("echo x > /tmp/tether-a-file"), "")).status.ok());
    absl::Status st = co_await (*t)->PutFile("/tmp/tether-a-file/file", "x", 0600);
    CAPTURE(st);
    CHECK(!st.ok());
    Result r = co_await RunCommand(**t, Sh("cat /tmp/tether-a-file; ls -a /tmp"), "");
    CHECK(r.out.find("x\n") == 0);
    CHECK(r.out.find(".tether-up-") == std::string::npos);
    CHECK(absl::IsInvalidArgument(co_await (*t)->PutFile("relative/file", "x", 0600)));
    CHECK(absl::IsInvalidArgument(co_await (*t)->PutFile("/tmp/dir/", "x", 0600)));
  });
}

// A Unix socket proxy in front of the engine that cuts an archive upload
// (a request that starts with "PUT ") after `cut_after` of its bytes. With
// `late`, the engine sees the upload's bytes only that long after the
// client saw the cut (an engine slow to start unpacking), then the end of
// the request; `answered_late` counts the engine's answers to them (or its
// closing the connection): it is done with the archive.
class CuttingProxy {
 public:
  CuttingProxy(asio::io_context& io, std::string target, std::size_t cut_after,
               std::chrono::milliseconds late = std::chrono::milliseconds(0))
      : io_(io), target_(std::move(target)), cut_after_(cut_after), late_(late),
        path_("/tmp/tether-docker-proxy-" + std::to_string(::getpid()) + ".sock"),
        acceptor_(io, (::unlink(path_.c_str()), asio::local::stream_protocol::endpoint(path_))) {
    asio::co_spawn(io_, Accept(), asio::detached);
  }
  ~CuttingProxy() { ::unlink(path_.c_str()); }
  std::string endpoint() const { return "unix://" + path_; }
  void Stop() {
    boost::system::error_code ec;
    acceptor_.close(ec);
    for (auto& s : sockets_) s->close(ec);
  }
  int cuts = 0;
  int answered_late = 0;

 private:
  using Socket = asio::local::stream_protocol::socket;
  awaitable<void> Accept() {
    while (acceptor_.is_open()) {
      auto [ec, client] = co_await acceptor_.async_accept(kNoThrow);
      if (ec) co_return;
      auto c = std::make_shared<Socket>(std::move(client));
      auto u = std::make_shared<Socket>(io_);
      boost::system::error_code cec;
      u->connect(asio::local::stream_protocol::endpoint(target_), cec);
      if (cec) continue;
      sockets_.push_back(c);
      sockets_.push_back(u);
      auto cut = std::make_shared<bool>(false);  // this connection's upload was cut
      asio::co_spawn(io_, Pump(c, u, true, cut), asio::detached);
      asio::co_spawn(io_, Pump(u, c, false, cut), asio::detached);
    }
  }
  awaitable<void> Pump(std::shared_ptr<Socket> from, std::shared_ptr<Socket> to, bool upstream,
                       std::shared_ptr<bool> cut) {
    std::string buf(16384, '\0');
    std::string held;
    std::size_t sent = 0;
    bool put = false;
    while (true) {
      auto [ec, n] = co_await from->async_read_some(asio::buffer(buf), kNoThrow);
      if (!upstream && *cut) {  // the engine's answer to a late upload, or its close
        if (late_.count() > 0) ++answered_late;
        break;
      }
      if (ec == asio::error::eof) {  // a half-close passes through
        boost::system::error_code ignored;
        to->shutdown(Socket::shutdown_send, ignored);
        co_return;
      }
      if (ec) break;
      // A request starts a read on a kept-alive connection too (the client
      // waits for each answer): count from the PUT's first byte.
      if (upstream && std::string_view(buf.data(), n).starts_with("PUT ")) {
        put = true;
        sent = 0;
      }
      if (put && sent + n > cut_after_) {
        ++cuts;
        *cut = true;
        if (late_.count() > 0) {
          boost::system::error_code ignored;
          from->close(ignored);
          asio::steady_timer wait(io_, late_);
          co_await wait.async_wait(kNoThrow);
          co_await asio::async_write(*to, asio::buffer(held), kNoThrow);
          to->shutdown(Socket::shutdown_send, ignored);  // (the other pump reads the answer)
          co_return;
        }
        break;
      }
      if (put && late_.count() > 0) {
        held.append(buf.data(), n);
        sent += n;
        continue;
      }
      auto [wec, wn] = co_await asio::async_write(*to, asio::buffer(buf.data(), n), kNoThrow);
      if (wec) break;
      sent += n;
    }
    boost::system::error_code ignored;
    from->close(ignored);
    to->close(ignored);
  }

  asio::io_context& io_;
  std::string target_;
  std::size_t cut_after_;
  std::chrono::milliseconds late_;
  std::string path_;
  asio::local::stream_protocol::acceptor acceptor_;
  std::vector<std::shared_ptr<Socket>> sockets_;
};

TEST_CASE("an upload cut short leaves no file at the path and no partial temporary file") {
  if (!HaveEngine()) return;
  std::string target = Env("TETHER_TEST_DOCKER_HOST");
  REQUIRE(target.rfind("unix://", 0) == 0);
  target = target.substr(7);
  // At once, and with an engine that starts unpacking half a second after
  // the client saw the cut (after an immediate cleanup would have run).
  for (const int late_ms : {0, 500}) {
    CAPTURE(late_ms);
    Run([target, late_ms](asio::io_context& io) -> awaitable<void> {
      CuttingProxy proxy(io, target, 200 * 1024, std::chrono::milliseconds(late_ms));
      DockerOptions o = Options();
      o.endpoint = proxy.endpoint();
      auto cut = MakeDockerTransport(io.get_executor(), o);
      REQUIRE(cut.ok());
      auto direct = MakeDockerTransport(io.get_executor(), Options());
      REQUIRE(direct.ok());
      absl::StatusOr<SandboxInfo> info = co_await (*direct)->Probe();
      REQUIRE(info.ok());
      const std::string path = info->bin_dir + "/cut-test-" + std::to_string(::getpid());
      const std::string bytes(2 * 1024 * 1024, 'z');
      absl::Status st = co_await (*cut)->PutFile(path, bytes, 0700);
      CAPTURE(st);
      CHECK(!st.ok());
      CHECK(proxy.cuts >= 1);
      // Nothing at the path, and no temporary file, once the engine is
      // done with a late upload too (its answer came).
      for (int i = 0; late_ms > 0 && proxy.answered_late == 0 && i < 400; ++i) co_await Sleep(50);
      CHECK(proxy.answered_late == (late_ms > 0 ? 1 : 0));
      Result r = co_await RunCommand(**direct, Sh("ls -a " + ShellQuote(info->bin_dir) + "; test -e " +
                                                 ShellQuote(path) + " && echo PRESENT || echo ABSENT"), "");
      CAPTURE(r.out);
      CHECK(r.out.find("ABSENT") != std::string::npos);
      CHECK(r.out.find(".tether-up-") == std::string::npos);
      proxy.Stop();
    });
  }
}

TEST_CASE("an install sweeps temporary files left more than 10 minutes ago, and no others") {
  if (!HaveEngine()) return;
  Run([](asio::io_context& io) -> awaitable<void> {
    auto t = MakeDockerTransport(io.get_executor(), Options());
    REQUIRE(t.ok());
    absl::StatusOr<SandboxInfo> info = co_await (*t)->Probe();
    REQUIRE(info.ok());
    const std::string d = ShellQuote(info->bin_dir);
    // Left by a host killed mid-upload (old), one being written now
    // (fresh), and an old file of another name.
    Result set = co_await RunCommand(
        **t,
        Sh("cd " + d + " && echo partial > .tether-up-00000000000000aa && touch -t 200001010000 .tether-up-00000000000000aa"
           " && echo fresh > .tether-up-00000000000000bb && echo keep > sweep-keep && touch -t 200001010000 sweep-keep"
           " && ls -a"),
        "");
    REQUIRE(set.status.ok());
    REQUIRE(set.out.find(".tether-up-00000000000000aa") != std::string::npos);  // (the setup happened)
    const std::string path = info->bin_dir + "/sweep-test-" + std::to_string(::getpid());
    REQUIRE((co_await (*t)->PutFile(path, "x", 0600)).ok());
    Result r = co_await RunCommand(**t, Sh("ls -a " + d), "");
    CAPTURE(r.out);
    CHECK(r.out.find(".tether-up-00000000000000aa") == std::string::npos);
    CHECK(r.out.find(".tether-up-00000000000000bb") != std::string::npos);
    CHECK(r.out.find("sweep-keep") != std::string::npos);
    (void)co_await RunCommand(**t, Sh("cd " + d + " && rm -f .tether-up-00000000000000bb sweep-keep " +
                                      ShellQuote(path)), "");
  });
}

}  // namespace
}  // namespace tether
