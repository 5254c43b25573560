// tether_start_runner: the C++ library's half of the start-latency
// benchmark (start_latency.py). Starts `echo hi` through tether::Process on
// one provider, one job per "run" line read on stdin, and prints one JSON
// line per job: ms to the first stdout byte and to the exit status.
//
//   tether_start_runner warm|cold PROVIDER [--flag value]...
//     warm  one Transport made before the first job and kept (as an agent
//           runtime keeps its sandbox handle); the first job is its cold start
//     cold  a new Transport for every job (its control-plane lookup, its
//           connections and its probe are paid again)
//
// The provider flags are the CLI's (`--sandbox ID --endpoint URL ...`).
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tether/process.h"
#include "tether/providers.h"

namespace {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

std::string JsonError(std::string_view what, const absl::Status& st) {
  std::string msg = std::string(what) + ": " + st.ToString();
  std::string out;
  for (char c : msg) {
    if (c == '"' || c == '\\') out += '\\';
    out += (static_cast<unsigned char>(c) < 0x20) ? ' ' : c;
  }
  return absl::StrCat("{\"error\": \"", out, "\"}");
}

asio::awaitable<std::string> Job(std::shared_ptr<tether::Transport> transport) {
  const Clock::time_point t0 = Clock::now();
  tether::StartOptions o;
  o.argv = {"echo", "hi"};
  absl::StatusOr<std::unique_ptr<tether::Process>> p = co_await tether::Process::Start(*transport, o);
  if (!p.ok()) co_return JsonError("start", p.status());
  std::optional<Clock::time_point> first;
  while (true) {
    absl::StatusOr<std::optional<tether::OutputChunk>> c = co_await (*p)->Read();
    if (!c.ok()) co_return JsonError("read", c.status());
    if (!c->has_value()) break;
    if (!first && (*c)->stream == tether::StreamId::kStdout && !(*c)->bytes.empty()) first = Clock::now();
  }
  absl::StatusOr<tether::ExitStatus> st = co_await (*p)->Wait();
  const Clock::time_point end = Clock::now();
  if (!st.ok()) co_return JsonError("wait", st.status());
  if (st->code != 0) co_return JsonError("exit", absl::InternalError("echo hi did not exit 0"));
  if (!first) co_return JsonError("output", absl::InternalError("echo hi printed nothing"));
  co_return absl::StrFormat("{\"first\": %.3f, \"total\": %.3f}", Ms(*first - t0), Ms(end - t0));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || (std::string(argv[1]) != "warm" && std::string(argv[1]) != "cold") || (argc - 3) % 2 != 0) {
    std::fprintf(stderr, "usage: tether_start_runner warm|cold PROVIDER [--flag value]...\n");
    return 2;
  }
  const bool cold = std::string(argv[1]) == "cold";
  const std::string provider = argv[2];
  tether::ProviderFlags flags;
  for (int i = 3; i + 1 < argc; i += 2) flags.push_back({argv[i], argv[i + 1]});
  asio::io_context io;
  auto guard = asio::make_work_guard(io);
  std::thread loop([&io] { io.run(); });
  // The transport lives on the loop's thread: made, used and dropped there.
  std::shared_ptr<tether::Transport> transport;
  const auto on_loop = [&io](auto fn) { return asio::co_spawn(io, fn, asio::use_future).get(); };
  const auto make = [&]() -> asio::awaitable<std::string> {
    absl::StatusOr<std::shared_ptr<tether::Transport>> t =
        tether::MakeProviderTransport(io.get_executor(), provider, flags);
    if (!t.ok()) co_return JsonError("transport", t.status());
    transport = *std::move(t);
    co_return std::string();
  };
  int rc = 0;
  if (std::string err = on_loop(make); !err.empty()) {
    std::fprintf(stderr, "tether_start_runner: %s\n", err.c_str());
    rc = 2;
  }
  std::string line;
  while (rc == 0 && std::getline(std::cin, line)) {
    if (line != "run") continue;
    if (cold) {
      if (std::string err = on_loop(make); !err.empty()) {
        std::cout << err << std::endl;
        continue;
      }
    }
    std::cout << on_loop([&]() { return Job(transport); }) << std::endl;
  }
  on_loop([&]() -> asio::awaitable<std::string> {
    transport.reset();
    co_return std::string();
  });
  guard.reset();
  loop.join();
  return rc;
}
