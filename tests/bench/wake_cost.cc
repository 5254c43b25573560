// The CPU one wake-up costs on this machine, with nothing to do: an empty
// nanosleep loop at a given period. The scale benchmark's per-process CPU
// is mostly wake-ups; on a paravirtualized guest their price depends on
// how often the CPU goes idle, which this shows without tether.
//
//   tether_bench_wake_cost [PERIOD_US COUNT]...   (default: 1 s, 100 ms,
//                                                  10 ms and 1 ms periods)
#include <sys/resource.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

namespace {

double CpuMicros() {
  rusage r{};
  ::getrusage(RUSAGE_SELF, &r);
  return (r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1e6 + r.ru_utime.tv_usec + r.ru_stime.tv_usec;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::pair<long, int>> runs;
  for (int i = 1; i + 1 < argc; i += 2) runs.emplace_back(std::atol(argv[i]), std::atoi(argv[i + 1]));
  if (runs.empty()) runs = {{1000000, 8}, {100000, 50}, {10000, 300}, {1000, 3000}};
  for (const auto& [period_us, count] : runs) {
    if (period_us <= 0 || count <= 0) {
      std::fprintf(stderr, "tether_bench_wake_cost: PERIOD_US and COUNT must be positive\n");
      return 2;
    }
    const timespec ts{period_us / 1000000, (period_us % 1000000) * 1000};
    const double before = CpuMicros();
    for (int i = 0; i < count; ++i) ::nanosleep(&ts, nullptr);
    std::printf("period %8ld us: %6.1f us of CPU per wake-up (%d wake-ups)\n", period_us,
                (CpuMicros() - before) / count, count);
  }
  return 0;
}
