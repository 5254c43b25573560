// The scale benchmark (tether_bench --scale DIR): how the cost of one
// process grows with the number of processes attached to one host thread.
// For each N it starts N attached processes on the local provider, once
// streaming (a fixed modest rate each) and once idle, and measures per
// process: host CPU, host heap, supervisor CPU and RSS, plus the round trip
// of one more process while the N run, and how long the N-th start took.
// It writes scale.md (a Markdown table) and scale.svg (a plot) into DIR.
#pragma once

#include <string>
#include <vector>

namespace tether::bench {

struct ScaleArgs {
  std::string out_dir;                       // where scale.md and scale.svg go
  std::string sandbox;                       // the local provider's root
  std::string emitter;                       // path of tether_bench_emit
  std::vector<int> counts = {10, 100, 1000, 2000};
  // Per streaming process: 1 KiB a second. (4 KiB every 100 ms was tried:
  // at N = 1000 the daemons' and children's 10 wake-ups a second each
  // saturate a 2-core machine before the host does.)
  int emit_bytes = 1024;                     // per tick and streaming process
  int emit_ms = 1000;                        // tick
  int round_trips = 200;
  double window_s = 3;                       // CPU measured over this
};

// Runs it; returns the process exit status (0 when the files were written).
int RunScale(const ScaleArgs& args);

}  // namespace tether::bench
