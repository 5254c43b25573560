#include "tether/supervisor_binary.h"

#include <doctest.h>
#include <stdlib.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "protocol/sha256.h"
#include "tests/host/loop_latency.h"

namespace tether {
namespace internal {
// host/install/supervisor_binary.cc: search $TETHER_SUPERVISOR_DIR alone.
void SearchOnlySupervisorDirForTesting(bool only);
}  // namespace internal
namespace {

namespace asio = boost::asio;
using std::chrono::milliseconds;

// Records PutFile; nothing else is called by InstallSupervisor.
class RecordingTransport final : public Transport {
 public:
  explicit RecordingTransport(asio::any_io_executor ex) : ex_(std::move(ex)) {}
  std::string_view name() const override { return "recording"; }
  std::string sandbox_id() const override { return "recording"; }
  asio::any_io_executor executor() const override { return ex_; }
  asio::awaitable<absl::StatusOr<SandboxInfo>> Probe() override { co_return absl::UnimplementedError("probe"); }
  asio::awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(std::vector<std::string>) override {
    co_return absl::UnimplementedError("exec");
  }
  asio::awaitable<absl::Status> PutFile(std::string path, std::string_view bytes, int mode) override {
    path_ = path;
    size_ = bytes.size();
    mode_ = mode;
    co_return absl::OkStatus();
  }
  std::string path_;
  std::size_t size_ = 0;
  int mode_ = 0;

 private:
  asio::any_io_executor ex_;
};

TEST_CASE("the first install reads and hashes the supervisor off the event loop") {
  // A large stand-in binary, so that reading and hashing it takes long
  // enough to see: the loop must keep running meanwhile.
  char tmpl[] = "/tmp/tether-supervisor-binary-test-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  const std::string bytes(64 << 20, 's');
  std::ofstream(dir + "/tether-supervisor-aarch64", std::ios::binary) << bytes;
  const auto h0 = std::chrono::steady_clock::now();
  const std::string sha = protocol::Sha256Hex(bytes);
  const auto hash_time = std::chrono::steady_clock::now() - h0;

  const char* old = std::getenv("TETHER_SUPERVISOR_DIR");
  const std::string saved = old ? old : "";
  ::setenv("TETHER_SUPERVISOR_DIR", dir.c_str(), 1);
  asio::io_context io;
  RecordingTransport t(io.get_executor());
  testing::LoopLatency latency(io.get_executor());
  SandboxInfo info;
  info.arch = "aarch64";
  info.bin_dir = "/sandbox/bin";
  absl::StatusOr<std::string> path = absl::UnknownError("not run");
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    path = co_await InstallSupervisor(t, info);
    // A second install uses the cached image.
    absl::StatusOr<std::string> again = co_await InstallSupervisor(t, info);
    CHECK((again.ok() && *again == *path));
    latency.Stop();
  }, [](std::exception_ptr e) { if (e) std::rethrow_exception(e); });
  io.run();
  if (old) ::setenv("TETHER_SUPERVISOR_DIR", saved.c_str(), 1); else ::unsetenv("TETHER_SUPERVISOR_DIR");
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);

  REQUIRE(path.ok());
  CHECK(*path == SupervisorInstallPath(info, bytes));
  CHECK(path->find(sha.substr(0, 32)) != std::string::npos);
  CHECK(t.size_ == bytes.size());
  CHECK(t.mode_ == 0700);
  CAPTURE(std::chrono::duration_cast<milliseconds>(hash_time).count());
  CAPTURE(std::chrono::duration_cast<milliseconds>(latency.max_stall()).count());
  // Before: the loop stood still for the read plus the hash.
  CHECK(latency.max_stall() < hash_time / 2);
}

TEST_CASE("a missing supervisor binary is reported, not cached") {
  char tmpl[] = "/tmp/tether-supervisor-binary-test-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const char* old = std::getenv("TETHER_SUPERVISOR_DIR");
  const std::string saved = old ? old : "";
  ::setenv("TETHER_SUPERVISOR_DIR", tmpl, 1);
  // Only the empty directory is searched: a build with the static
  // supervisors has both beside the build tree, which would be found.
  internal::SearchOnlySupervisorDirForTesting(true);
  const absl::Status found = FindSupervisorBinary("aarch64").status();
  asio::io_context io;
  absl::Status first, second;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    first = (co_await LoadSupervisor("aarch64")).status();
    std::ofstream(std::string(tmpl) + "/tether-supervisor-aarch64", std::ios::binary) << "bin";
    second = (co_await LoadSupervisor("aarch64")).status();
  }, [](std::exception_ptr e) { if (e) std::rethrow_exception(e); });
  io.run();
  internal::SearchOnlySupervisorDirForTesting(false);
  if (old) ::setenv("TETHER_SUPERVISOR_DIR", saved.c_str(), 1); else ::unsetenv("TETHER_SUPERVISOR_DIR");
  std::error_code ec;
  std::filesystem::remove_all(tmpl, ec);
  CAPTURE(found);
  CAPTURE(first);
  CAPTURE(second);
  REQUIRE(absl::IsNotFound(found));  // the seam works: nothing else was searched
  CHECK(absl::IsNotFound(first));
  CHECK(first.message().find("TETHER_SUPERVISOR_DIR") != std::string_view::npos);  // says what to set
  // Names where it looked, on one line (the CLI escapes a line break as "\n").
  CHECK(found.message().find(std::string("Tried: ") + tmpl + "/tether-supervisor-aarch64") != std::string_view::npos);
  CHECK(found.message().find('\n') == std::string_view::npos);
  CHECK(second.ok());
}

}  // namespace
}  // namespace tether
