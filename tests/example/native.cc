// An application that embeds the native providers through the installed
// package (tether::providers): each provider's public factory
// (include/tether/providers/<p>.h) checks its options, the registry makes
// a transport by name, and a transport whose engine is not there fails its
// first call with UNAVAILABLE naming the endpoint. Prints "embed_native: ok".
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <cstdio>
#include <string>

#include "tether/errors.h"
#include "tether/providers.h"
#include "tether/providers/boat.h"
#include "tether/providers/daytona.h"
#include "tether/providers/docker.h"
#include "tether/providers/e2b.h"
#include "tether/providers/kubernetes.h"
#include "tether/providers/modal.h"
#include "tether/providers/runloop.h"

namespace asio = boost::asio;

// A factory given no sandbox must refuse with kInvalidArgument.
template <typename Result>
bool Refused(const char* name, const Result& r) {
  if (r.ok() || r.status().code() != absl::StatusCode::kInvalidArgument) {
    std::fprintf(stderr, "embed_native: %s: expected INVALID_ARGUMENT, got %s\n", name,
                 r.ok() ? "a transport" : r.status().ToString().c_str());
    return false;
  }
  return true;
}

asio::awaitable<int> Main(std::string dead_socket) {
  auto ex = co_await asio::this_coro::executor;
  bool ok = Refused("docker", tether::MakeDockerTransport(ex, {}));
  ok &= Refused("e2b", tether::MakeE2bTransport(ex, {}));
  ok &= Refused("kubernetes", tether::MakeKubernetesTransport(ex, {}));
  ok &= Refused("boat", tether::MakeBoatTransport(ex, {}));
  ok &= Refused("runloop", tether::MakeRunloopTransport(ex, {}));
  ok &= Refused("daytona", tether::MakeDaytonaTransport(ex, {}));
  ok &= Refused("modal", tether::MakeModalTransport(ex, {}));
  if (!ok) co_return 10;
  for (const char* name : {"local", "command", "docker", "e2b", "kubernetes", "boat", "runloop", "daytona", "modal"}) {
    if (!tether::FindProvider(name).ok()) {
      std::fprintf(stderr, "embed_native: the registry has no %s\n", name);
      co_return 11;
    }
  }
  auto t = tether::MakeProviderTransport(ex, "docker", {{"--container", "c"}, {"--endpoint", "unix://" + dead_socket}});
  if (!t.ok()) {
    std::fprintf(stderr, "embed_native: docker: %s\n", t.status().ToString().c_str());
    co_return 12;
  }
  auto probe = co_await (*t)->Probe();
  if (probe.ok() || probe.status().code() != absl::StatusCode::kUnavailable ||
      std::string(probe.status().message()).find(dead_socket) == std::string::npos) {
    std::fprintf(stderr, "embed_native: probe: expected UNAVAILABLE naming %s, got %s\n", dead_socket.c_str(),
                 probe.ok() ? "OK" : probe.status().ToString().c_str());
    co_return 13;
  }
  std::puts("embed_native: ok");
  co_return 0;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: embed_native DEAD_SOCKET_PATH\n");
    return 2;
  }
  asio::io_context io;
  int rc = 1;
  asio::co_spawn(io, Main(argv[1]), [&](std::exception_ptr ex, int r) {
    if (ex) std::rethrow_exception(ex);
    rc = r;
  });
  io.run();
  return rc;
}
