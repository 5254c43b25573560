// The shared probe and upload (include/tether/shell_setup.h): the probe's parser on
// good and hostile outputs, and both run through a plain Transport::Exec
// (the local provider's), as any later provider would use them.
#include "tether/shell_setup.h"

#include <doctest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "tether/local_transport.h"

namespace tether {
namespace {

namespace asio = boost::asio;

TEST_CASE("the probe parser takes a well-formed answer") {
  absl::StatusOr<SandboxInfo> i = ParseProbeOutput("x86_64\n/tmp/tether-1000\ntether-probe-ok\n", "", "sb");
  REQUIRE(i.ok());
  CHECK(i->arch == "x86_64");
  CHECK(i->state_root == "/tmp/tether-1000/run");
  CHECK(i->bin_dir == "/tmp/tether-1000/bin");
  // A login banner before it, no final newline, other names for the arches.
  i = ParseProbeOutput("Welcome!\nmotd line\narm64\n/var/tmp/tether-0\ntether-probe-ok", "", "sb");
  REQUIRE(i.ok());
  CHECK(i->arch == "aarch64");
  i = ParseProbeOutput("amd64\n/t/tether-5\ntether-probe-ok\n", "", "sb");
  REQUIRE(i.ok());
  CHECK(i->arch == "x86_64");
  // The configured arch wins over the detected one.
  i = ParseProbeOutput("x86_64\n/t/tether-5\ntether-probe-ok\n", "aarch64", "sb");
  REQUIRE(i.ok());
  CHECK(i->arch == "aarch64");
}

TEST_CASE("the probe parser refuses hostile and broken answers") {
  const std::string bad[] = {
      "",
      "tether-probe-ok\n",
      "x86_64\ntether-probe-ok\n",
      "x86_64\n/tmp/tether-1\n",                                // no marker
      "x86_64\n/tmp/tether-1\ntether-probe-ok\ntrailing\n",      // marker not last
      "tether-probe-bad /tmp/tether-1 is a symlink or not ours\n",
      "x86_64\nrelative/dir\ntether-probe-ok\n",
      "x86_64\n/tmp/../etc\ntether-probe-ok\n",
      "x86_64\n/tmp/./x\ntether-probe-ok\n",
      "x86_64\n/tmp//x\ntether-probe-ok\n",
      "x86_64\n/tmp/x/\ntether-probe-ok\n",
      "x86_64\n/\ntether-probe-ok\n",
      "x86_64\n/tmp/a\x1b[2Jb\ntether-probe-ok\n",               // control characters
      std::string("x86_64\n/tmp/a\0b\ntether-probe-ok\n", 30),  // a NUL
      "x86_64\n/" + std::string(5000, 'a') + "\ntether-probe-ok\n",
      "x86 64\n/tmp/tether-1\ntether-probe-ok\n",               // not a word
      "$(reboot)\n/tmp/tether-1\ntether-probe-ok\n",
      "../../bin\n/tmp/tether-1\ntether-probe-ok\n",
      std::string(100, 'a') + "\n/tmp/tether-1\ntether-probe-ok\n",
  };
  for (const std::string& out : bad) {
    CAPTURE(out.substr(0, 80));
    absl::StatusOr<SandboxInfo> i = ParseProbeOutput(out, "", "sb");
    CHECK(!i.ok());
    if (!i.ok()) {
      CHECK(absl::IsUnavailable(i.status()));
      // What the sandbox said is shown escaped: no raw control characters.
      for (char c : i.status().message()) CHECK((static_cast<unsigned char>(c) >= 0x20 || c == '\n'));
    }
  }
}

struct Scratch {
  Scratch() {
    char tmpl[] = "/tmp/tether-shell-setup-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    dir = tmpl;
    old_tmpdir = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "";
    had_tmpdir = std::getenv("TMPDIR") != nullptr;
    ::setenv("TMPDIR", dir.c_str(), 1);  // the "sandbox"'s TMPDIR (the local Exec passes our environment)
  }
  ~Scratch() {
    if (had_tmpdir) ::setenv("TMPDIR", old_tmpdir.c_str(), 1); else ::unsetenv("TMPDIR");
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::string dir, old_tmpdir;
  bool had_tmpdir = false;
};

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST_CASE("probe and upload work over any Transport::Exec") {
  Scratch s;
  asio::io_context io;
  absl::StatusOr<std::shared_ptr<Transport>> local = MakeLocalTransport(io.get_executor(), {s.dir + "/local"});
  REQUIRE(local.ok());
  std::string bytes;
  for (int i = 0; i < 300000; ++i) bytes.push_back(static_cast<char>(i * 7 + (i >> 8)));
  std::size_t progress_calls = 0;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    ShellRunner run = ExecShellRunner(**local, [&](std::size_t, std::size_t) { ++progress_calls; });
    absl::StatusOr<SandboxInfo> info = co_await ShellProbe(run, "test", "");
    REQUIRE(info.ok());
    CHECK(info->bin_dir == absl::StrCat(s.dir, "/tether-", ::geteuid(), "/bin"));
    struct stat st {};
    CHECK(::stat(info->bin_dir.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0700);

    std::set<std::string> installed;
    const std::string path = info->bin_dir + "/blob";
    ShellUploadOptions o;
    o.installed = &installed;
    CHECK((co_await ShellPutFile(run, path, bytes, 0700, o)).ok());
    CHECK(ReadFile(path) == bytes);
    CHECK(::stat(path.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0700);
    CHECK(installed.size() == 1);
    // Again: known, nothing runs. Then found in place by a fresh cache.
    CHECK((co_await ShellPutFile(run, path, bytes, 0700, o)).ok());
    ShellUploadOptions fresh;
    CHECK((co_await ShellPutFile(run, path, bytes, 0700, fresh)).ok());

    // As text (base64 pieces in command lines), a small file on stdin.
    ShellUploadOptions text;
    text.tunnel = TunnelMode::kText;
    const std::string tpath = info->bin_dir + "/blob-text";
    CHECK((co_await ShellPutFile(run, tpath, bytes, 0600, text)).ok());
    CHECK(ReadFile(tpath) == bytes);
    const std::string small = info->bin_dir + "/small";
    CHECK((co_await ShellPutFile(run, small, std::string("secret\0bytes", 12), 0600, text)).ok());
    CHECK(ReadFile(small) == std::string("secret\0bytes", 12));
  }, [](std::exception_ptr e) { if (e) std::rethrow_exception(e); });
  io.run();
  CHECK(progress_calls > 0);
  // No temporary or partial file is left beside them.
  std::size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(absl::StrCat(s.dir, "/tether-", ::geteuid(), "/bin"))) {
    (void)e;
    ++files;
  }
  CHECK(files == 3);
}

// A channel that answers `said`, then fails its next read with `end`
// (a stream cut, or an answer lost after the script ran), recording what
// was written to it.
class CutAnswerChannel final : public Channel {
 public:
  CutAnswerChannel(std::string said, absl::Status end) : said_(std::move(said)), end_(std::move(end)) {}
  asio::awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf) override {
    if (said_.empty()) {
      if (end_.ok()) co_return std::size_t{0};  // (a clean end: EOF)
      co_return end_;
    }
    const std::size_t n = std::min(buf.size(), said_.size());
    std::memcpy(buf.data(), said_.data(), n);
    said_.erase(0, n);
    co_return n;
  }
  asio::awaitable<absl::Status> Write(std::string_view bytes) override {
    written += bytes;
    co_return absl::OkStatus();
  }
  void CloseWrite() override { eof = true; }
  void Close() override { closed = true; }
  std::string Diagnostics() const override { return "sh: cut"; }
  std::string written;
  bool eof = false, closed = false;

 private:
  std::string said_;
  absl::Status end_;
};

TEST_CASE("a setup command whose answer is cut is a cut, not a broken sandbox") {
  // Found by chaos.boxd: a binary upload whose Exec answer was lost
  // (UNAVAILABLE after the script ran) read as an answer without
  // "tether-put-ok", and the start failed as a corrupt upload (PROTOCOL)
  // instead of the honest UNAVAILABLE that a retry or a check handles.
  asio::io_context io;
  const auto run_on = [&](CutAnswerChannel& c, std::string_view input) {
    absl::StatusOr<ScriptResult> r = absl::UnknownError("not run");
    asio::co_spawn(io, [&]() -> asio::awaitable<void> { r = co_await RunScriptOn(c, input, nullptr); },
                   [](std::exception_ptr e) { if (e) std::rethrow_exception(e); });
    io.restart();
    io.run();
    return r;
  };
  // The answer is kept as far as it came, and the cut is said.
  for (const std::string said : {std::string(), std::string("tether-pu")}) {
    CutAnswerChannel c(said, absl::InternalError("boxd: Exec: Received RST_STREAM with error code 2"));
    absl::StatusOr<ScriptResult> r = run_on(c, "input bytes");
    CHECK(c.written == "input bytes");
    CHECK(c.eof);
    CHECK(c.closed);
    REQUIRE(r.ok());
    CHECK(r->out == said);
    CHECK(absl::IsUnavailable(r->cut));
    CHECK(std::string(r->cut.message()).find("RST_STREAM") != std::string::npos);
  }
  // A whole answer cut at its very end is still that answer (the marker came).
  CutAnswerChannel whole("tether-put-ok\n", absl::UnavailableError("cut"));
  absl::StatusOr<ScriptResult> r = run_on(whole, "");
  REQUIRE(r.ok());
  CHECK(r->out == "tether-put-ok\n");
  CHECK_FALSE(r->cut.ok());
  // An answer that ends cleanly is an answer, whatever it lacks.
  CutAnswerChannel clean("tether-put-bad 00\n", absl::OkStatus());
  r = run_on(clean, "");
  REQUIRE(r.ok());
  CHECK(r->cut.ok());
  // Through the uploads: a cut answer without the marker is UNAVAILABLE;
  // a clean one without it is still DATA_LOSS (a sandbox that answered
  // wrong); a cut one with it is a success.
  const auto put_through = [&](std::string said, absl::Status end, TunnelMode mode) {
    ShellRunner run = [said, end](std::string, std::string_view input) -> asio::awaitable<absl::StatusOr<ScriptResult>> {
      CutAnswerChannel c(said, end);
      co_return co_await RunScriptOn(c, input, nullptr);
    };
    absl::Status st = absl::UnknownError("not run");
    ShellUploadOptions o;
    o.known_missing = true;
    o.tunnel = mode;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> { st = co_await ShellPutFile(run, "/x/bin/blob", "bytes", 0700, o); },
                   [](std::exception_ptr e) { if (e) std::rethrow_exception(e); });
    io.restart();
    io.run();
    return st;
  };
  for (TunnelMode mode : {TunnelMode::kBinary, TunnelMode::kText}) {
    absl::Status lost = put_through("", absl::UnavailableError("emulated: the call took effect, its answer was lost"), mode);
    CHECK(absl::IsUnavailable(lost));
    CHECK(std::string(lost.message()).find("answer was lost") != std::string::npos);
    CHECK(std::string(lost.message()).find("sh: cut") != std::string::npos);
    CHECK(absl::IsDataLoss(put_through("tether-put-bad 00\n", absl::OkStatus(), mode)));
    CHECK(put_through("tether-put-ok\n", absl::InternalError("RST_STREAM"), mode).ok());
  }
}

TEST_CASE("a runner that reports a failed script makes probe fail with its diagnostics") {
  asio::io_context io;
  ShellRunner run = [](std::string, std::string_view) -> asio::awaitable<absl::StatusOr<ScriptResult>> {
    ScriptResult r;
    r.out = "tether-probe-bad /tmp/tether-1 is a symlink or not ours\n";
    r.diag = "sh: oops";
    r.exit_code = 1;
    co_return r;
  };
  absl::Status st;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> { st = (co_await ShellProbe(run, "sb", "")).status(); },
                 [](std::exception_ptr e) { if (e) std::rethrow_exception(e); });
  io.run();
  CHECK(absl::IsUnavailable(st));
  CHECK(std::string(st.message()).find("symlink or not ours") != std::string::npos);
  CHECK(std::string(st.message()).find("sh: oops") != std::string::npos);
  CHECK(std::string(st.message()).find("exit status 1") != std::string::npos);
}

}  // namespace
}  // namespace tether
