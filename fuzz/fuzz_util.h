// Shared by the fuzz targets: invariant checks that abort (a failed invariant
// is our bug, and libFuzzer keeps the input) and the chunk splitter that
// replays a byte stream in sizes chosen by the fuzz input.
#pragma once

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include <google/protobuf/stubs/logging.h>

namespace tether::fuzz {

[[noreturn]] inline void Fail(const char* target, const char* what) {
  std::fprintf(stderr, "%s: invariant failed: %s\n", target, what);
  std::abort();
}

// Hostile envelopes make protobuf log each invalid UTF-8 string: noise here.
inline void QuietProtobufLogs() {
  static const bool quiet = (google::protobuf::SetLogHandler(nullptr), true);
  (void)quiet;
}

// Chunk sizes taken cyclically from `sizes`; an empty feed (0) is never
// repeated, so the stream always makes progress.
struct Splitter {
  std::string_view sizes;
  std::size_t next = 0;
  bool last_empty = false;
  std::size_t Size(std::size_t remaining) {
    if (sizes.empty()) return remaining;
    std::size_t n = static_cast<unsigned char>(sizes[next++ % sizes.size()]);
    if (n == 0 && last_empty) n = 1;
    last_empty = n == 0;
    return n < remaining ? n : remaining;
  }
};

}  // namespace tether::fuzz

#define FUZZ_CHECK(cond)                                  \
  do {                                                    \
    if (!(cond)) ::tether::fuzz::Fail(kFuzzTarget, #cond); \
  } while (0)
