// tether_bench: tether against the physical limit (raw pipes) and against
// what users would use instead (plain ssh), side by side in the same run.
// See tests/bench/README.md. Usage: tether_bench [--reps N] [--only NAME]
//   [--ssh 'ssh -T -p PORT user@127.0.0.1'] [--bytes N]
#include <sys/resource.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <filesystem>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "host/local_transport.h"
#include "host/process.h"
#include "tests/bench/bench_util.h"

namespace tether::bench {
namespace {

namespace asio = boost::asio;
using asio::awaitable;

struct Args {
  int reps = 5;
  std::string only;
  std::string ssh;
  std::uint64_t bytes = 1ull << 30;
  std::size_t window = 0;
};
Args g_args;

std::string g_root;  // the local sandbox of this run

// Runs `body` on a fresh io_context with the local transport.
template <typename F>
void RunLocal(F body) {
  asio::io_context io;
  auto t = MakeLocalTransport(io.get_executor(), {g_root});
  if (!t.ok()) Die(std::string(t.status().message()));
  asio::co_spawn(io, body(**t), [](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  });
  io.run();
}

std::vector<std::string> Argv(std::initializer_list<const char*> a) { return {a.begin(), a.end()}; }

awaitable<void> ReadToEnd(Transport& t, std::vector<std::string> argv, std::size_t window, std::uint64_t* got) {
  StartOptions o;
  o.argv = std::move(argv);
  o.output_mode = OutputMode::kStream;
  o.output_format = OutputFormat::kBytes;
  if (window) o.output_window_bytes = window;
  auto p = co_await Process::Start(t, std::move(o));
  if (!p.ok()) Die(absl::StrCat("start: ", p.status().ToString()));
  while (true) {
    auto c = co_await (*p)->Read();
    if (!c.ok()) Die(absl::StrCat("read: ", c.status().ToString()));
    if (!*c) break;
    *got += (*c)->bytes.size();
  }
  auto st = co_await (*p)->Wait();
  if (!st.ok() || st->ShellStatus() != 0) Die("wait failed");
}

double TetherThroughput(std::vector<std::string> argv, std::size_t window, std::uint64_t expect) {
  std::uint64_t got = 0;
  const double t0 = Now();
  RunLocal([&](Transport& t) { return ReadToEnd(t, argv, window, &got); });
  const double dt = Now() - t0;
  if (got != expect) Die(absl::StrCat("tether delivered ", got, " of ", expect, " bytes"));
  return dt;
}

double RawThroughput(const std::vector<std::string>& argv, std::uint64_t expect) {
  const double t0 = Now();
  RawChild c = RawChild::Spawn(argv, false);
  const std::uint64_t got = DrainFd(c.out);
  c.Wait();
  const double dt = Now() - t0;
  if (got != expect) Die(absl::StrCat("raw pipe delivered ", got, " of ", expect, " bytes"));
  return dt;
}

struct Pair {
  std::vector<double> base, ours;
};

// Alternates baseline and tether `reps` times.
Pair SideBySide(const std::function<double()>& base, const std::function<double()>& ours) {
  Pair p;
  for (int i = 0; i < g_args.reps; ++i) {
    p.base.push_back(base());
    p.ours.push_back(ours());
  }
  return p;
}

void ThroughputLocal() {
  const std::uint64_t n = g_args.bytes;
  std::vector<std::string> a = {"head", "-c", std::to_string(n), "/dev/zero"};
  for (std::size_t w : {std::size_t{0}, std::size_t{1} << 20, std::size_t{4} << 20}) {
    Pair p = SideBySide([&] { return RawThroughput(a, n); }, [&] { return TetherThroughput(a, w, n); });
    const double b = Median(p.base), o = Median(p.ours);
    std::printf("throughput local window=%zu: raw %.0f MB/s, tether %.0f MB/s, ratio %.2fx\n", w,
                n / b / 1e6, n / o / 1e6, b / o);
  }
}

}  // namespace
}  // namespace tether::bench

int main(int argc, char** argv) {
  using namespace tether::bench;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--reps") g_args.reps = std::stoi(next());
    else if (a == "--only") g_args.only = next();
    else if (a == "--ssh") g_args.ssh = next();
    else if (a == "--bytes") g_args.bytes = std::stoull(next());
    else Die("unknown option " + a);
  }
  ::signal(SIGPIPE, SIG_IGN);
  char tmpl[] = "/tmp/tether-bench-XXXXXX";
  if (!::mkdtemp(tmpl)) Die("mkdtemp");
  g_root = tmpl;
  ThroughputLocal();
  std::error_code ec;
  std::filesystem::remove_all(g_root, ec);
}
