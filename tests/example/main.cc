// Runs `sh -c ...` in a local sandbox through the embedded library and checks
// the exact bytes and exit status. Prints "embed: ok" on success.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <cstdio>
#include <string>

#include "tether/local_transport.h"
#include "tether/process.h"

namespace asio = boost::asio;

asio::awaitable<int> Main() {
  auto transport = tether::MakeLocalTransport(co_await asio::this_coro::executor);
  if (!transport.ok()) co_return 10;
  tether::StartOptions opts;
  opts.argv = {"sh", "-c", "cat; printf 'E' >&2; exit 5"};
  opts.stdin_pipe = true;
  opts.output_format = tether::OutputFormat::kBytes;  // exact bytes (the default is text)
  auto p = co_await tether::Process::Start(**transport, opts);
  if (!p.ok()) {
    std::fprintf(stderr, "embed: start: %s\n", std::string(p.status().message()).c_str());
    co_return 11;
  }
  const std::string in("\0\xff" "embedded", 10);
  if (!(co_await (*p)->Write(in)).ok() || !(co_await (*p)->CloseStdin()).ok()) co_return 12;
  std::string out, err;
  while (true) {
    auto c = co_await (*p)->Read();
    if (!c.ok()) co_return 13;
    if (!*c) break;
    ((*c)->stream == tether::StreamId::kStdout ? out : err) += (*c)->bytes;
  }
  auto e = co_await (*p)->Wait();
  if (!e.ok() || e->code != 5 || out != in || err != "E") co_return 14;
  std::puts("embed: ok");
  co_return 0;
}

int main() {
  asio::io_context io;
  int rc = 1;
  asio::co_spawn(io, Main(), [&](std::exception_ptr ex, int r) {
    if (ex) std::rethrow_exception(ex);
    rc = r;
  });
  io.run();
  return rc;
}
