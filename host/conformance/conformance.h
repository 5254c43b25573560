// The conformance suite: one list of cases over the whole process API, run
// through any Transport. `tether conformance` prints its table; the test
// suite runs it against every provider target it can build on this machine.
//
// A case passes, fails, or is unsupported: it declares the capability it
// needs (a pty, setsid in the sandbox, ...), and a sandbox without it reports
// unsupported instead of failing.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <functional>
#include <string>
#include <vector>

#include "tether/transport.h"

namespace tether {

struct ConformanceResult {
  enum class Outcome { kPass, kFail, kUnsupported };
  std::string name;        // "bytes.stdout_all_values"
  std::string capability;  // what it needs ("core" for every provider)
  Outcome outcome = Outcome::kFail;
  std::string detail;      // why it failed or is unsupported
  double seconds = 0;
};

struct ConformanceOptions {
  std::string only;  // run the cases whose name contains this
  // For targets that inject faults: a case whose own start got
  // OUTCOME_UNKNOWN because a cut landed on its setup (the seed's answer
  // there: never started again) is run once more, and the result says so.
  // Every other failure counts at once.
  bool rerun_setup_cuts = false;
  // Called after each case (for live output).
  std::function<void(const ConformanceResult&)> on_result;
};

// Names of every case, in order.
std::vector<std::string> ConformanceCaseNames();

boost::asio::awaitable<std::vector<ConformanceResult>> RunConformance(Transport& transport,
                                                                      ConformanceOptions options);

}  // namespace tether
