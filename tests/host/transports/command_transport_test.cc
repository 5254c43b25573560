// The command provider through `sh -c` on this machine (a "sandbox" whose
// native channel is a shell): arch detection, the private directory, the
// sha256-checked content-addressed upload and its reuse, exact argv quoting,
// and the supervisors embedded in the library.
#include "tether/command_transport.h"

#include <doctest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "host/transports/forwarding_transport.h"
#include "protocol/armor.h"
#include "tether/errors.h"
#include "tether/process.h"
#include "tether/supervisor_binary.h"

namespace tether {
namespace {

std::size_t CountOf(const std::string& hay, const std::string& needle) {
  std::size_t n = 0;
  for (std::size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}

namespace asio = boost::asio;
using asio::awaitable;

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A scratch TMPDIR for the "sandbox", and a log of every command line the
// transport runs through its channel.
struct Scratch {
  Scratch() {
    char tmpl[] = "/tmp/tether-command-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    dir = tmpl;
    log = dir + "/commands.log";
  }
  ~Scratch() { std::filesystem::remove_all(dir); }
  // sh -c 'log "$1"; run it' tether LINE, with TMPDIR pointing here.
  std::vector<std::string> Prefix(const std::string& filter = "") const {
    return {"sh", "-c",
            absl::StrCat("printf '%s\\n' \"$1\" >> '", log, "'; export TMPDIR='", dir, "'; ",
                         filter.empty() ? "exec sh -c \"$1\"" : filter),
            "tether-test"};
  }
  std::string Log() const { return ReadFile(log); }
  void ClearLog() const { std::filesystem::remove(log); }
  std::string dir, log;
};

template <typename Body>
void RunWith(const std::vector<std::string>& prefix, Body body) {
  asio::io_context io;
  CommandOptions o;
  o.prefix = prefix;
  auto t = MakeCommandTransport(io.get_executor(), o);
  REQUIRE(t.ok());
  bool done = false;
  asio::co_spawn(io, body(**t), [&](std::exception_ptr e) {
    done = true;
    if (e) std::rethrow_exception(e);
  });
  io.run();
  CHECK(done);
}

awaitable<std::string> RunToEnd(Transport& t, std::vector<std::string> argv) {
  StartOptions o;
  o.argv = std::move(argv);
  o.output_mode = OutputMode::kStream;
  o.output_format = OutputFormat::kBytes;
  auto p = co_await Process::Start(t, o);
  REQUIRE(p.ok());
  std::string out;
  while (true) {
    auto c = co_await (*p)->Read();
    REQUIRE(c.ok());
    if (!*c) break;
    out += (*c)->bytes;
  }
  CHECK((co_await (*p)->Wait())->code == 0);
  co_return out;
}

std::vector<std::string> PrintArgs() {
  return {"sh", "-c", "printf '[%s]' \"$@\"", "sh", "it's", "a \"b\" $HOME `x` \\ \n\t", "", "*"};
}

TEST_CASE("the command provider detects the architecture and makes a private directory") {
  Scratch s;
  RunWith(s.Prefix(), [&](Transport& t) -> awaitable<void> {
    absl::StatusOr<SandboxInfo> info = co_await t.Probe();
    REQUIRE(info.ok());
    struct utsname u;
    ::uname(&u);
    CHECK(info->arch == u.machine);
    CHECK(info->state_root == absl::StrCat(s.dir, "/tether-", ::getuid(), "/run"));
    struct stat st;
    REQUIRE(::lstat(info->state_root.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0700);
    CHECK(t.name() == "command");
  });
}

TEST_CASE("a symlink at the private directory's place is refused, not followed") {
  Scratch s;
  std::filesystem::create_directory(s.dir + "/elsewhere");
  std::filesystem::create_directory_symlink(s.dir + "/elsewhere", absl::StrCat(s.dir, "/tether-", ::getuid()));
  RunWith(s.Prefix(), [&](Transport& t) -> awaitable<void> {
    absl::StatusOr<SandboxInfo> info = co_await t.Probe();
    CHECK(!info.ok());
    CHECK(absl::StrContains(info.status().message(), "symlink"));
  });
  CHECK(std::filesystem::is_empty(s.dir + "/elsewhere"));
}

TEST_CASE("a relative TMPDIR is not used: the private directory goes to /tmp, nothing to the shell's directory") {
  Scratch s;
  // The channel's shell starts in s.dir with TMPDIR relative to it.
  const std::vector<std::string> prefix = {
      "sh", "-c", absl::StrCat("cd '", s.dir, "' && export TMPDIR=relative-tmp && exec sh -c \"$1\""),
      "tether-test"};
  RunWith(prefix, [&](Transport& t) -> awaitable<void> {
    absl::StatusOr<SandboxInfo> info = co_await t.Probe();
    REQUIRE_MESSAGE(info.ok(), info.status().ToString());
    CHECK(info->state_root == absl::StrCat("/tmp/tether-", ::getuid(), "/run"));
  });
  CHECK_FALSE(std::filesystem::exists(s.dir + "/relative-tmp"));
}

TEST_CASE("argv reaches the sandbox exactly through the shell command line") {
  Scratch s;
  RunWith(s.Prefix(), [&](Transport& t) -> awaitable<void> {
    const std::string out = co_await RunToEnd(t, PrintArgs());
    CHECK(out == "[it's][a \"b\" $HOME `x` \\ \n\t][][*]");
  });
}

TEST_CASE("the supervisor is uploaded once, verified, and reused by later starts") {
  Scratch s;
  RunWith(s.Prefix(), [&](Transport& t) -> awaitable<void> {
    co_await RunToEnd(t, PrintArgs());
    // Cold: the start script took the binary on its own stdin, in its one
    // call (start_script.h); no separate upload.
    CHECK(!absl::StrContains(s.Log(), "head -c"));
    CHECK(CountOf(s.Log(), "umask 077; u=") == 1);  // one script ran
    s.ClearLog();
    co_await RunToEnd(t, PrintArgs());
    CHECK(!absl::StrContains(s.Log(), "head -c"));  // same transport: not even checked
    CHECK(!absl::StrContains(s.Log(), "tether-have"));
  });
  s.ClearLog();
  RunWith(s.Prefix(), [&](Transport& t) -> awaitable<void> {
    co_await RunToEnd(t, PrintArgs());
    // A new host finds it in place, by its name, in the start script's one
    // call (the supervisor checks its own hash: no sha256sum in the shell).
    CHECK(!absl::StrContains(s.Log(), "head -c"));
    CHECK(!absl::StrContains(s.Log(), "tether-have"));
    CHECK(absl::StrContains(s.Log(), "tether-start"));
    // Installed under its content's name, 0700, nothing temporary left.
    absl::StatusOr<SandboxInfo> info = co_await t.Probe();
    REQUIRE(info.ok());
    absl::StatusOr<std::string> bytes = SupervisorBytes(info->arch);
    REQUIRE(bytes.ok());
    const std::string path = SupervisorInstallPath(*info, *bytes);
    CHECK(ReadFile(path) == *bytes);
    struct stat st;
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0700);
    std::size_t files = 0;
    for (const auto& e : std::filesystem::directory_iterator(info->bin_dir)) {
      (void)e;
      ++files;
    }
    CHECK(files == 1);
  });
}

TEST_CASE("an upload corrupted on the way fails its sha256 check and installs nothing") {
  Scratch s;
  // The channel flips every zero byte of the upload (and only of it), the
  // inline one (the start script's stdin) and then the separate one.
  // (stdbuf: a channel that holds bytes back would stall the script.)
  const std::string filter =
      "case \"$1\" in *'head -c'*|*upload-inline*) stdbuf -o0 tr '\\000' '\\001' | sh -c \"$1\";; "
      "*) exec sh -c \"$1\";; esac";
  RunWith(s.Prefix(filter), [&](Transport& t) -> awaitable<void> {
    StartOptions o;
    o.argv = {"true"};
    auto p = co_await Process::Start(t, o);
    REQUIRE(!p.ok());
    CHECK(ErrorCodeOf(p.status()) == ErrorCode::kProtocol);
    CHECK(absl::StrContains(p.status().message(), "sha256"));
    absl::StatusOr<SandboxInfo> info = co_await t.Probe();
    REQUIRE(info.ok());
    CHECK(std::filesystem::is_empty(info->bin_dir));  // no partial or temporary file
  });
}

TEST_CASE("an upload cut short by a full disk leaves no partial file") {
  Scratch s;
  // The sandbox's disk takes 64 KiB of the upload, then refuses (a file
  // size limit: the write fails as it would on a full disk).
  const std::string filter =
      "case \"$1\" in *'head -c'*|*upload-inline*) ulimit -f 128; exec sh -c \"$1\";; "
      "*) exec sh -c \"$1\";; esac";
  RunWith(s.Prefix(filter), [&](Transport& t) -> awaitable<void> {
    StartOptions o;
    o.argv = {"true"};
    auto p = co_await Process::Start(t, o);
    REQUIRE(!p.ok());
    absl::StatusOr<SandboxInfo> info = co_await t.Probe();
    REQUIRE(info.ok());
    CHECK(std::filesystem::is_empty(info->bin_dir));  // no partial or temporary file
  });
}

TEST_CASE("through a channel whose input passes only printable text, the upload goes as text and bytes stay exact") {
  Scratch s;
  // Everything the host sends loses its non-text bytes (a text-only API).
  const std::string filter = "stdbuf -o0 tr -cd '\\11\\12\\15\\40-\\176' | sh -c \"$1\"";
  asio::io_context io;
  CommandOptions o;
  o.prefix = s.Prefix(filter);
  o.tunnel = TunnelMode::kText;
  auto t = MakeCommandTransport(io.get_executor(), o);
  REQUIRE(t.ok());
  bool done = false;
  asio::co_spawn(io, [&]() -> awaitable<void> {
    const std::string out = co_await RunToEnd(**t, PrintArgs());
    CHECK(out == "[it's][a \"b\" $HOME `x` \\ \n\t][][*]");
    CHECK(absl::StrContains(s.Log(), "base64 -d"));  // uploaded as text
    CHECK(!absl::StrContains(s.Log(), "head -c"));
    StartOptions so;
    so.argv = {"sh", "-c", "printf '\\000\\377'; cat"};
    so.stdin_pipe = true;
    so.output_mode = OutputMode::kStream;
    so.output_format = OutputFormat::kBytes;
    auto p = co_await Process::Start(**t, so);
    REQUIRE(p.ok());
    CHECK((co_await (*p)->Write(std::string("\0\x01\xfe\xff", 4))).ok());
    CHECK((co_await (*p)->CloseStdin()).ok());
    std::string got;
    while (true) {
      auto c = co_await (*p)->Read();
      REQUIRE(c.ok());
      if (!*c) break;
      got += (*c)->bytes;
    }
    CHECK(got == std::string("\0\xff\0\x01\xfe\xff", 6));
    done = true;
  }, [](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  });
  io.run();
  CHECK(done);
}

TEST_CASE("the library carries both supervisors; TETHER_SUPERVISOR_DIR overrides them") {
  CHECK(ErrorCodeOf(SupervisorBytes("riscv64").status()) == ErrorCode::kUnsupported);
  if (!TETHER_TEST_EMBEDDED_SUPERVISORS) {
    MESSAGE("this build embeds no supervisors (TETHER_MUSL_SUPERVISORS=OFF)");
    return;
  }
  const char* dir = std::getenv("TETHER_SUPERVISOR_DIR");
  REQUIRE(dir != nullptr);
  const std::string saved = dir;
  ::unsetenv("TETHER_SUPERVISOR_DIR");
  struct Restore {  // (also when a REQUIRE below fails: later tests need it)
    std::string dir;
    ~Restore() { ::setenv("TETHER_SUPERVISOR_DIR", dir.c_str(), 1); }
  } restore{saved};
  for (const char* arch : {"x86_64", "aarch64"}) {
    absl::StatusOr<std::string> embedded = SupervisorBytes(arch);
    REQUIRE(embedded.ok());
    CHECK(embedded->size() > 100000);
    CHECK(embedded->substr(0, 4) == "\x7f" "ELF");
  }
}

TEST_CASE("the command provider refuses a bad configuration") {
  asio::io_context io;
  CHECK(ErrorCodeOf(MakeCommandTransport(io.get_executor(), CommandOptions{}).status()) ==
        ErrorCode::kInvalidArgument);
  CommandOptions o;
  o.prefix = {"sh", "-c"};
  o.arch = "mips";
  CHECK(ErrorCodeOf(MakeCommandTransport(io.get_executor(), o).status()) == ErrorCode::kInvalidArgument);
  CHECK(ShellQuote("a'b") == "'a'\\''b'");
}

}  // namespace
}  // namespace tether

namespace tether {
namespace {

// Every base85 word of a command line, decoded (polls carry host bytes so).
std::string DecodedWords(const std::string& log) {
  std::string out;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    for (absl::string_view word : absl::StrSplit(line, ' ')) {
      std::string w(word);
      if (!w.empty() && w.front() == '\'') w = w.substr(1, w.size() > 1 ? w.size() - 2 : 0);
      std::string bytes;
      if (w.size() >= 20 && protocol::Base85Decode(w, &bytes)) out += bytes;
    }
  }
  return out;
}

TEST_CASE("through text and exchange tunnels no command line carries the secret or the environment") {
  for (TunnelMode mode : {TunnelMode::kText, TunnelMode::kExchange}) {
    Scratch s;
    asio::io_context io;
    CommandOptions o;
    o.prefix = s.Prefix();
    o.tunnel = mode;
    auto t = MakeCommandTransport(io.get_executor(), o);
    REQUIRE(t.ok());
    std::string secret;
    StartOptions so;
    so.argv = {"sh", "-c", "printf %s \"$TETHER_TEST_VALUE\""};
    so.env = {{"TETHER_TEST_VALUE", "env-value-that-is-private-7f3a"}};
    so.output_mode = OutputMode::kStream;
    so.output_format = OutputFormat::kBytes;
    asio::co_spawn(io, [&]() -> awaitable<void> {
      auto p = co_await Process::Start(**t, so);
      REQUIRE(p.ok());
      absl::StatusOr<std::string> ref = (*p)->Reference();
      REQUIRE(ref.ok());
      const std::size_t k = ref->find("\"secret\":\"") + 10;
      secret = absl::HexStringToBytes(ref->substr(k, ref->find('"', k) - k));
      std::string out;
      while (true) {
        auto c = co_await (*p)->Read();
        REQUIRE(c.ok());
        if (!*c) break;
        out += (*c)->bytes;
      }
      CHECK(out == "env-value-that-is-private-7f3a");
      CHECK((co_await (*p)->Wait()).ok());
    }, [](std::exception_ptr e) { if (e) std::rethrow_exception(e); });
    io.run();
    REQUIRE(secret.size() >= 16);
    const std::string log = s.Log();
    const std::string decoded = DecodedWords(log);
    CHECK(log.find("env-value-that-is-private-7f3a") == std::string::npos);
    CHECK(decoded.find("env-value-that-is-private-7f3a") == std::string::npos);
    CHECK(decoded.find(secret) == std::string::npos);
    CHECK(log.find(absl::BytesToHexString(secret)) == std::string::npos);
    CHECK(log.find(absl::Base64Escape(secret)) == std::string::npos);
    // No private file of frames is left behind.
    std::error_code ec;
    for (const auto& e : std::filesystem::recursive_directory_iterator(s.dir, ec)) {
      CHECK_MESSAGE(e.path().string().find(".init") == std::string::npos, e.path().string());
    }
  }
}

// The exchange channel's close (`exchange DIR ID close`) is one command of
// its own; the first one fails here as an exec API or a cut would fail it.
class LoseFirstClose final : public internal::ForwardingTransport {
 public:
  using ForwardingTransport::ForwardingTransport;
  awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(std::vector<std::string> argv) override {
    if (argv.size() >= 2 && argv[1] == "exchange" && argv.back() == "close" && closes++ == 0) {
      co_return absl::UnavailableError("the exec call failed (test)");
    }
    co_return co_await inner().Exec(std::move(argv));
  }
  int closes = 0;
};

// Found by conformance.hostile-exchange (a close cut at once, 1 in 8): the
// relay kept the attachment, and a reopen after the host dropped its handle
// was BUSY for a whole lease (30 s).
TEST_CASE("through an exchange tunnel a lost close is asked again, so a reopen is not BUSY for a lease") {
  Scratch s;
  asio::io_context io;
  CommandOptions o;
  o.prefix = s.Prefix();
  o.tunnel = TunnelMode::kExchange;
  auto t = MakeCommandTransport(io.get_executor(), o);
  REQUIRE(t.ok());
  auto lossy_owner = std::make_shared<LoseFirstClose>(**t);
  LoseFirstClose& lossy = *lossy_owner;
  StartOptions so;
  so.argv = {"sh", "-c", "echo ready; read x; echo \"got:$x\""};
  so.stdin_pipe = true;
  so.output_mode = OutputMode::kStream;
  so.output_format = OutputFormat::kBytes;
  bool checked = false;
  asio::co_spawn(io, [&]() -> awaitable<void> {
    auto p = co_await Process::Start(lossy, so);
    REQUIRE(p.ok());
    std::string first;
    while (first.size() < 6) {
      auto c = co_await (*p)->Read();
      REQUIRE((c.ok() && *c));
      first += (*c)->bytes;
    }
    absl::StatusOr<std::string> ref = (*p)->Reference();
    REQUIRE(ref.ok());
    p->reset();  // no disconnect: the handle is dropped, its channel closed
    // The lease is 30 s: BUSY all through these 10 s unless the close was repeated.
    absl::StatusOr<std::unique_ptr<Process>> q = absl::UnavailableError("not tried");
    for (int i = 0; i < 200; ++i) {
      q = co_await Process::Reopen(lossy, *ref);
      if (ErrorCodeOf(q.status()) != ErrorCode::kBusy) break;
      asio::steady_timer pause(co_await asio::this_coro::executor, std::chrono::milliseconds(50));
      co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
    }
    REQUIRE_MESSAGE(q.ok(), q.status().ToString());
    CHECK(lossy.closes >= 2);
    REQUIRE((co_await (*q)->Write("x\n")).ok());
    REQUIRE((co_await (*q)->CloseStdin()).ok());
    std::string rest;
    while (true) {
      auto c = co_await (*q)->Read();
      REQUIRE(c.ok());
      if (!*c) break;
      rest += (*c)->bytes;
    }
    CHECK(first + rest == "ready\ngot:x\n");
    auto e = co_await (*q)->Wait();
    CHECK((e.ok() && e->code == 0));
    checked = true;
  }, [](std::exception_ptr e) { if (e) std::rethrow_exception(e); });
  io.run();
  CHECK(checked);
}

}  // namespace
}  // namespace tether
