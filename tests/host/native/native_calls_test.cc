// Native calls per operation (issue: "start in one native call"). On a real
// provider every Exec is an HTTP request or a container exec costing
// 50-500 ms, so these counts are tether's start latency. A counting
// decorator over the local provider's Exec does everything through its own
// Exec, as a command-channel provider does (the shared probe and upload
// included), and counts:
//
//   start, supervisor installed              1
//   start, cold (nothing in the sandbox)     1  (binary tunnel: the binary goes inline)
//   start, cold over a text tunnel           3  (the script, the upload, the script)
//   start, installed binary corrupted        3  (the same: the supervisor's self-check says so)
//   start, preinstalled (caller's path)      1  and nothing written for the binary
//   reopen (full or control: status, kill)   1
#include <doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/host/process/process_fixture.h"
#include "tether/shell_setup.h"
#include "tether/supervisor_binary.h"

namespace tether::testing {
namespace {

namespace fs = std::filesystem;

class CountingTransport final : public internal::ForwardingTransport {
 public:
  CountingTransport(Transport& inner, TunnelMode mode) : ForwardingTransport(inner), mode_(mode) {}
  ChannelCapabilities capabilities() const override { return CapabilitiesOf(mode_); }
  awaitable<absl::StatusOr<SandboxInfo>> Probe() override {
    co_return co_await ShellProbe(ExecShellRunner(*this), "counted", "");
  }
  awaitable<absl::Status> PutFile(std::string path, std::string_view bytes, int mode) override {
    ShellUploadOptions u;
    u.tunnel = mode_;
    co_return co_await ShellPutFile(ExecShellRunner(*this), std::move(path), bytes, mode, std::move(u));
  }
  awaitable<absl::Status> PutNewFile(std::string path, std::string_view bytes, int mode) override {
    ShellUploadOptions u;
    u.tunnel = mode_;
    u.known_missing = true;
    ++uploads;
    const int before = calls;
    absl::Status st = co_await ShellPutFile(ExecShellRunner(*this), std::move(path), bytes, mode, std::move(u));
    upload_calls += calls - before;
    co_return st;
  }
  awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(std::vector<std::string> argv) override {
    ++calls;
    co_return co_await inner().Exec(std::move(argv));
  }
  int calls = 0;
  int uploads = 0;       // PutNewFile calls
  int upload_calls = 0;  // the Execs they made (a text channel sends the binary in pieces)

 private:
  TunnelMode mode_;
};

// Runs `body` with a counting transport over the sandbox's local one.
void Counted(Sandbox& sb, TunnelMode mode, std::function<awaitable<void>(CountingTransport&)> body) {
  sb.Run([&](Transport& local) -> awaitable<void> {
    auto t = std::make_shared<CountingTransport>(local, mode);
    co_await body(*t);
  });
}

StartOptions Echo() {
  StartOptions o = Opts();
  o.argv = V("sh", "-c", "echo hi");
  return o;
}

awaitable<void> StartEcho(CountingTransport& t, int expected_calls, StartOptions o = Echo()) {
  t.calls = 0;
  absl::StatusOr<std::unique_ptr<Process>> p = co_await Process::Start(t, std::move(o));
  REQUIRE_MESSAGE(p.ok(), p.status());
  CHECK(t.calls == expected_calls);
  Output out = co_await ReadAll(**p);
  CHECK(out.out == "hi\n");
  absl::StatusOr<ExitStatus> e = co_await (*p)->Wait();
  REQUIRE(e.ok());
  CHECK(e->code == 0);
}

std::vector<fs::path> Binaries(const Sandbox& sb) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(sb.root() + "/bin", ec)) out.push_back(e.path());
  return out;
}

TEST_CASE("native calls: a start is one call, with the supervisor installed or cold") {
  Sandbox sb;
  Counted(sb, TunnelMode::kBinary, [&](CountingTransport& t) -> awaitable<void> {
    co_await StartEcho(t, 1);  // the script says "upload-inline", takes the binary and launches
    co_await StartEcho(t, 1);
    co_await StartEcho(t, 1);
  });
  CHECK(Binaries(sb).size() == 1);
  // A new host (a new transport) finds it in place: one call.
  Counted(sb, TunnelMode::kBinary, [&](CountingTransport& t) -> awaitable<void> { co_await StartEcho(t, 1); });
}

TEST_CASE("native calls: over a text tunnel a cold start is three calls, an installed one one") {
  Sandbox sb;
  Counted(sb, TunnelMode::kText, [&](CountingTransport& t) -> awaitable<void> {
    // No binary on a text stdin: the script, the upload, the script. The
    // upload itself is several calls there (base64 in pieces).
    t.upload_calls = 0;
    absl::StatusOr<std::unique_ptr<Process>> p = co_await Process::Start(t, Echo());
    REQUIRE_MESSAGE(p.ok(), p.status());
    CHECK(t.uploads == 1);
    CHECK(t.calls - t.upload_calls == 2);
    MESSAGE("text tunnel, cold: ", t.calls, " native calls, ", t.upload_calls, " of them the upload");
    CHECK((co_await (*p)->Wait()).ok());
    co_await StartEcho(t, 1);
  });
  Counted(sb, TunnelMode::kBinary, [&](CountingTransport& t) -> awaitable<void> { co_await StartEcho(t, 1); });
}

TEST_CASE("native calls: a corrupted installed supervisor is found by its own check and replaced") {
  Sandbox sb;
  Counted(sb, TunnelMode::kBinary, [&](CountingTransport& t) -> awaitable<void> { co_await StartEcho(t, 1); });
  const std::vector<fs::path> bins = Binaries(sb);
  REQUIRE(bins.size() == 1);
  {
    // Same size, one byte changed far from the ELF header: it still runs.
    // (Written beside it and renamed over it: a running binary cannot be
    // written in place.)
    std::ifstream in(bins[0], std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    bytes[bytes.size() - 100] ^= 0x5a;
    const fs::path tmp = bins[0].string() + ".tmp";
    std::ofstream(tmp, std::ios::binary) << bytes;
    fs::permissions(tmp, fs::perms::owner_all);
    fs::rename(tmp, bins[0]);
  }
  Counted(sb, TunnelMode::kBinary, [&](CountingTransport& t) -> awaitable<void> {
    co_await StartEcho(t, 3);  // "corrupt", the upload, the script
    co_await StartEcho(t, 1);
  });
}

TEST_CASE("native calls: reopen, status and kill through a reference are one call each") {
  Sandbox sb;
  Counted(sb, TunnelMode::kBinary, [&](CountingTransport& t) -> awaitable<void> {
    StartOptions o = Opts();
    o.argv = V("sh", "-c", "read x; echo got:$x");
    o.stdin_pipe = true;
    absl::StatusOr<std::unique_ptr<Process>> p = co_await Process::Start(t, o);
    REQUIRE(p.ok());
    absl::StatusOr<std::string> ref = (*p)->Reference();
    REQUIRE(ref.ok());
    co_await (*p)->Disconnect();
    p->reset();

    t.calls = 0;
    ReopenOptions control;
    control.control = true;
    absl::StatusOr<std::unique_ptr<Process>> c = co_await Process::Reopen(t, *ref, control);
    REQUIRE_MESSAGE(c.ok(), c.status());
    CHECK(t.calls == 1);
    absl::StatusOr<ProcessStatus> st = co_await (*c)->Status();
    REQUIRE(st.ok());
    CHECK(st->state == ProcessStatus::State::kRunning);
    CHECK(t.calls == 1);  // requests travel on the attachment: no native call
    co_await (*c)->Disconnect();

    t.calls = 0;
    absl::StatusOr<std::unique_ptr<Process>> q = co_await Process::Reopen(t, *ref);
    REQUIRE_MESSAGE(q.ok(), q.status());
    CHECK(t.calls == 1);
    REQUIRE((co_await (*q)->Write("x\n")).ok());
    REQUIRE((co_await (*q)->CloseStdin()).ok());
    Output out = co_await ReadAll(**q);
    CHECK(out.out == "got:x\n");
    absl::StatusOr<ExitStatus> e = co_await (*q)->Wait();
    REQUIRE(e.ok());
    CHECK(t.calls == 1);
  });
}

TEST_CASE("native calls: a preinstalled supervisor is used in one call and nothing is uploaded") {
  Sandbox sb;
  // The image's copy: the real supervisor, under a path of the caller's.
  absl::StatusOr<std::string> bytes = SupervisorBytes(
#if defined(__aarch64__)
      "aarch64"
#else
      "x86_64"
#endif
  );
  REQUIRE(bytes.ok());
  const fs::path image = fs::path(sb.root()) / "image" / "tether-supervisor";
  fs::create_directories(image.parent_path());
  std::ofstream(image, std::ios::binary) << *bytes;
  fs::permissions(image, fs::perms::owner_all);
  Counted(sb, TunnelMode::kBinary, [&](CountingTransport& t) -> awaitable<void> {
    StartOptions o = Echo();
    o.supervisor_path = image.string();
    o.upload_supervisor = false;
    co_await StartEcho(t, 1, o);
    // Uploads off and nothing preinstalled: a clear error, in one call.
    o.supervisor_path = (fs::path(sb.root()) / "nowhere" / "tether-supervisor").string();
    t.calls = 0;
    absl::StatusOr<std::unique_ptr<Process>> p = co_await Process::Start(t, o);
    REQUIRE(!p.ok());
    CHECK(absl::IsFailedPrecondition(p.status()));
    CHECK_MESSAGE(absl::StrContains(p.status().message(), "uploads are off"), p.status());
    CHECK_MESSAGE(absl::StrContains(p.status().message(), "not an executable file"), p.status());
    CHECK(t.calls == 1);
  });
  CHECK(Binaries(sb).empty());
}

}  // namespace
}  // namespace tether::testing
