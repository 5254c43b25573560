// Replays fuzz corpora without libFuzzer: every file named on the command line
// (directories are walked) is passed once to LLVMFuzzerTestOneInput. Exits
// non-zero when a path cannot be read or nothing was replayed.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

bool Replay(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "replay: cannot read %s\n", p.c_str());
    return false;
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int replayed = 0;
  for (int i = 1; i < argc; ++i) {
    std::error_code ec;
    const std::filesystem::path root(argv[i]);
    if (std::filesystem::is_directory(root, ec)) {
      for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
        if (!e.is_regular_file()) continue;
        if (!Replay(e.path())) return 1;
        ++replayed;
      }
    } else {
      if (!Replay(root)) return 1;
      ++replayed;
    }
  }
  std::printf("replay: %d inputs, no crash\n", replayed);
  return replayed > 0 ? 0 : 1;
}
