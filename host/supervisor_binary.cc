#include "host/supervisor_binary.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "protocol/crc32c.h"
#include "tether/protocol/version.h"

namespace tether {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> Candidates(const std::string& arch) {
  const std::string name = absl::StrCat("tether-supervisor-", arch);
  std::vector<fs::path> out;
  if (const char* d = std::getenv("TETHER_SUPERVISOR_DIR"); d && *d) out.push_back(fs::path(d) / name);
#ifdef TETHER_BUILD_SUPERVISOR_DIR
  out.push_back(fs::path(TETHER_BUILD_SUPERVISOR_DIR) / name);
#endif
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) out.push_back(exe.parent_path().parent_path() / "libexec" / "tether" / name);
#ifdef TETHER_INSTALL_LIBEXEC_DIR
  out.push_back(fs::path(TETHER_INSTALL_LIBEXEC_DIR) / "tether" / name);
#endif
  return out;
}

absl::StatusOr<std::string> ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

absl::StatusOr<std::string> FindSupervisorBinary(const std::string& arch) {
  if (arch != "x86_64" && arch != "aarch64") {
    return absl::UnimplementedError(absl::StrCat(
        "sandbox architecture '", arch, "' has no tether supervisor (x86_64 and aarch64 do)"));
  }
  std::string tried;
  for (const fs::path& p : Candidates(arch)) {
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p.string();
    absl::StrAppend(&tried, "\n  ", p.string());
  }
  return absl::NotFoundError(absl::StrCat("no tether-supervisor-", arch,
                                          " found; set TETHER_SUPERVISOR_DIR. Tried:", tried));
}

boost::asio::awaitable<absl::StatusOr<std::string>> InstallSupervisor(Transport& transport,
                                                                      const SandboxInfo& info) {
  // One read per process: the binaries do not change under a running host.
  static std::map<std::string, std::string> cache;
  auto it = cache.find(info.arch);
  if (it == cache.end()) {
    absl::StatusOr<std::string> path = FindSupervisorBinary(info.arch);
    if (!path.ok()) co_return path.status();
    absl::StatusOr<std::string> bytes = ReadAll(*path);
    if (!bytes.ok()) co_return bytes.status();
    it = cache.emplace(info.arch, *std::move(bytes)).first;
  }
  const std::string& bytes = it->second;
  const std::string name =
      absl::StrCat("tether-supervisor-", kTetherVersion, "-", info.arch, "-",
                   absl::Hex(protocol::Crc32c(bytes), absl::kZeroPad8), "-", bytes.size());
  const std::string remote = absl::StrCat(info.bin_dir, "/", name);
  absl::Status st = co_await transport.PutFile(remote, bytes, 0700);
  if (!st.ok()) co_return st;
  co_return remote;
}

}  // namespace tether
