// The local provider's channel: exact bytes both ways, EOF, and no SIGPIPE
// for the embedding application when the command is gone.
#include "tether/local_transport.h"
#include "host/transports/forwarding_transport.h"
#include "tether/process.h"

#include <doctest.h>
#include <signal.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "tests/host/process/process_fixture.h"
#include "tests/host/test_util.h"

namespace tether {
namespace {

namespace asio = boost::asio;

std::vector<std::string> Argv(std::string a, std::string b, std::string c) { return {a, b, c}; }

asio::awaitable<std::string> ReadToEof(Channel& ch) {
  std::string out;
  char buf[4096];
  while (true) {
    absl::StatusOr<std::size_t> n = co_await ch.ReadSome({buf, sizeof buf});
    REQUIRE(n.ok());
    if (*n == 0) break;
    out.append(buf, *n);
  }
  co_return out;
}

TEST_CASE("a channel carries exact bytes both ways and passes EOF") {
  testing::RunLocal("tether-transport-test", [](Transport& t) -> asio::awaitable<void> {
    auto ch = co_await t.Exec(Argv("/bin/sh", "-c", "cat"));
    REQUIRE(ch.ok());
    std::string in;
    for (int i = 0; i < 256; ++i) in.push_back(static_cast<char>(i));
    CHECK((co_await (*ch)->Write(in)).ok());
    (*ch)->CloseWrite();
    CHECK(co_await ReadToEof(**ch) == in);
  });
}

TEST_CASE("writing to a command that has exited is an error, not a SIGPIPE") {
  // Default SIGPIPE disposition, as in an application that never touched it.
  struct sigaction old {};
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  ::sigaction(SIGPIPE, &dfl, &old);
  testing::RunLocal("tether-transport-test", [](Transport& t) -> asio::awaitable<void> {
    auto ch = co_await t.Exec(Argv("/bin/sh", "-c", "exec 0<&-; exit 0"));
    REQUIRE(ch.ok());
    CHECK((co_await ReadToEof(**ch)).empty());
    absl::Status st;
    for (int i = 0; i < 64 && st.ok(); ++i) st = co_await (*ch)->Write(std::string(65536, 'x'));
    CHECK(absl::IsUnavailable(st));
  });
  ::sigaction(SIGPIPE, &old, nullptr);
}

TEST_CASE("a direct connection refuses a missing, linked, shared or foreign state directory") {
  char tmpl[] = "/tmp/tether-connect-test-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string root = tmpl;
  REQUIRE(::mkdir((root + "/open").c_str(), 0755) == 0);
  ::chmod((root + "/open").c_str(), 0755);
  REQUIRE(::mkdir((root + "/private").c_str(), 0700) == 0);
  REQUIRE(::symlink((root + "/private").c_str(), (root + "/link").c_str()) == 0);
  testing::RunLocal("tether-transport-test", [root](Transport& t) -> asio::awaitable<void> {
    CHECK(t.capabilities().direct_connect);
    auto* d = dynamic_cast<DirectConnector*>(&t);
    REQUIRE(d != nullptr);
    auto missing = co_await d->Connect(root + "/missing");
    CHECK(absl::IsNotFound(missing.status()));
    auto link = co_await d->Connect(root + "/link");  // never followed
    CHECK(!link.ok());
    CHECK(!absl::IsNotFound(link.status()));
    auto open = co_await d->Connect(root + "/open");  // not 0700
    CHECK(absl::IsFailedPrecondition(open.status()));
    auto empty = co_await d->Connect(root + "/private");  // no socket: the process is gone
    CHECK(absl::IsNotFound(empty.status()));
  });
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace tether

namespace tether {
namespace {

TEST_CASE("a process handle owns its transport; an unowned transport is refused") {
  char tmpl[] = "/tmp/tether-lifetime-test-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string root = tmpl;
  {
    boost::asio::io_context io;
    bool done = false;
    auto body = [&]() -> boost::asio::awaitable<void> {
      absl::StatusOr<std::shared_ptr<Transport>> t = MakeLocalTransport(io.get_executor(), LocalOptions{root});
      REQUIRE(t.ok());
      StartOptions o;
      o.argv = {"sh", "-c", "sleep 0.2; printf done"};
      o.output_format = OutputFormat::kBytes;
      {
        // A decorator on the stack is not owned by a shared_ptr: refused,
        // nothing started.
        internal::ForwardingTransport unowned(**t);
        auto refused = co_await Process::Start(unowned, o);
        CHECK(absl::IsInvalidArgument(refused.status()));
      }
      Transport& transport = **t;
      auto p = co_await Process::Start(transport, o);
      REQUIRE(p.ok());
      t->reset();  // the caller lets go: the handle keeps the transport
      testing::Output out = co_await testing::ReadAll(**p);
      REQUIRE(out.status.ok());
      CHECK(out.out == "done");
      auto e = co_await (*p)->Wait();
      REQUIRE(e.ok());
      CHECK(e->code == 0);
      done = true;
    };
    boost::asio::co_spawn(io, body(), [](std::exception_ptr e) {
      if (e) std::rethrow_exception(e);
    });
    io.run();
    CHECK(done);
  }
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace tether
