#include "tether/supervisor_binary.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "host/install/build_paths.h"
#include "host/support/cancelled.h"
#include "host/support/off_loop.h"
#include "protocol/sha256.h"
#include "tether/protocol/version.h"

#ifdef TETHER_EMBEDDED_SUPERVISORS
// host/embedded_supervisors.S (cmake/MuslSupervisors.cmake)
extern "C" const char tether_supervisor_x86_64_begin[], tether_supervisor_x86_64_end[];
extern "C" const char tether_supervisor_aarch64_begin[], tether_supervisor_aarch64_end[];
#endif

namespace tether {

namespace internal {

// A seam for tests alone, declared where it is used
// (tests/host/install/supervisor_binary_test.cc): search $TETHER_SUPERVISOR_DIR and
// nothing else. A build with the static supervisors always has both beside
// the build tree, so without it "missing" cannot be made to happen.
void SearchOnlySupervisorDirForTesting(bool only);

namespace {
std::atomic<bool> only_supervisor_dir{false};
}  // namespace

void SearchOnlySupervisorDirForTesting(bool only) { only_supervisor_dir = only; }

}  // namespace internal

namespace {

namespace fs = std::filesystem;

std::vector<fs::path> Candidates(const std::string& arch) {
  const std::string name = absl::StrCat("tether-supervisor-", arch);
  std::vector<fs::path> out;
  if (const char* d = std::getenv("TETHER_SUPERVISOR_DIR"); d && *d) out.push_back(fs::path(d) / name);
  if (internal::only_supervisor_dir) return out;
  if (*internal::kBuildSupervisorDir) out.push_back(fs::path(internal::kBuildSupervisorDir) / name);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) out.push_back(exe.parent_path().parent_path() / "libexec" / "tether" / name);
  if (*internal::kInstallLibexecDir) out.push_back(fs::path(internal::kInstallLibexecDir) / "tether" / name);
  return out;
}

absl::StatusOr<std::string> ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    // Not kNotFound: that is the child's "command not found" (127).
    return absl::FailedPreconditionError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
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
    // One line: error text is escaped for the terminal (a line break
    // would print as "\n"), so the paths are listed with commas.
    absl::StrAppend(&tried, tried.empty() ? " " : ", ", p.string());
  }
  return absl::NotFoundError(absl::StrCat("no tether-supervisor-", arch,
                                          " found; set TETHER_SUPERVISOR_DIR. Tried:", tried));
}

absl::StatusOr<std::string> SupervisorBytes(const std::string& arch) {
  if (arch != "x86_64" && arch != "aarch64") {
    return absl::UnimplementedError(absl::StrCat(
        "sandbox architecture '", arch, "' has no tether supervisor (x86_64 and aarch64 do)"));
  }
  const char* dir = std::getenv("TETHER_SUPERVISOR_DIR");
#ifdef TETHER_EMBEDDED_SUPERVISORS
  if (dir == nullptr || *dir == '\0') {
    const std::string_view embedded = arch == "x86_64"
        ? std::string_view(tether_supervisor_x86_64_begin,
                           static_cast<std::size_t>(tether_supervisor_x86_64_end - tether_supervisor_x86_64_begin))
        : std::string_view(tether_supervisor_aarch64_begin,
                           static_cast<std::size_t>(tether_supervisor_aarch64_end - tether_supervisor_aarch64_begin));
    if (!embedded.empty()) return std::string(embedded);
  }
#endif
  (void)dir;
  absl::StatusOr<std::string> path = FindSupervisorBinary(arch);
  if (!path.ok()) return path.status();
  return ReadAll(*path);
}

namespace {

std::string InstallPathForHash(const SandboxInfo& info, std::string_view sha256_hex) {
  return absl::StrCat(info.bin_dir, "/", SupervisorInstallName(info.arch, sha256_hex));
}

}  // namespace

std::string SupervisorInstallName(std::string_view arch, std::string_view sha256_hex) {
  return absl::StrCat("tether-supervisor-", kTetherVersion, "-", std::string(arch), "-",
                      std::string(sha256_hex.substr(0, 32)));
}

std::string SupervisorInstallPath(const SandboxInfo& info, std::string_view bytes) {
  return InstallPathForHash(info, protocol::Sha256Hex(bytes));
}

boost::asio::awaitable<absl::StatusOr<std::shared_ptr<const SupervisorImage>>> LoadSupervisor(
    const std::string& arch) {
  // One read and one hash per binary and process: the binaries do not
  // change under a running host (hashing one costs milliseconds to a
  // second). The first load runs on a helper thread, never on the loop.
  // Keyed by where the bytes come from, so a changed $TETHER_SUPERVISOR_DIR
  // is honoured.
  const char* dir = std::getenv("TETHER_SUPERVISOR_DIR");
  const std::string key = absl::StrCat(arch, "\n", dir ? dir : "");
  static std::mutex mu;
  static auto* cache = new std::map<std::string, std::shared_ptr<const SupervisorImage>>;  // never destroyed
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache->find(key); it != cache->end()) co_return it->second;
  }
  using Result = absl::StatusOr<std::shared_ptr<const SupervisorImage>>;
  std::function<Result()> load = [arch]() -> Result {
    absl::StatusOr<std::string> bytes = SupervisorBytes(arch);
    if (!bytes.ok()) return bytes.status();
    auto image = std::make_shared<SupervisorImage>();
    image->sha256 = protocol::Sha256Hex(*bytes);
    image->bytes = *std::move(bytes);
    return std::shared_ptr<const SupervisorImage>(std::move(image));
  };
  Result loaded = co_await internal::RunOffLoop<Result>(std::move(load));
  if (!loaded.ok()) co_return loaded.status();
  std::lock_guard<std::mutex> lock(mu);
  co_return cache->emplace(key, *loaded).first->second;  // (a concurrent first load may have won)
}

boost::asio::awaitable<absl::StatusOr<std::string>> InstallSupervisor(Transport& transport,
                                                                      const SandboxInfo& info) {
  absl::StatusOr<std::shared_ptr<const SupervisorImage>> bin = co_await LoadSupervisor(info.arch);
  if (!bin.ok()) co_return bin.status();
  const std::string remote = InstallPathForHash(info, (*bin)->sha256);
  // (Loading cannot be cancelled: a deadline that passed meanwhile is only
  // recorded, and must stop the upload before it starts.)
  if (co_await internal::Cancelled()) co_return absl::CancelledError("the supervisor's upload was cancelled");
  absl::Status st = co_await transport.PutFile(remote, (*bin)->bytes, 0700);
  if (!st.ok()) co_return st;
  co_return remote;
}

}  // namespace tether
