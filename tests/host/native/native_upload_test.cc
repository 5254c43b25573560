// NativeTransport::PutByUpload (host/native/native_transport.h), the upload
// through a provider's file API, over the local provider's Exec with a file
// API of the test's own: one that writes part of the bytes and then fails,
// as a cut connection does.
#include "host/native/native_transport.h"

#include <doctest.h>
#include <stdlib.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "tether/local_transport.h"

namespace tether {
namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;

// The file API: writes `bytes` at the temporary path, or only half of them
// and then fails (`cut`).
class UploadingTransport final : public native::NativeTransport {
 public:
  UploadingTransport(asio::any_io_executor ex, std::shared_ptr<Transport> local)
      : NativeTransport(std::move(ex), {"test", "sb", "test sandbox"}, {}), local_(std::move(local)) {}
  asio::awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(std::vector<std::string> argv) override {
    co_return co_await local_->Exec(std::move(argv));
  }
  bool cut = false;

 protected:
  asio::awaitable<absl::Status> Put(std::string path, std::string_view bytes, int mode, bool missing) override {
    co_return co_await PutByUpload(std::move(path), bytes, mode, missing, 0,
                                   [this](std::string tmp, std::string_view b) -> asio::awaitable<absl::Status> {
                                     std::ofstream f(tmp, std::ios::binary);
                                     const std::string_view part = cut ? b.substr(0, b.size() / 2) : b;
                                     f.write(part.data(), static_cast<std::streamsize>(part.size()));
                                     co_return cut ? absl::UnavailableError("test: connection reset")
                                                   : absl::OkStatus();
                                   });
  }

 private:
  std::shared_ptr<Transport> local_;
};

std::vector<std::string> Named(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (absl::StartsWith(name, prefix)) out.push_back(name);
  }
  return out;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A directory of the test's own, the "sandbox"'s TMPDIR while it lives (the
// local Exec passes our environment): the probe puts bin/ there.
struct Scratch {
  Scratch() {
    char tmpl[] = "/tmp/tether-upload-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    dir = tmpl;
    if (const char* old = std::getenv("TMPDIR")) old_tmpdir = old;
    ::setenv("TMPDIR", dir.c_str(), 1);
  }
  ~Scratch() {
    if (old_tmpdir) ::setenv("TMPDIR", old_tmpdir->c_str(), 1); else ::unsetenv("TMPDIR");
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string dir;
  std::optional<std::string> old_tmpdir;
};

TEST_CASE("a cut upload's partial temporary file is removed by the transport's next placement, and no other") {
  Scratch scratch;
  const std::string dir = scratch.dir;
  asio::io_context io;
  absl::StatusOr<std::shared_ptr<Transport>> local = MakeLocalTransport(io.get_executor(), {dir + "/local"});
  REQUIRE(local.ok());
  std::string bytes;
  for (int i = 0; i < 200000; ++i) bytes.push_back(static_cast<char>(i * 13 + (i >> 9)));
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto t = std::make_shared<UploadingTransport>(io.get_executor(), *local);
        auto other = std::make_shared<UploadingTransport>(io.get_executor(), *local);
        absl::StatusOr<SandboxInfo> info = co_await t->Probe();
        REQUIRE(info.ok());
        const std::string bin = info->bin_dir;
        REQUIRE(absl::StartsWith(bin, dir + "/"));  // (nothing of the machine's own)
        const std::string path = bin + "/blob";

        // Two cut uploads: each leaves part of the file under its own name.
        t->cut = true;
        CHECK(absl::IsUnavailable(co_await t->PutFile(path, bytes, 0700)));
        CHECK(absl::IsUnavailable(co_await t->PutFile(path, bytes, 0700)));
        std::vector<std::string> left = Named(bin, "blob.up.");
        REQUIRE(left.size() == 2);  // (what the cleanup must remove is there)
        CHECK(ReadFile(bin + "/" + left[0]).size() == bytes.size() / 2);
        CHECK(!fs::exists(path));
        // Another transport's cut upload of the same file (another start,
        // whose upload could still be in flight): not this one's to remove.
        other->cut = true;
        CHECK(absl::IsUnavailable(co_await other->PutFile(path + "-2", bytes, 0700)));
        REQUIRE(Named(bin, "blob-2.up.").size() == 1);

        // The next upload succeeds; its placement removes both leftovers.
        t->cut = false;
        REQUIRE((co_await t->PutFile(path, bytes, 0700)).ok());
        CHECK(ReadFile(path) == bytes);
        CHECK(Named(bin, "blob.up.").empty());
        CHECK(Named(bin, "blob-2.up.").size() == 1);
        // Once: the names are forgotten after the script ran.
        REQUIRE((co_await t->PutFile(path + "-3", "x", 0600)).ok());
        CHECK(Named(bin, "blob-2.up.").size() == 1);
        other->cut = false;
        REQUIRE((co_await other->PutFile(path + "-2", bytes, 0700)).ok());
        CHECK(Named(bin, "blob-2.up.").empty());
      },
      [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
      });
  io.run();
}

}  // namespace
}  // namespace tether
