// tether_bench: tether against the physical limit (raw pipes on this
// machine) and against what users would use instead (plain ssh), measured
// side by side in the same run: each figure is the median of --reps runs
// that alternate baseline and tether, and is reported as a ratio, because
// this machine is shared and noisy. Never part of the test suite.
//
//   tether_bench [--reps N] [--bytes N] [--only SUBSTRING] [--ssh-window BYTES]
//                [--ssh 'ssh -T ... user@127.0.0.1']   (tests/bench/run.sh)
//   tether_bench --scale DIR [--scale-n 10,100,1000,2000] [--scale-rate BYTES/MS (default 1024/1000)]
//                [--scale-window SECONDS (default 3: how long CPU is measured)]
//                (only the scale benchmark, tests/bench/scale.h; writes DIR/scale.md, DIR/scale.svg)
//
// Prints a Markdown table: benchmark, baseline, tether, ratio, target.
#include <sys/resource.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/as_tuple.hpp>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "tether/command_transport.h"
#include "tether/local_transport.h"
#include "tether/process.h"
#include "tether/supervisor_binary.h"
#include "protocol/armor.h"
#include "protocol/envelope.h"
#include "tests/bench/bench_util.h"
#include "tests/bench/scale.h"
#include "tests/host/proc_util.h"

namespace tether::bench {
namespace {

namespace asio = boost::asio;
using asio::awaitable;

struct Args {
  int reps = 5;
  std::uint64_t bytes = 1ull << 30;
  std::string only;
  std::string ssh;
  std::size_t ssh_window = 1 << 20;
};
Args g_args;
std::string g_work;  // scratch directory of this run

// ------------------------------------------------------------------ output

struct Row {
  std::string name, baseline_name, base, ours, ratio, target;
  std::string cpu = "";  // machine CPU seconds per GB, baseline / tether (throughput rows)
};
std::vector<Row> g_rows;

void Report(Row r) {
  std::fprintf(stderr, "  %-44s %-18s %14s %14s %8s  %-24s %s\n", r.name.c_str(), r.baseline_name.c_str(),
               r.base.c_str(), r.ours.c_str(), r.ratio.c_str(), r.target.c_str(), r.cpu.c_str());
  g_rows.push_back(std::move(r));
}

std::string Fmt(const char* f, double v) { return absl::StrFormat(f, v); }
std::string MBps(std::uint64_t bytes, double secs) { return Fmt("%.0f MB/s", bytes / secs / 1e6); }
std::string Us(double secs) { return Fmt("%.1f us", secs * 1e6); }
std::string Ms(double secs) { return Fmt("%.2f ms", secs * 1e3); }
std::string KiB(double bytes) { return Fmt("%.0f KiB", bytes / 1024); }
std::string X(double r) { return Fmt("%.2fx", r); }

bool Selected(const std::string& name) { return g_args.only.empty() || name.find(g_args.only) != std::string::npos; }

// ------------------------------------------------------------- transports

enum class Provider { kLocal, kText, kSsh };

std::shared_ptr<Transport> MakeTransport(asio::io_context& io, Provider p, const std::string& root) {
  absl::StatusOr<std::shared_ptr<Transport>> t;
  if (p == Provider::kLocal) {
    t = MakeLocalTransport(io.get_executor(), {root});
  } else {
    CommandOptions o;
    if (p == Provider::kText) {
      o.prefix = {"sh", "-c"};
      o.tunnel = TunnelMode::kText;
    } else {
      o.prefix = absl::StrSplit(g_args.ssh, ' ', absl::SkipEmpty());
    }
    t = MakeCommandTransport(io.get_executor(), std::move(o));
  }
  if (!t.ok()) Die(std::string(t.status().message()));
  return *std::move(t);
}

// Runs body(transport) to completion on a fresh io_context.
template <typename F>
void Run(Provider p, F body, const std::string& root = g_work + "/sandbox") {
  asio::io_context io;
  std::shared_ptr<Transport> t = MakeTransport(io, p, root);
  asio::co_spawn(io, body(*t), [](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  });
  io.run();
}

StartOptions Options(std::vector<std::string> argv, std::size_t window = 0, bool stdin_pipe = false) {
  StartOptions o;
  o.argv = std::move(argv);
  o.output_mode = OutputMode::kStream;
  o.output_format = OutputFormat::kBytes;
  o.stdin_pipe = stdin_pipe;
  if (window) o.output_window_bytes = window;
  return o;
}

awaitable<std::unique_ptr<Process>> MustStart(Transport& t, StartOptions o) {
  auto p = co_await Process::Start(t, std::move(o));
  if (!p.ok()) Die(absl::StrCat("start: ", p.status().ToString()));
  co_return *std::move(p);
}

// Reads everything; returns the byte count. `per_chunk` runs after each.
awaitable<std::uint64_t> Drain(Process& p, std::function<void()> per_chunk = {}) {
  std::uint64_t got = 0;
  while (true) {
    auto c = co_await p.Read();
    if (!c.ok()) Die(absl::StrCat("read: ", c.status().ToString()));
    if (!*c) break;
    got += (*c)->bytes.size();
    if (per_chunk) per_chunk();
  }
  auto st = co_await p.Wait();
  if (!st.ok() || st->ShellStatus() != 0) Die("the benchmark's process failed");
  co_return got;
}

// ------------------------------------------------------------- throughput

// g++ 12 rejects braced lists of strings inside coroutines.
template <typename... A>
std::vector<std::string> V(A&&... a) {
  return std::vector<std::string>{std::string(std::forward<A>(a))...};
}

// `argv` prints exactly `bytes`; seconds until the application has them all.
double TetherStream(Provider prov, std::vector<std::string> argv, std::size_t window, std::uint64_t bytes) {
  std::uint64_t got = 0;
  const double t0 = Now();
  Run(prov, [&](Transport& t) -> awaitable<void> {
    auto p = co_await MustStart(t, Options(argv, window));
    got = co_await Drain(*p);
  });
  const double dt = Now() - t0;
  if (got != bytes) Die(absl::StrCat("tether delivered ", got, " of ", bytes, " bytes"));
  return dt;
}

double RawStream(const std::vector<std::string>& argv, std::uint64_t bytes) {
  const double t0 = Now();
  RawChild c = RawChild::Spawn(argv, false);
  const std::uint64_t got = DrainFd(c.out);
  c.Wait();
  const double dt = Now() - t0;
  if (got != bytes) Die(absl::StrCat("baseline delivered ", got, " of ", bytes, " bytes"));
  return dt;
}

std::vector<std::string> SshArgv(std::vector<std::string> remote) {
  std::vector<std::string> a = absl::StrSplit(g_args.ssh, ' ', absl::SkipEmpty());
  std::string line;
  for (const std::string& r : remote) absl::StrAppend(&line, line.empty() ? "" : " ", ShellQuote(r));
  a.push_back(line);
  return a;
}

// CPU seconds (user + system) used by the whole machine so far: on a
// machine whose cores are all busy, CPU per byte is what bounds throughput.
double MachineCpuSeconds() {
  std::ifstream f("/proc/stat");
  std::string cpu;
  std::uint64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0;
  f >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq;
  return double(user + nice + system + irq + softirq) / double(::sysconf(_SC_CLK_TCK));
}

// Medians of alternating runs; also the median machine CPU of each run.
struct Medians {
  double base, ours, base_cpu, ours_cpu;
};
Medians SideBySideCpu(const std::function<double()>& base, const std::function<double()>& ours, int reps = 0) {
  std::vector<double> b, o, bc, oc;
  for (int i = 0; i < (reps ? reps : g_args.reps); ++i) {
    double c0 = MachineCpuSeconds();
    b.push_back(base());
    double c1 = MachineCpuSeconds();
    o.push_back(ours());
    double c2 = MachineCpuSeconds();
    bc.push_back(c1 - c0);
    oc.push_back(c2 - c1);
  }
  return {Median(b), Median(o), Median(bc), Median(oc)};
}

std::pair<double, double> SideBySide(const std::function<double()>& base, const std::function<double()>& ours,
                                     int reps = 0) {
  const Medians m = SideBySideCpu(base, ours, reps);
  return {m.base, m.ours};
}

void ThroughputRow(const std::string& name, const std::string& baseline_name, const std::function<double()>& base,
                   const std::function<double()>& ours, std::uint64_t bytes, const std::string& target,
                   int reps = 0) {
  if (!Selected(name)) return;
  const Medians m = SideBySideCpu(base, ours, reps);
  Report({name, baseline_name, MBps(bytes, m.base), MBps(bytes, m.ours), X(m.base / m.ours), target,
          Fmt("%.2f", m.base_cpu / (bytes / 1e9)) + " / " + Fmt("%.2f", m.ours_cpu / (bytes / 1e9))});
}

// A file of random bytes that `cat` repeats to make `bytes` of output.
std::vector<std::string> RandomSource(std::uint64_t bytes) {
  const std::string path = g_work + "/random.bin";
  constexpr std::size_t kFile = 64 << 20;
  if (!std::filesystem::exists(path)) {
    std::mt19937_64 rng(1);
    std::string s(kFile, '\0');
    for (std::size_t i = 0; i + 8 <= s.size(); i += 8) {
      const std::uint64_t v = rng();
      std::memcpy(&s[i], &v, 8);
    }
    std::ofstream(path, std::ios::binary).write(s.data(), static_cast<std::streamsize>(s.size()));
  }
  std::vector<std::string> a = {"cat"};
  for (std::uint64_t n = 0; n < bytes; n += kFile) a.push_back(path);
  return a;
}

void Throughput() {
  // (Spares the random file; --only may name one throughput row.)
  if (!Selected("throughput") && g_args.only.find("throughput") == std::string::npos) return;
  const std::uint64_t n = g_args.bytes;
  const auto zeros = std::vector<std::string>{"head", "-c", std::to_string(n), "/dev/zero"};
  const auto random = RandomSource(n);
  const std::uint64_t rn = (random.size() - 1) * (64ull << 20);
  const auto raw = [](const std::vector<std::string>& a, std::uint64_t b) { return [a, b] { return RawStream(a, b); }; };
  ThroughputRow("throughput local, zeros, 64 KiB window (default)", "raw pipe", raw(zeros, n),
                [&] { return TetherStream(Provider::kLocal, zeros, 0, n); }, n, "(see 1 MiB)");
  ThroughputRow("throughput local, zeros, 1 MiB window (CLI)", "raw pipe", raw(zeros, n),
                [&] { return TetherStream(Provider::kLocal, zeros, 1 << 20, n); }, n, ">= 0.5x");
  ThroughputRow("throughput local, random, 1 MiB window", "raw pipe", raw(random, rn),
                [&] { return TetherStream(Provider::kLocal, random, 1 << 20, rn); }, rn, ">= 0.5x");
  const std::uint64_t tn = n / 4;  // text is slower: a quarter of the bytes
  const auto tzeros = std::vector<std::string>{"head", "-c", std::to_string(tn), "/dev/zero"};
  const auto trandom = RandomSource(tn);
  const std::uint64_t trn = (trandom.size() - 1) * (64ull << 20);
  ThroughputRow("throughput text armor (sh -c), zeros, 1 MiB", "raw pipe", raw(tzeros, tn),
                [&] { return TetherStream(Provider::kText, tzeros, 1 << 20, tn); }, tn, "(report)");
  ThroughputRow("throughput text armor (sh -c), random, 1 MiB", "raw pipe", raw(trandom, trn),
                [&] { return TetherStream(Provider::kText, trandom, 1 << 20, trn); }, trn, "(report)");
  if (!g_args.ssh.empty()) {
    ThroughputRow("throughput ssh, zeros, 1 MiB window", "plain ssh", raw(SshArgv(zeros), n),
                  [&] { return TetherStream(Provider::kSsh, zeros, g_args.ssh_window, n); }, n, ">= 0.9x");
    ThroughputRow("throughput ssh, random, 1 MiB window", "plain ssh", raw(SshArgv(random), rn),
                  [&] { return TetherStream(Provider::kSsh, random, g_args.ssh_window, rn); }, rn, ">= 0.9x");
  }
}

// The armor's size overhead on the wire, before compression: armored line
// bytes per frame byte, for a full output frame of random data.
void ArmorOverhead() {
  const std::string name = "armor overhead, 16 KiB random output frame";
  if (!Selected(name)) return;
  std::string data(16 << 10, '\0');
  std::mt19937 rng(2);
  for (char& c : data) c = static_cast<char>(rng());
  wire::Envelope env;
  env.set_generation(1);
  env.mutable_output()->set_stream(wire::STREAM_STDOUT);
  env.mutable_output()->set_offset(123456789);
  env.mutable_output()->set_data(data);
  const std::string frame = protocol::EncodeEnvelope(env);
  const std::string line = protocol::ArmorLine(frame, protocol::ArmorDirection::kToHost);
  Report({name, "frame bytes", absl::StrCat(frame.size(), " B"), absl::StrCat(line.size(), " B"),
          Fmt("+%.1f%%", 100.0 * (double(line.size()) / frame.size() - 1)), "< +30%"});
}

// -------------------------------------------------------------- round trip

constexpr int kRoundTrips = 2000;

double RawRoundTrip(const std::vector<std::string>& argv, int n) {
  RawChild c = RawChild::Spawn(argv, true);
  char b = 'x';
  // One warm-up exchange (ssh's session setup is not a round trip).
  auto once = [&] {
    if (::write(c.in, &b, 1) != 1 || ::read(c.out, &b, 1) != 1) Die("raw round trip failed");
  };
  once();
  const double t0 = Now();
  for (int i = 0; i < n; ++i) once();
  const double dt = (Now() - t0) / n;
  c.Wait();
  return dt;
}

double TetherRoundTrip(Provider prov, int n) {
  double dt = 0;
  Run(prov, [&](Transport& t) -> awaitable<void> {
    auto p = co_await MustStart(t, Options(V("cat"), 0, true));
    auto once = [&]() -> awaitable<void> {
      if (!(co_await p->Write("x")).ok()) Die("write failed");
      auto c = co_await p->Read();
      if (!c.ok() || !*c || (*c)->bytes != "x") Die("round trip read failed");
    };
    co_await once();
    const double t0 = Now();
    for (int i = 0; i < n; ++i) co_await once();
    dt = (Now() - t0) / n;
    co_await p->CloseStdin();
    co_await Drain(*p);
  });
  return dt;
}

void RoundTrip() {
  const std::string name = "round trip, 1 byte through cat, local";
  if (Selected(name)) {
    auto [b, o] = SideBySide([] { return RawRoundTrip({"cat"}, kRoundTrips); },
                             [] { return TetherRoundTrip(Provider::kLocal, kRoundTrips); });
    Report({name, "raw pipe pair", Us(b), Us(o), X(o / b), "<= 4x"});
  }
  const std::string sname = "round trip, 1 byte through cat, ssh";
  if (!g_args.ssh.empty() && Selected(sname)) {
    auto [b, o] = SideBySide([] { return RawRoundTrip(SshArgv({"cat"}), kRoundTrips / 4); },
                             [] { return TetherRoundTrip(Provider::kSsh, kRoundTrips / 4); });
    Report({sname, "plain ssh", Us(b), Us(o), X(o / b), "(report)"});
  }
}

// ----------------------------------------------------------- start latency

// fork+exec of `argv` (echo hi, locally or through ssh) to its first byte.
double RawFirstByte(const std::vector<std::string>& argv) {
  const double t0 = Now();
  RawChild c = RawChild::Spawn(argv, false);
  char b;
  if (::read(c.out, &b, 1) != 1) Die("echo printed nothing");
  const double dt = Now() - t0;
  c.Wait();
  return dt;
}

// Start() to the first output byte of `echo`; `root` empty: the shared
// sandbox (supervisor in place), else a fresh one (cold upload).
double TetherFirstByte(Provider prov, const std::string& root) {
  double dt = 0;
  Run(
      prov,
      [&](Transport& t) -> awaitable<void> {
        const double t0 = Now();
        auto p = co_await MustStart(t, Options(V("echo", "hi")));
        auto c = co_await p->Read();
        dt = Now() - t0;
        if (!c.ok() || !*c) Die("echo printed nothing");
        co_await Drain(*p);
      },
      root.empty() ? g_work + "/sandbox" : root);
  return dt;
}

void StartLatency() {
  const std::string warm = "start to first byte of echo, local, installed";
  if (Selected(warm)) {
    TetherFirstByte(Provider::kLocal, "");  // installs
    auto [b, o] = SideBySide([] { return RawFirstByte({"echo", "hi"}); },
                             [] { return TetherFirstByte(Provider::kLocal, ""); }, 20);
    Report({warm, "fork+exec, pipe", Ms(b), Ms(o), X(o / b), "< 10 ms"});
  }
  const std::string cold = "start to first byte of echo, local, cold upload";
  if (Selected(cold)) {
    int i = 0;
    auto [b, o] = SideBySide([] { return RawFirstByte({"echo", "hi"}); }, [&] {
      return TetherFirstByte(Provider::kLocal, absl::StrCat(g_work, "/cold-", i++));
    });
    Report({cold, "fork+exec, pipe", Ms(b), Ms(o), X(o / b), "(report)"});
  }
  const std::string ssh = "start to first byte of echo, ssh, installed";
  if (!g_args.ssh.empty() && Selected(ssh)) {
    TetherFirstByte(Provider::kSsh, "");
    auto [b, o] = SideBySide(
        [] { return RawFirstByte(SshArgv({"echo", "hi"})); },
        [] { return TetherFirstByte(Provider::kSsh, ""); }, 10);
    Report({ssh, "plain ssh", Ms(b), Ms(o), X(o / b), "(report)"});
  }
  const std::string ssh_cold = "start to first byte of echo, ssh, cold upload";
  if (!g_args.ssh.empty() && Selected(ssh_cold)) {
    auto [b, o] = SideBySide(
        [] { return RawFirstByte(SshArgv({"echo", "hi"})); },
        [] {
          // Remove the installed supervisor first (not timed).
          RawChild rm = RawChild::Spawn(
              SshArgv({"sh", "-c", "rm -f \"${TMPDIR:-/tmp}/tether-$(id -u)/bin/\"tether-supervisor-*"}), false);
          DrainFd(rm.out);
          rm.Wait();
          return TetherFirstByte(Provider::kSsh, "");
        },
        5);
    Report({ssh_cold, "plain ssh", Ms(b), Ms(o), X(o / b), "(report)"});
  }
}

// ----------------------------------------------------------------- fan-out

constexpr int kFanOut = 200;

double RawFanOut(std::uint64_t each) {
  asio::io_context io;
  const double t0 = Now();
  std::vector<RawChild> kids;
  std::uint64_t total = 0;
  for (int i = 0; i < kFanOut; ++i) {
    kids.push_back(RawChild::Spawn({"head", "-c", std::to_string(each), "/dev/zero"}, false));
    asio::co_spawn(io, [fd = kids.back().out, &io, &total]() -> awaitable<void> {
      asio::posix::stream_descriptor d(io, ::dup(fd));
      std::vector<char> buf(64 << 10);
      while (true) {
        auto [ec, n] = co_await d.async_read_some(asio::buffer(buf), asio::as_tuple(asio::use_awaitable));
        total += n;
        if (ec) break;
      }
    }, asio::detached);
  }
  io.run();
  for (RawChild& k : kids) k.Wait();
  if (total != each * kFanOut) Die("raw fan-out lost bytes");
  return Now() - t0;
}

double TetherFanOut(std::uint64_t each) {
  std::uint64_t total = 0;
  const double t0 = Now();
  Run(Provider::kLocal, [&](Transport& t) -> awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    int left = kFanOut;
    asio::steady_timer done(ex, std::chrono::steady_clock::time_point::max());
    for (int i = 0; i < kFanOut; ++i) {
      asio::co_spawn(ex, [&t, &total, &left, &done, each]() -> awaitable<void> {
        auto p = co_await MustStart(t, Options(V("head", "-c", std::to_string(each), "/dev/zero")));
        total += co_await Drain(*p);
        if (--left == 0) done.cancel();
      }, asio::detached);
    }
    co_await done.async_wait(asio::as_tuple(asio::use_awaitable));
  });
  if (total != each * kFanOut) Die("tether fan-out lost bytes");
  return Now() - t0;
}

void FanOut() {
  const std::string name = "fan-out: 200 processes streaming, one host thread";
  if (!Selected(name)) return;
  const std::uint64_t each = std::max<std::uint64_t>(g_args.bytes / 256, 1 << 20);
  auto [b, o] = SideBySide([&] { return RawFanOut(each); }, [&] { return TetherFanOut(each); }, 3);
  Report({name, "200 raw pipes", MBps(each * kFanOut, b), MBps(each * kFanOut, o), X(b / o), "(report)"});
}

// ------------------------------------------------------------------ memory

// RSS of a process in bytes (0 once it is gone).
std::uint64_t RssBytes(pid_t pid) { return static_cast<std::uint64_t>(std::max(0L, testing::RssKib(pid))) * 1024; }
using testing::ParentOf;

awaitable<void> SleepMs(int ms) {
  asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::milliseconds(ms));
  co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
}

awaitable<void> Finish(Process& p) {
  co_await p.Terminate(0);
  while (true) {  // read what is left, then the exit
    auto c = co_await p.Read();
    if (!c.ok() || !*c) break;
  }
  co_await p.Wait();
}

std::uint64_t HeapInUse() { return testing::HeapInUseBytes(); }

void Memory() {
  if (!Selected("memory") && !Selected("RSS")) return;
  // For scale: the RSS of a minimal process, sleep(1).
  RawChild sl = RawChild::Spawn({"sleep", "5"}, false);
  ::usleep(100 * 1000);
  const std::uint64_t sleep_rss = RssBytes(sl.pid);
  ::kill(sl.pid, SIGKILL);
  sl.Wait();
  Run(Provider::kLocal, [&](Transport& t) -> awaitable<void> {
    // Idle: a process that prints nothing.
    auto idle = co_await MustStart(t, Options(V("sleep", "30")));
    co_await SleepMs(300);
    const std::uint64_t idle_rss = RssBytes(ParentOf(idle->pid()));
    Report({"supervisor RSS, idle", "sleep(1) RSS", KiB(sleep_rss), KiB(idle_rss), X(double(idle_rss) / sleep_rss),
            "< 4 MiB"});
    co_await Finish(*idle);

    // Streaming at full speed (1 MiB window): the daemon's peak RSS.
    auto fast = co_await MustStart(t, Options(V("head", "-c", std::to_string(g_args.bytes / 2), "/dev/zero"), 1 << 20));
    const pid_t fast_daemon = ParentOf(fast->pid());
    std::uint64_t peak = 0, chunks = 0;
    co_await Drain(*fast, [&] {
      if (++chunks % 512 == 0) peak = std::max(peak, RssBytes(fast_daemon));
    });
    Report({"supervisor RSS, streaming at full speed", "sleep(1) RSS", KiB(sleep_rss), KiB(peak),
            X(double(peak) / sleep_rss), "bounded (ring + window)"});

    // A slow consumer (16 KiB every 2 ms, 2 s) of a fast producer: both
    // sides stay bounded; the child waits.
    const std::uint64_t host_before = HeapInUse();
    auto slow = co_await MustStart(t, Options(V("head", "-c", "1G", "/dev/zero")));
    const pid_t slow_daemon = ParentOf(slow->pid());
    std::uint64_t sup_peak = 0, host_peak = 0;
    for (int i = 0; i < 1000; ++i) {
      auto c = co_await slow->Read();
      if (!c.ok() || !*c) Die("slow read failed");
      co_await SleepMs(2);
      if (i % 50 == 0) {
        sup_peak = std::max(sup_peak, RssBytes(slow_daemon));
        host_peak = std::max(host_peak, HeapInUse());
      }
    }
    Report({"supervisor RSS, slow consumer (2 s)", "sleep(1) RSS", KiB(sleep_rss), KiB(sup_peak),
            X(double(sup_peak) / sleep_rss), "bounded (ring + window)"});
    Report({"host heap growth, slow consumer (2 s)", "-", "-",
            KiB(host_peak > host_before ? double(host_peak - host_before) : 0.0), "-", "bounded (64 KiB window)"});
    co_await Finish(*slow);

    // Host memory per attached process: 200 idle processes.
    const std::uint64_t before = HeapInUse();
    std::vector<std::unique_ptr<Process>> many;
    for (int i = 0; i < kFanOut; ++i) many.push_back(co_await MustStart(t, Options(V("sleep", "30"))));
    co_await SleepMs(200);
    const std::uint64_t after = HeapInUse();
    Report({"host heap per attached process (200 idle)", "-", "-",
            KiB(after > before ? double(after - before) / kFanOut : 0.0), "-", "(report)"});
    for (auto& p : many) co_await Finish(*p);
  });
}

// Stripped size of each supervisor binary, against a static `true`-like
// baseline is meaningless, so: bytes, and the target from the issue (none).
void Sizes() {
  if (!Selected("size")) return;
  for (const char* arch : {"x86_64", "aarch64"}) {
    absl::StatusOr<std::string> bin = SupervisorBytes(arch);
    if (!bin.ok()) continue;
    const std::string path = absl::StrCat(g_work, "/sup-", arch);
    std::ofstream(path, std::ios::binary).write(bin->data(), static_cast<std::streamsize>(bin->size()));
    std::system(absl::StrCat("llvm-strip ", path, " 2>/dev/null || strip ", path, " 2>/dev/null").c_str());
    const auto size = std::filesystem::file_size(path);
    Report({absl::StrCat("supervisor binary, stripped, ", arch), "-", "-", KiB(double(size)), "-", "(report)"});
  }
}

void PrintTable() {
  std::printf("| benchmark | baseline | baseline figure | tether | ratio | target | CPU s/GB, base / tether |\n");
  std::printf("|---|---|---:|---:|---:|---|---:|\n");
  for (const Row& r : g_rows) {
    std::printf("| %s | %s | %s | %s | %s | %s | %s |\n", r.name.c_str(), r.baseline_name.c_str(), r.base.c_str(),
                r.ours.c_str(), r.ratio.c_str(), r.target.c_str(), r.cpu.empty() ? "" : r.cpu.c_str());
  }
}

}  // namespace
}  // namespace tether::bench

int main(int argc, char** argv) {
  using namespace tether::bench;
  ScaleArgs scale;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--reps") {
      g_args.reps = std::stoi(next());
    } else if (a == "--bytes") {
      g_args.bytes = std::stoull(next());
    } else if (a == "--only") {
      g_args.only = next();
    } else if (a == "--ssh-window") {
      g_args.ssh_window = std::stoull(next());
    } else if (a == "--ssh") {
      g_args.ssh = next();
    } else if (a == "--scale") {
      scale.out_dir = next();
    } else if (a == "--scale-n") {
      scale.counts.clear();
      for (absl::string_view n : absl::StrSplit(next(), ',')) scale.counts.push_back(std::stoi(std::string(n)));
    } else if (a == "--scale-rate") {
      const std::vector<std::string> r = absl::StrSplit(next(), '/');
      if (r.size() != 2) Die("--scale-rate wants BYTES/MS");
      scale.emit_bytes = std::stoi(r[0]);
      scale.emit_ms = std::stoi(r[1]);
    } else if (a == "--scale-window") {
      scale.window_s = std::stod(next());
    } else {
      Die("unknown option " + a + " (see the comment at the top of tests/bench/bench.cc)");
    }
  }
  ::signal(SIGPIPE, SIG_IGN);
  char tmpl[] = "/tmp/tether-bench-XXXXXX";
  if (!::mkdtemp(tmpl)) Die("mkdtemp");
  g_work = tmpl;
  if (!scale.out_dir.empty()) {
    // The streaming child sits next to this binary.
    scale.emitter = (std::filesystem::canonical("/proc/self/exe").parent_path() / "tether_bench_emit").string();
    scale.sandbox = g_work + "/sandbox";
    std::filesystem::create_directories(scale.out_dir);
    const int rc = RunScale(scale);
    std::error_code ec;
    std::filesystem::remove_all(g_work, ec);
    return rc;
  }
  std::fprintf(stderr, "tether_bench: %d reps, %llu bytes per stream, work in %s\n", g_args.reps,
               static_cast<unsigned long long>(g_args.bytes), g_work.c_str());
  Throughput();
  ArmorOverhead();
  RoundTrip();
  StartLatency();
  FanOut();
  Memory();
  Sizes();
  PrintTable();
  std::error_code ec;
  std::filesystem::remove_all(g_work, ec);
}
