// The conformance suite through the hostile text channel (hostile_transport.h)
// over the local provider, for several seeds:
//
//   hostile_conformance text|exchange [SEED...]
//
// Prints each case per seed and the channel's misdeeds; exits 1 on any
// failure, naming the seed to replay.
#include <stdlib.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <cstdio>
#include <filesystem>
#include <string>

#include "host/conformance/conformance.h"
#include "tether/local_transport.h"
#include "tests/host/faults/hostile_transport.h"

int main(int argc, char** argv) {
  if (argc < 2 || (std::string(argv[1]) != "text" && std::string(argv[1]) != "exchange")) {
    std::fprintf(stderr, "usage: hostile_conformance text|exchange [SEED...]\n");
    return 2;
  }
  const std::string mode = argv[1];
  std::vector<std::uint64_t> seeds;
  for (int i = 2; i < argc; ++i) seeds.push_back(std::strtoull(argv[i], nullptr, 10));
  if (seeds.empty()) seeds = {1, 2, 3};
  int failed = 0;
  for (std::uint64_t seed : seeds) {
    char tmpl[] = "/tmp/tether-hostile-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return 2;
    boost::asio::io_context io;
    auto local = tether::MakeLocalTransport(io.get_executor(), tether::LocalOptions{tmpl});
    if (!local.ok()) return 2;
    auto hostile_owner = std::make_shared<tether::testing::HostileTransport>(
        **local, seed, mode == "text" ? tether::TunnelMode::kText : tether::TunnelMode::kExchange);
    tether::testing::HostileTransport& hostile = *hostile_owner;
    int pass = 0, fail = 0, unsupported = 0;
    tether::ConformanceOptions options;
    options.on_result = [&](const tether::ConformanceResult& r) {
      using O = tether::ConformanceResult::Outcome;
      const char* what = r.outcome == O::kPass ? "pass" : r.outcome == O::kUnsupported ? "unsupported" : "FAIL";
      (r.outcome == O::kPass ? pass : r.outcome == O::kUnsupported ? unsupported : fail)++;
      std::printf("seed %-4llu %-32s %-12s %7.2f  %s\n", static_cast<unsigned long long>(seed), r.name.c_str(),
                  what, r.seconds, r.detail.c_str());
      std::fflush(stdout);
    };
    boost::asio::co_spawn(io, tether::RunConformance(hostile, options),
                          [](std::exception_ptr e, std::vector<tether::ConformanceResult>) {
                            if (e) std::rethrow_exception(e);
                          });
    io.run();
    const auto& st = hostile.stats();
    std::printf("hostile %s seed %llu: %d passed, %d failed, %d unsupported; channel: %llu connections, "
                "%llu cut, %llu bytes replayed, %llu noise lines, %llu lines echoed\n",
                mode.c_str(), static_cast<unsigned long long>(seed), pass, fail, unsupported,
                static_cast<unsigned long long>(st.connections), static_cast<unsigned long long>(st.cuts),
                static_cast<unsigned long long>(st.replayed_bytes), static_cast<unsigned long long>(st.noise_lines),
                static_cast<unsigned long long>(st.echoed_lines));
    if (fail > 0) {
      std::printf("FAILED with seed %llu: replay with  hostile_conformance %s %llu\n",
                  static_cast<unsigned long long>(seed), mode.c_str(), static_cast<unsigned long long>(seed));
      ++failed;
    }
    std::filesystem::remove_all(tmpl);
  }
  return failed ? 1 : 0;
}
