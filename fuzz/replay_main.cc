// Replays fuzz corpora without libFuzzer: every file named on the command line
// (directories are walked) is passed once to LLVMFuzzerTestOneInput. Exits
// non-zero when a path cannot be read or nothing was replayed.
//
// With -max_total_time=S (the libFuzzer flag) it then fuzzes for S seconds
// by mutation, for targets libFuzzer cannot build (message_handler): random
// corpus inputs get bit flips, byte changes, inserts, erases, duplicated
// ranges and splices, drawn from -seed=N (default 1); other -flags are
// ignored. Before each run the input is written to
// <-artifact_prefix>crash-input, so the input of a crash (an abort) is left
// there to be added to the corpus; a clean end removes it.
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

constexpr std::size_t kMaxInputBytes = 64 * 1024;

bool Load(const std::filesystem::path& p, std::vector<std::string>* corpus) {
  std::ifstream f(p, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "replay: cannot read %s\n", p.c_str());
    return false;
  }
  corpus->emplace_back((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return true;
}

void Run(const std::string& in) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(in.data()), in.size());
}

std::string Mutate(const std::vector<std::string>& corpus, std::mt19937_64& rng) {
  std::string s = corpus[rng() % corpus.size()];
  const int n = 1 + static_cast<int>(rng() % 4);
  for (int i = 0; i < n; ++i) {
    const std::size_t at = s.empty() ? 0 : rng() % s.size();
    switch (rng() % 6) {
      case 0: if (!s.empty()) s[at] ^= static_cast<char>(1u << (rng() % 8)); break;
      case 1: if (!s.empty()) s[at] = static_cast<char>(rng()); break;
      case 2: s.insert(at, std::string(1 + rng() % 8, static_cast<char>(rng()))); break;
      case 3: if (!s.empty()) s.erase(at, 1 + rng() % 16); break;
      case 4: if (!s.empty()) s.insert(at, s.substr(rng() % s.size(), 1 + rng() % 64)); break;
      default: {
        const std::string& o = corpus[rng() % corpus.size()];
        if (!o.empty()) s.insert(at, o.substr(rng() % o.size(), 1 + rng() % 256));
      }
    }
  }
  if (s.size() > kMaxInputBytes) s.resize(kMaxInputBytes);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  double budget = 0;
  std::uint64_t seed = 1;
  std::string prefix;
  std::vector<std::string> corpus;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("-max_total_time=", 0) == 0) {
      budget = std::atof(a.c_str() + 16);
      continue;
    }
    if (a.rfind("-seed=", 0) == 0) {
      seed = std::strtoull(a.c_str() + 6, nullptr, 10);
      continue;
    }
    if (a.rfind("-artifact_prefix=", 0) == 0) {
      prefix = a.substr(17);
      continue;
    }
    // Other libFuzzer flags (./dev fuzz_all passes -print_final_stats=1)
    // mean nothing here; read as paths they failed the whole run.
    if (a.size() > 1 && a[0] == '-') continue;
    std::error_code ec;
    const std::filesystem::path root(a);
    if (std::filesystem::is_directory(root, ec)) {
      for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
        if (e.is_regular_file() && !Load(e.path(), &corpus)) return 1;
      }
    } else if (!Load(root, &corpus)) {
      return 1;
    }
  }
  for (const std::string& in : corpus) Run(in);
  std::printf("replay: %zu inputs, no crash\n", corpus.size());
  if (corpus.empty()) return 1;
  if (budget <= 0) return 0;
  const std::string crash = prefix + "crash-input";
  std::mt19937_64 rng(seed);
  std::uint64_t runs = 0;
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + std::chrono::duration<double>(budget);
  while (std::chrono::steady_clock::now() < end) {
    const std::string in = Mutate(corpus, rng);
    {
      std::ofstream f(crash, std::ios::binary | std::ios::trunc);
      f.write(in.data(), static_cast<std::streamsize>(in.size()));
    }
    Run(in);
    ++runs;
  }
  ::unlink(crash.c_str());
  std::printf("fuzz: %llu mutated executions in %.0f s (seed %llu), no crash\n",
              static_cast<unsigned long long>(runs),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
              static_cast<unsigned long long>(seed));
  return 0;
}
