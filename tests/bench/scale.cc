// The scale benchmark; see scale.h. Everything runs on one io_context (one
// host thread), as an agent runtime serving many processes would.
#include "tests/bench/scale.h"

#include <sys/resource.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cmath>
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tether/local_transport.h"
#include "tether/process.h"
#include "tests/bench/bench_util.h"
#include "tests/host/proc_util.h"

namespace tether::bench {
namespace {

namespace asio = boost::asio;
using asio::awaitable;

// One N, one mode.
struct ScalePoint {
  int n = 0;
  bool streaming = false;
  int reached = 0;               // processes started (n unless a start failed)
  std::string failure;           // why a start failed
  int teardown_failed = 0;       // terminate, read and wait calls that failed at the end
  std::string teardown_failure;  // the first such failure
  double host_cpu_us = 0;        // host CPU per process, us per second
  double host_ctx = 0;           // host context switches per second, all processes
  double heap_bytes = 0;         // host heap per process
  double sup_cpu_us = 0;         // supervisor CPU per process, us per second
  double sup_wakes = 0;          // times a supervisor was scheduled, per process and second
  double child_cpu_us = 0;       // the command's own CPU per process (the baseline: it wakes once a tick)
  double child_wakes = 0;        // the same for the command
  double sup_rss_kib = 0;        // supervisor RSS per process
  double rtt_us = 0;             // median 1-byte round trip of one more process
  double last_start_ms = 0;      // the N-th Start()
  double all_start_s = 0;        // all N starts
  double mib_per_s = 0;          // output the host received, all processes
};

double CpuSeconds(const rusage& r) {
  return r.ru_utime.tv_sec + r.ru_utime.tv_usec / 1e6 + r.ru_stime.tv_sec + r.ru_stime.tv_usec / 1e6;
}

// Time on a CPU (seconds) and times scheduled onto one, from
// /proc/PID/schedstat: nanoseconds, where stat's utime and stime are clock
// ticks (10 ms). A daemon that wakes once a second for a few hundred
// microseconds crosses a tick only now and then, so summed ticks said 0
// for 100 streaming daemons and ~660 us/s for 1000. Zeros once it is gone.
struct SchedStat {
  double cpu_s = 0;
  double slices = 0;
};

SchedStat ProcSched(pid_t pid) {
  unsigned long long run_ns = 0, wait_ns = 0, slices = 0;
  if (std::sscanf(testing::ReadProc(pid, "schedstat").c_str(), "%llu %llu %llu", &run_ns, &wait_ns, &slices) != 3) {
    return {};
  }
  return {double(run_ns) / 1e9, double(slices)};
}

SchedStat SumSched(const std::vector<pid_t>& pids) {
  SchedStat s;
  for (pid_t p : pids) {
    const SchedStat one = ProcSched(p);
    s.cpu_s += one.cpu_s;
    s.slices += one.slices;
  }
  return s;
}

awaitable<void> SleepFor(double secs) {
  asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::microseconds(long(secs * 1e6)));
  co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
}

StartOptions ScaleOptions(std::vector<std::string> argv, bool stdin_pipe) {
  StartOptions o;
  o.argv = std::move(argv);
  o.output_mode = OutputMode::kStream;
  o.output_format = OutputFormat::kBytes;
  o.stdin_pipe = stdin_pipe;
  return o;
}

// Counts processes that finished; wakes the waiter at zero.
struct Countdown {
  explicit Countdown(asio::any_io_executor ex) : timer(ex, std::chrono::steady_clock::time_point::max()) {}
  void Done() {
    if (--left == 0) timer.cancel();
  }
  awaitable<void> Wait() {
    if (left > 0) co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
  }
  // A failed call on the way to the end: counted, the first one kept.
  void Failed(const absl::Status& st) {
    if (++failed == 1) first_failure = st.ToString();
  }
  int left = 0;
  int failed = 0;
  std::string first_failure;
  asio::steady_timer timer;
};

// Reads until the end, then waits for the exit.
awaitable<void> ReadToEnd(Process* p, std::uint64_t* bytes, Countdown* done) {
  bool failed = false;
  while (true) {
    auto c = co_await p->Read();
    if (!c.ok()) {
      done->Failed(c.status());
      failed = true;
    }
    if (!c.ok() || !*c) break;
    *bytes += (*c)->bytes.size();
  }
  auto e = co_await p->Wait();
  if (!e.ok() && !failed) done->Failed(e.status());
  done->Done();
}

awaitable<void> TerminateOne(Process* p, Countdown* done) {
  auto st = co_await p->Terminate(0);
  if (!st.ok()) done->Failed(st);
}

awaitable<void> FinishIdle(Process* p, Countdown* done) {
  auto st = co_await p->Terminate(0);
  if (!st.ok()) done->Failed(st);
  std::uint64_t ignored = 0;
  co_await ReadToEnd(p, &ignored, done);
}

// Median 1-byte round trip through a `cat` started now; 0 if it failed.
awaitable<double> RoundTrip(Transport& t, int trips) {
  auto argv = std::vector<std::string>{"cat"};
  auto p = co_await Process::Start(t, ScaleOptions(argv, true));
  if (!p.ok()) co_return 0.0;
  std::vector<double> times;
  for (int i = 0; i <= trips; ++i) {
    const double t0 = Now();
    if (!(co_await (*p)->Write("x")).ok()) break;
    auto c = co_await (*p)->Read();
    if (!c.ok() || !*c) break;
    if (i > 0) times.push_back(Now() - t0);  // (the first one warms up)
  }
  co_await (*p)->CloseStdin();
  while (true) {
    auto c = co_await (*p)->Read();
    if (!c.ok() || !*c) break;
  }
  (void)co_await (*p)->Wait();
  co_return Median(times);
}

awaitable<void> MeasurePoint(Transport& t, const ScaleArgs& a, ScalePoint* pt) {
  auto ex = co_await asio::this_coro::executor;
  const std::uint64_t heap0 = testing::HeapInUseBytes();
  std::vector<std::unique_ptr<Process>> procs;
  procs.reserve(static_cast<std::size_t>(pt->n));
  std::uint64_t bytes = 0;
  Countdown done(ex);
  const auto argv = pt->streaming ? std::vector<std::string>{a.emitter, std::to_string(a.emit_bytes),
                                                             std::to_string(a.emit_ms)}
                                  : std::vector<std::string>{"sleep", "3600"};
  const double t0 = Now();
  for (int i = 0; i < pt->n; ++i) {
    const double s0 = Now();
    auto p = co_await Process::Start(t, ScaleOptions(argv, false));
    pt->last_start_ms = (Now() - s0) * 1e3;
    if (!p.ok()) {
      pt->failure = p.status().ToString();
      break;
    }
    procs.push_back(*std::move(p));
    if (pt->streaming) {
      ++done.left;
      asio::co_spawn(ex, ReadToEnd(procs.back().get(), &bytes, &done), asio::detached);
    }
  }
  pt->all_start_s = Now() - t0;
  pt->reached = static_cast<int>(procs.size());
  std::fprintf(stderr, "  scale: %d %s processes started in %.1f s%s%s\n", pt->reached,
               pt->streaming ? "streaming" : "idle", pt->all_start_s, pt->failure.empty() ? "" : ": ",
               pt->failure.c_str());
  co_await SleepFor(0.5);  // settle
  const double n = std::max(1, pt->reached);
  pt->heap_bytes = double(testing::HeapInUseBytes() - std::min(heap0, testing::HeapInUseBytes())) / n;
  std::vector<pid_t> daemons, children;
  for (auto& p : procs) {
    daemons.push_back(testing::ParentOf(p->pid()));
    children.push_back(p->pid());
  }
  rusage r0{}, r1{};
  const SchedStat d0 = SumSched(daemons), c0 = SumSched(children);
  const std::uint64_t b0 = bytes;
  ::getrusage(RUSAGE_SELF, &r0);
  const double w0 = Now();
  co_await SleepFor(a.window_s);
  ::getrusage(RUSAGE_SELF, &r1);
  const SchedStat d1 = SumSched(daemons), c1 = SumSched(children);
  const double wall = Now() - w0;
  // (After the CPU window: the round trips' own CPU is not the N's.)
  pt->rtt_us = co_await RoundTrip(t, a.round_trips) * 1e6;
  pt->host_cpu_us = (CpuSeconds(r1) - CpuSeconds(r0)) / wall / n * 1e6;
  pt->host_ctx = double(r1.ru_nvcsw - r0.ru_nvcsw + r1.ru_nivcsw - r0.ru_nivcsw) / wall;
  pt->sup_cpu_us = (d1.cpu_s - d0.cpu_s) / wall / n * 1e6;
  pt->sup_wakes = (d1.slices - d0.slices) / wall / n;
  pt->child_cpu_us = (c1.cpu_s - c0.cpu_s) / wall / n * 1e6;
  pt->child_wakes = (c1.slices - c0.slices) / wall / n;
  pt->mib_per_s = double(bytes - b0) / wall / (1 << 20);
  double rss = 0;
  for (pid_t d : daemons) rss += double(std::max(0L, testing::RssKib(d)));
  pt->sup_rss_kib = rss / n;
  // Tear down: every process terminated, its output read, its exit taken.
  for (auto& p : procs) {
    if (pt->streaming) {
      asio::co_spawn(ex, TerminateOne(p.get(), &done), asio::detached);
    } else {
      ++done.left;
      asio::co_spawn(ex, FinishIdle(p.get(), &done), asio::detached);
    }
  }
  co_await done.Wait();
  pt->teardown_failed = done.failed;
  pt->teardown_failure = done.first_failure;
  if (done.failed > 0) {
    std::fprintf(stderr, "  scale: %d calls failed on the way to the end of %d processes; the first: %s\n",
                 done.failed, pt->reached, done.first_failure.c_str());
  }
  procs.clear();
  co_await SleepFor(1);  // what the handles' last operations hold goes too (the next heap figure starts clean)
}

std::string Table(const std::vector<ScalePoint>& pts, const ScaleArgs& a) {
  std::string s = absl::StrFormat(
      "| N | mode | started | N-th start | all starts | host CPU / process | host ctx switches | host heap / "
      "process | supervisor CPU / process | supervisor wake-ups / process | the command's CPU / process "
      "(baseline) | its wake-ups | supervisor RSS / process | round trip (1 more) | output |\n"
      "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const ScalePoint& p : pts) {
    absl::StrAppendFormat(&s,
                          "| %d | %s | %d | %.1f ms | %.1f s | %.1f us/s | %.0f /s | %.1f KiB | %.1f us/s | %.2f /s | "
                          "%.1f us/s | %.2f /s | %.0f KiB | %.0f us | %.1f MiB/s |\n",
                          p.n, p.streaming ? absl::StrFormat("streaming %d B / %d ms", a.emit_bytes, a.emit_ms) : "idle",
                          p.reached, p.last_start_ms, p.all_start_s, p.host_cpu_us, p.host_ctx, p.heap_bytes / 1024,
                          p.sup_cpu_us, p.sup_wakes, p.child_cpu_us, p.child_wakes, p.sup_rss_kib, p.rtt_us,
                          p.mib_per_s);
  }
  for (const ScalePoint& p : pts) {
    if (!p.failure.empty()) absl::StrAppend(&s, "\nN = ", p.n, " stopped at ", p.reached, ": ", p.failure, "\n");
    if (p.teardown_failed > 0) {
      absl::StrAppend(&s, "\nN = ", p.n, p.streaming ? " streaming" : " idle", ": ", p.teardown_failed,
                      " calls (terminate, read or wait) failed on the way to the end; the first: ",
                      p.teardown_failure, "\n");
    }
  }
  return s;
}

// One panel of the plot: y against log N, a line per mode.
std::string Panel(const std::vector<ScalePoint>& pts, double ScalePoint::*field, const std::string& title,
                  int x0, int y0) {
  constexpr int kW = 300, kH = 170, kPad = 40;
  double ymax = 0;
  int nmin = 1 << 30, nmax = 1;
  for (const ScalePoint& p : pts) {
    ymax = std::max(ymax, p.*field);
    nmin = std::min(nmin, p.n);
    nmax = std::max(nmax, p.n);
  }
  if (ymax <= 0) ymax = 1;
  ymax *= 1.1;
  const double lx0 = std::log10(double(nmin)), lx1 = std::log10(double(std::max(nmax, nmin + 1)));
  auto X = [&](int n) { return x0 + kPad + (std::log10(double(n)) - lx0) / (lx1 - lx0) * (kW - kPad - 10); };
  auto Y = [&](double v) { return y0 + kH - 25 - v / ymax * (kH - 50); };
  std::string s = absl::StrFormat(
      "<g font-family=\"sans-serif\" font-size=\"11\"><text x=\"%d\" y=\"%d\" font-weight=\"bold\">%s</text>\n"
      "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#888\"/>"
      "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%d\" stroke=\"#888\"/>\n"
      "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%.3g</text><text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">0</text>\n",
      x0 + 5, y0 + 14, title, x0 + kPad, Y(0), x0 + kW - 10, Y(0), x0 + kPad, Y(0), x0 + kPad, y0 + 25,
      x0 + kPad - 3, y0 + 32, ymax / 1.1, x0 + kPad - 3, Y(0) + 4);
  for (const ScalePoint& p : pts) {
    if (!p.streaming) {
      absl::StrAppendFormat(&s, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%d</text>", X(p.n), Y(0) + 14,
                            p.n);
    }
  }
  for (int streaming = 0; streaming < 2; ++streaming) {
    const char* color = streaming ? "#d9480f" : "#1c7ed6";
    std::string path;
    for (const ScalePoint& p : pts) {
      if (p.streaming != bool(streaming)) continue;
      absl::StrAppendFormat(&path, "%s%.1f,%.1f", path.empty() ? "M" : " L", X(p.n), Y(p.*field));
      absl::StrAppendFormat(&s, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>", X(p.n), Y(p.*field),
                            color);
    }
    absl::StrAppendFormat(&s, "<path d=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\"/>\n", path, color);
  }
  return s + "</g>\n";
}

std::string Svg(const std::vector<ScalePoint>& pts, const ScaleArgs& a) {
  std::string s =
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"620\" height=\"560\" viewBox=\"0 0 620 560\">\n"
      "<rect width=\"620\" height=\"560\" fill=\"white\"/>\n";
  s += Panel(pts, &ScalePoint::host_cpu_us, "host CPU per process (us/s)", 0, 0);
  s += Panel(pts, &ScalePoint::heap_bytes, "host heap per process (bytes)", 310, 0);
  s += Panel(pts, &ScalePoint::sup_rss_kib, "supervisor RSS per process (KiB)", 0, 180);
  s += Panel(pts, &ScalePoint::rtt_us, "round trip of one more process (us)", 310, 180);
  s += Panel(pts, &ScalePoint::sup_cpu_us, "supervisor CPU per process (us/s)", 0, 360);
  s += Panel(pts, &ScalePoint::all_start_s, "time to start all N (s)", 310, 360);
  absl::StrAppendFormat(&s,
                        "<text x=\"10\" y=\"552\" font-family=\"sans-serif\" font-size=\"11\"><tspan "
                        "fill=\"#1c7ed6\">idle</tspan>, <tspan fill=\"#d9480f\">streaming %d B every %d "
                        "ms</tspan>; x: N processes (log), one host thread, local provider</text>\n",
                        a.emit_bytes, a.emit_ms);
  return s + "</svg>\n";
}

}  // namespace

int RunScale(const ScaleArgs& a) {
  // Every process costs the host one socket; 2000 need more than the usual
  // soft limit of 1024 descriptors.
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
  ::getrlimit(RLIMIT_NOFILE, &lim);
  std::fprintf(stderr, "tether_bench --scale: descriptor limit %llu\n", static_cast<unsigned long long>(lim.rlim_cur));
  std::vector<ScalePoint> pts;
  asio::io_context io;
  auto t = MakeLocalTransport(io.get_executor(), {a.sandbox});
  if (!t.ok()) Die(std::string(t.status().message()));
  asio::co_spawn(io, [&]() -> awaitable<void> {
    {
      // Warm-up, not reported: the first processes install the supervisor
      // and fill the allocator's and the libraries' one-time caches.
      ScalePoint warm;
      warm.n = 10;
      co_await MeasurePoint(**t, a, &warm);
    }
    for (int n : a.counts) {
      for (bool streaming : {false, true}) {
        ScalePoint p;
        p.n = n;
        p.streaming = streaming;
        co_await MeasurePoint(**t, a, &p);
        std::fprintf(stderr, "%s", Table({p}, a).c_str());
        pts.push_back(p);
        // Written after every point: a run stopped early keeps what it has.
        std::ofstream(a.out_dir + "/scale.md") << Table(pts, a);
        std::ofstream(a.out_dir + "/scale.svg") << Svg(pts, a);
      }
    }
  }, [](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  });
  io.run();
  std::printf("%s", Table(pts, a).c_str());
  return 0;
}

}  // namespace tether::bench
