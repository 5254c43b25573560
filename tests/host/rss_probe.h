// The peak RSS growth of one test case, for the hostile-endpoint tests: a
// server's endless or enormous answer must fail at a limit while the host's
// memory stays under kMaxRssGrowth (issue 30).
#pragma once

#include <doctest.h>
#include <malloc.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <string_view>

namespace tether::testing {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kRssMeaningless = true;  // shadow memory and the free quarantine
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kRssMeaningless = true;
#else
inline constexpr bool kRssMeaningless = false;
#endif
#else
inline constexpr bool kRssMeaningless = false;
#endif

// The bound on the peak RSS growth of one hostile answer: the largest
// buffer a limit allows is a 16 MiB body (max_body as Runloop and Boat set
// it) or WebSocket message (max_message), which a growing std::string or
// flat_buffer may hold twice while it reallocates.
inline constexpr long kMaxRssGrowth = 64l << 20;  // bytes

inline long StatusKib(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(field, 0) == 0) return std::stol(line.substr(std::string_view(field).size()));
  }
  return -1;
}

// Peak RSS growth over a case: VmHWM is reset to the current RSS first
// (clear_refs 5), so the peak is this case's; /proc/self/statm's current
// RSS is reported too. (The test servers run in this process too; they hold
// a few 64 KiB buffers.)
struct RssProbe {
  long rss_before = 0, hwm_reset = 0;
  RssProbe() {
    malloc_trim(0);  // what earlier cases freed goes back to the system, so it is not reused unseen
    std::ofstream("/proc/self/clear_refs") << "5";
    hwm_reset = StatusKib("VmHWM:");
    rss_before = StatusKib("VmRSS:");
  }
  // VmHWM was reset (else the peak is the whole process's, earlier cases
  // included, and the check would measure them).
  bool Reset() const { return hwm_reset >= 0 && hwm_reset <= rss_before + 1024; }
  long PeakGrowth() const { return (StatusKib("VmHWM:") - rss_before) * 1024; }
  long Growth() const {
    std::ifstream f("/proc/self/statm");
    long size = 0, resident = 0;
    f >> size >> resident;
    return resident * sysconf(_SC_PAGESIZE) - rss_before * 1024;
  }
  void Check(const char* what) const {
    MESSAGE(std::string(what), ": peak RSS growth ", PeakGrowth() >> 10, " KiB, RSS growth after ", Growth() >> 10,
            " KiB");
    if (kRssMeaningless) return;
    CHECK_MESSAGE(Reset(), "VmHWM was not reset by /proc/self/clear_refs: ", hwm_reset, " KiB against ", rss_before);
    CHECK(PeakGrowth() < kMaxRssGrowth);
  }
};

}  // namespace tether::testing
