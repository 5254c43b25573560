// Soak (not in CI): for --minutes M (default 30), --workers W (default 8)
// loops at once start a process that streams stdin back, write and read a
// random amount, then detach and reopen it from its reference, and end it by
// closing stdin or by terminate. Every byte is checked. Our RSS and open fd
// count are sampled every 10 s; the run fails if a check fails, and prints
// start, peak and end figures (they must stay flat: no growth with work).
#include <stdlib.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <cstdio>
#include <filesystem>
#include <random>

#include "absl/strings/str_cat.h"
#include "tether/local_transport.h"
#include "tether/process.h"
#include "tests/host/proc_util.h"

namespace {

namespace asio = boost::asio;
using asio::awaitable;
using namespace tether::testing;

struct Soak {
  std::chrono::steady_clock::time_point end;
  std::uint64_t processes = 0, reopens = 0, terminates = 0, bytes = 0, failures = 0;
};

void Fail(Soak& s, const std::string& what) {
  ++s.failures;
  std::printf("FAIL: %s\n", what.c_str());
  std::fflush(stdout);
}

// Reads stdout until `want` bytes arrived (or the end); checks them.
awaitable<bool> ReadExpect(tether::Process& p, const std::string& sent, std::uint64_t& have, std::uint64_t want,
                           Soak& s) {
  while (have < want) {
    auto c = co_await p.Read();
    if (!c.ok() || !*c) co_return false;
    if ((*c)->offset != have || sent.compare(have, (*c)->bytes.size(), (*c)->bytes) != 0) {
      Fail(s, "wrong bytes");
      co_return false;
    }
    have += (*c)->bytes.size();
    s.bytes += (*c)->bytes.size();
  }
  co_return true;
}

awaitable<void> Worker(tether::Transport& t, Soak& s, std::uint64_t id) {
  std::mt19937_64 rng(id);
  while (std::chrono::steady_clock::now() < s.end) {
    tether::StartOptions o;
    o.argv.push_back("cat");
    o.stdin_pipe = true;
    o.output_mode = tether::OutputMode::kStream;
    o.output_format = tether::OutputFormat::kBytes;
    auto p = co_await tether::Process::Start(t, std::move(o));
    if (!p.ok()) {
      Fail(s, "start: " + p.status().ToString());
      continue;
    }
    ++s.processes;
    std::string sent(1 + rng() % 65536, '\0');
    for (char& c : sent) c = static_cast<char>(rng());
    const std::size_t half = sent.size() / 2;
    std::uint64_t have = 0;
    for (std::size_t off = 0; off < half; off += tether::kMaxWriteBytes) {
      (void)co_await (*p)->Write(std::string_view(sent).substr(off, std::min(tether::kMaxWriteBytes, half - off)));
    }
    if (!co_await ReadExpect(**p, sent, have, half, s)) Fail(s, "read before detach");
    // Detach and reopen from the reference (output resumes where we stopped).
    auto ref = (*p)->Reference();
    (void)co_await (*p)->Disconnect();
    p->reset();
    if (!ref.ok()) {
      Fail(s, "reference: " + ref.status().ToString());
      continue;
    }
    auto q = co_await tether::Process::Reopen(t, *ref);
    if (!q.ok()) {
      Fail(s, "reopen: " + q.status().ToString());
      continue;
    }
    ++s.reopens;
    for (std::size_t off = half; off < sent.size(); off += tether::kMaxWriteBytes) {
      (void)co_await (*q)->Write(std::string_view(sent).substr(off, std::min(tether::kMaxWriteBytes, sent.size() - off)));
    }
    if (!co_await ReadExpect(**q, sent, have, sent.size(), s)) Fail(s, "read after reopen");
    if (rng() % 2 == 0) {
      (void)co_await (*q)->CloseStdin();
      auto e = co_await (*q)->Wait();
      if (!e.ok() || e->code != 0) Fail(s, "exit after EOF");
    } else {
      ++s.terminates;
      (void)co_await (*q)->Terminate(1000);
      auto e = co_await (*q)->Wait();
      if (!e.ok() || !e->signal) Fail(s, "exit after terminate");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  double minutes = 30;
  int workers = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--minutes") minutes = std::atof(argv[i + 1]);
    if (std::string(argv[i]) == "--workers") workers = std::atoi(argv[i + 1]);
  }
  char tmpl[] = "/tmp/tether-soak-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return 2;
  Soak s;
  const auto start = std::chrono::steady_clock::now();
  s.end = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(minutes * 60));
  asio::io_context io;
  auto local = tether::MakeLocalTransport(io.get_executor(), tether::LocalOptions{tmpl});
  if (!local.ok()) return 2;
  long rss0 = -1, rss_peak = 0;
  int fds0 = -1, fds_peak = 0;
  asio::steady_timer sampler(io);
  std::function<void()> sample = [&] {
    const long rss = SelfRssKib();
    const int fds = SelfOpenFds();
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (rss0 < 0 && s.processes >= 50) rss0 = rss, fds0 = fds;  // after warm-up (caches, the supervisor bytes)
    rss_peak = std::max(rss_peak, rss);
    fds_peak = std::max(fds_peak, fds);
    // Heap in use tells a leak (it grows) from allocator fragmentation
    // (RSS creeps, the heap does not).
    std::printf("soak t=%5.0fs processes=%llu reopens=%llu terminates=%llu bytes=%llu rss=%ld KiB heap=%zu KiB fds=%d\n",
                t, static_cast<unsigned long long>(s.processes), static_cast<unsigned long long>(s.reopens),
                static_cast<unsigned long long>(s.terminates), static_cast<unsigned long long>(s.bytes), rss,
                HeapInUseBytes() / 1024, fds);
    std::fflush(stdout);
    if (std::chrono::steady_clock::now() >= s.end) return;
    sampler.expires_after(std::chrono::seconds(10));
    sampler.async_wait([&](boost::system::error_code ec) { if (!ec) sample(); });
  };
  sample();
  for (int i = 0; i < workers; ++i) {
    asio::co_spawn(io, Worker(**local, s, static_cast<std::uint64_t>(i) + 1), [](std::exception_ptr e) {
      if (e) std::rethrow_exception(e);
    });
  }
  io.run();
  const long rss1 = SelfRssKib();
  const int fds1 = SelfOpenFds();
  std::printf("soak: %.1f min, %d workers: %llu processes, %llu reopens, %llu terminates, %llu bytes checked, "
              "%llu failures; RSS %ld KiB after warm-up -> %ld KiB at end (peak %ld); fds %d -> %d (peak %d)\n",
              minutes, workers, static_cast<unsigned long long>(s.processes), static_cast<unsigned long long>(s.reopens),
              static_cast<unsigned long long>(s.terminates), static_cast<unsigned long long>(s.bytes),
              static_cast<unsigned long long>(s.failures), rss0, rss1, rss_peak, fds0, fds1, fds_peak);
  std::filesystem::remove_all(tmpl);
  return s.failures == 0 && fds1 <= fds0 ? 0 : 1;
}
