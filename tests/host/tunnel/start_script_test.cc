// The start, reattach and cancel scripts (host/tunnel/start_script.h) run
// by a real sh against private directories made for each case, with stand-in
// supervisors (shell scripts that print how they were run), and the need
// line's parser on good and hostile lines.
#include "host/tunnel/start_script.h"

#include <doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "protocol/sha256.h"

namespace tether::tunnel {
namespace {

namespace fs = std::filesystem;

struct Sandbox {
  fs::path root;  // plays $TMPDIR; $HOME is root/home
  Sandbox() {
    char tmpl[] = "/tmp/tether-start-script-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    root = tmpl;
    fs::create_directories(root / "home");
  }
  ~Sandbox() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  std::string priv() const { return absl::StrCat(root.string(), "/tether-", ::getuid()); }

  // Runs `script` with sh in a clean environment; returns its stdout.
  std::string Run(const std::string& script, const std::string& path_dirs = "",
                  const std::string& stdin_bytes = "") const {
    const fs::path file = root / "script.sh";
    std::ofstream(file) << script;
    const fs::path in = root / "stdin";
    std::ofstream(in, std::ios::binary) << stdin_bytes;
    const std::string cmd = absl::StrCat("env -i TMPDIR='", root.string(), "' HOME='", (root / "home").string(),
                                         "' PATH='", path_dirs, path_dirs.empty() ? "" : ":",
                                         "/usr/bin:/bin' /bin/sh '", file.string(), "' <'", in.string(), "' 2>&1");
    std::string out;
    FILE* p = ::popen(cmd.c_str(), "r");
    REQUIRE(p != nullptr);
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    ::pclose(p);
    return out;
  }
};

// A stand-in supervisor: prints its arguments (and its version when asked).
std::string FakeSupervisor(const fs::path& path, const std::string& version_line) {
  fs::create_directories(path.parent_path());
  const std::string body = absl::StrCat("#!/bin/sh\nif [ \"$1\" = --version ]; then echo '", version_line,
                                        "'; exit 0; fi\necho \"ran $0 $*\"\n");
  std::ofstream(path) << body;
  ::chmod(path.c_str(), 0700);
  return body;
}

UploadableSupervisor Ours(const std::string& body) {
  return UploadableSupervisor{"x86_64", "tether-supervisor-test-x86_64-abc", protocol::Sha256Hex(body), body.size()};
}

StartScriptOptions Options(const std::string& body) {
  StartScriptOptions o;
  o.ours.push_back(Ours(body));
  o.arch = "x86_64";
  o.preinstalled = false;  // this machine's own /usr/libexec stays out of it
  return o;
}

TEST_CASE("start script: nothing installed asks for an upload into the private bin directory") {
  Sandbox sb;
  const std::string out = sb.Run(StartScript(Options("#!/bin/sh\n")));
  CHECK(out == absl::StrCat("tether-start-need upload x86_64 ", sb.priv(), "/bin\n"));
  struct stat st;
  REQUIRE(::lstat(sb.priv().c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  CHECK(fs::is_directory(sb.priv() + "/run"));
  CHECK(fs::is_empty(sb.priv() + "/bin"));  // the exec test leaves nothing behind
}

TEST_CASE("start script: our installed binary is launched with the state root and its hash") {
  Sandbox sb;
  const fs::path bin = fs::path(sb.priv()) / "bin" / "tether-supervisor-test-x86_64-abc";
  const std::string body = FakeSupervisor(bin, "unused");
  fs::create_directories(sb.priv() + "/run");
  ::chmod(sb.priv().c_str(), 0700);
  StartScriptOptions o = Options(body);
  CHECK(sb.Run(StartScript(o)) == absl::StrCat("ran ", bin.string(), " launch --state-root ", sb.priv(),
                                                "/run --expect-sha256 ", protocol::Sha256Hex(body), "\n"));
  o.text = true;
  CHECK(absl::StrContains(sb.Run(StartScript(o)), " launch --text --state-root "));
}

TEST_CASE("start script: a binary of the wrong size, a symlink or not executable is not ours") {
  Sandbox sb;
  const fs::path bin = fs::path(sb.priv()) / "bin" / "tether-supervisor-test-x86_64-abc";
  const std::string body = FakeSupervisor(bin, "unused");
  const std::string upload = absl::StrCat("tether-start-need upload x86_64 ", sb.priv(), "/bin\n");
  CHECK(sb.Run(StartScript(Options(body + "x"))) == upload);  // truncated or grown
  ::chmod(bin.c_str(), 0600);
  CHECK(sb.Run(StartScript(Options(body))) == upload);
  fs::rename(bin, sb.root / "elsewhere");
  fs::create_symlink(sb.root / "elsewhere", bin);
  CHECK(sb.Run(StartScript(Options(body))) == upload);
}

TEST_CASE("start script: a symlinked private root is passed over, never followed") {
  Sandbox sb;
  fs::create_directories(sb.root / "trap");
  fs::create_symlink(sb.root / "trap", sb.priv());
  const std::string out = sb.Run(StartScript(Options("#!/bin/sh\n")));
  // $TMPDIR's root is refused; the next candidate (/tmp) is used instead.
  CHECK(absl::StartsWith(out, "tether-start-need upload x86_64 /"));
  CHECK(!absl::StrContains(out, sb.priv()));
  CHECK(fs::is_empty(sb.root / "trap"));
}

TEST_CASE("start script: a preinstalled supervisor is used when its command line is recent enough") {
  Sandbox sb;
  const fs::path pre = sb.root / "image" / "tether-supervisor";
  FakeSupervisor(pre, "tether-supervisor 9.9.9 (protocol 1, command line 3)");
  StartScriptOptions o = Options("#!/bin/sh\n");
  o.named = pre.string();
  CHECK(sb.Run(StartScript(o)) == absl::StrCat("ran ", pre.string(), " launch --state-root ", sb.priv(), "/run\n"));
  // On PATH, found by name.
  o.named.clear();
  o.preinstalled = true;
  const std::string out = sb.Run(StartScript(o), pre.parent_path().string());
  // (/usr/libexec/tether on this machine, if any, would come first.)
  if (!fs::exists(kPreinstalledPaths[0]) && !fs::exists(kPreinstalledPaths[1])) {
    CHECK(out == absl::StrCat("ran ", pre.string(), " launch --state-root ", sb.priv(), "/run\n"));
  }
}

TEST_CASE("start script: an old or foreign preinstalled supervisor is an error or a fallback, as asked") {
  Sandbox sb;
  const fs::path pre = sb.root / "image" / "tether-supervisor";
  FakeSupervisor(pre, "tether-supervisor 0.1.0 (protocol 1)");
  StartScriptOptions o = Options("#!/bin/sh\n");
  o.named = pre.string();
  o.allow_upload = false;
  std::string out = sb.Run(StartScript(o));
  CHECK(absl::StartsWith(out, "tether-start-need nopreinstalled; "));
  CHECK(absl::StrContains(out, "says 'tether-supervisor 0.1.0 (protocol 1)'"));
  absl::StatusOr<StartNeed> need = ParseStartNeed(out.substr(0, out.size() - 1));
  REQUIRE(need.ok());
  CHECK(need->kind == StartNeed::Kind::kNoPreinstalled);
  // Allowed to upload: the fallback.
  o.allow_upload = true;
  CHECK(sb.Run(StartScript(o)) == absl::StrCat("tether-start-need upload x86_64 ", sb.priv(), "/bin\n"));
  // A binary that does not run here at all (another architecture).
  std::ofstream(pre) << "\x7f" "ELF garbage";
  o.allow_upload = false;
  out = sb.Run(StartScript(o));
  CHECK(absl::StrContains(out, "nothing: not a supervisor, or another architecture"));
  CHECK(std::count(out.begin(), out.end(), '\n') == 1);
}

TEST_CASE("start script: an architecture this host has no binary for") {
  Sandbox sb;
  StartScriptOptions o = Options("#!/bin/sh\n");
  o.arch = "riscv64";
  CHECK(sb.Run(StartScript(o)) == "tether-start-need arch riscv64\n");
}

TEST_CASE("start script: runs the supervisor through the emulator") {
  Sandbox sb;
  const fs::path bin = fs::path(sb.priv()) / "bin" / "tether-supervisor-test-x86_64-abc";
  const std::string body = FakeSupervisor(bin, "unused");
  StartScriptOptions o = Options(body);
  o.emulator = "/usr/bin/env";
  CHECK(absl::StartsWith(sb.Run(StartScript(o)), absl::StrCat("ran ", bin.string(), " launch ")));
}

TEST_CASE("reattach script: runs the bridge only for paths a start could have chosen") {
  Sandbox sb;
  const fs::path bin = fs::path(sb.priv()) / "bin" / "tether-supervisor-test-x86_64-abc";
  FakeSupervisor(bin, "unused");
  const std::string dir = sb.priv() + "/run/0123abcd";
  fs::create_directories(dir);
  ReattachScriptOptions o{bin.string(), dir, "", false, ""};
  CHECK(sb.Run(ReattachScript(o)) == absl::StrCat("ran ", bin.string(), " bridge ", dir, "\n"));
  o.text = true;
  CHECK(sb.Run(ReattachScript(o)) == absl::StrCat("ran ", bin.string(), " bridge --text ", dir, "\n"));
  o.text = false;
  // Another program, even one of ours elsewhere, is refused.
  const fs::path other = sb.root / "bin" / "tether-supervisor-evil";
  FakeSupervisor(other, "unused");
  o.supervisor = other.string();
  std::string out = sb.Run(ReattachScript(o));
  CHECK(absl::StartsWith(out, "tether-start-need refused the supervisor "));
  CHECK(!absl::StrContains(out, "ran "));
  // ...unless the caller names it as preinstalled.
  o.named = other.string();
  CHECK(sb.Run(ReattachScript(o)) == absl::StrCat("ran ", other.string(), " bridge ", dir, "\n"));
  // A directory outside the private roots.
  o = ReattachScriptOptions{bin.string(), (sb.root / "run" / "0123abcd").string(), "", false, ""};
  fs::create_directories(o.state_dir);
  CHECK(absl::StartsWith(sb.Run(ReattachScript(o)), "tether-start-need refused the state directory "));
  // A process that is gone.
  o.state_dir = sb.priv() + "/run/ffff";
  CHECK(sb.Run(ReattachScript(o)) == "tether-start-need gone\n");
}

TEST_CASE("cancel script: writes the marker in every private root that exists") {
  Sandbox sb;
  fs::create_directories(sb.priv() + "/run");
  ::chmod(sb.priv().c_str(), 0700);
  ::chmod((sb.priv() + "/run").c_str(), 0700);
  CHECK(sb.Run(CancelScript("0123abcd")) == "tether-cancel-ok\n");
  CHECK(fs::exists(sb.priv() + "/run/0123abcd.cancel"));
}

// Cold start in one call: the binary comes on the script's stdin after the
// token line, and the frames written before come again after it.
TEST_CASE("start script: cold with an upload token, the binary is taken inline and launched") {
  Sandbox sb;
  const std::string body = "#!/bin/sh\necho \"ran $0 $*\"; cat\n";
  StartScriptOptions o = Options(body);
  o.upload_token = std::string(32, 'f');
  // What the host wrote before the need line: frames, with NUL, newlines
  // and a line that is the token's prefix.
  const std::string before = std::string("T\xe7\0\0\x01\nffff\n\xff\x00zz", 16);
  const std::string frames = std::string("T\xe7 the frames again\0\n", 22);
  const std::string out = sb.Run(StartScript(o), "", absl::StrCat(before, "\n", o.upload_token, "\n", body, frames));
  const std::string bin = absl::StrCat(sb.priv(), "/bin/tether-supervisor-test-x86_64-abc");
  CHECK(out == absl::StrCat("tether-start-need upload-inline x86_64 ", sb.priv(), "/bin\n", "ran ", bin,
                            " launch --state-root ", sb.priv(), "/run --expect-sha256 ", protocol::Sha256Hex(body), "\n",
                            frames));
  std::ifstream f(bin, std::ios::binary);
  const std::string installed((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  CHECK(installed == body);
  struct stat st;
  REQUIRE(::lstat(bin.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  CHECK(std::distance(fs::directory_iterator(sb.priv() + "/bin"), fs::directory_iterator()) == 1);  // no temporary left
  // Installed now: the next start launches at once, reading nothing first.
  CHECK(absl::StartsWith(sb.Run(StartScript(o)), absl::StrCat("ran ", bin, " launch ")));
}

TEST_CASE("start script: an inline upload that cannot be taken falls back to a plain upload line") {
  Sandbox sb;
  const std::string body = "#!/bin/sh\necho ran\n";
  StartScriptOptions o = Options(body);
  o.upload_token = std::string(32, 'e');
  const std::string inline_line = absl::StrCat("tether-start-need upload-inline x86_64 ", sb.priv(), "/bin\n");
  const std::string plain_line = absl::StrCat("tether-start-need upload x86_64 ", sb.priv(), "/bin\n");
  // A binary changed on the way fails its hash: nothing installed.
  std::string mangled = body;
  mangled[3] ^= 1;
  CHECK(sb.Run(StartScript(o), "", absl::StrCat("\n", o.upload_token, "\n", mangled)) == inline_line + plain_line);
  CHECK(fs::is_empty(sb.priv() + "/bin"));
  // The stream ends inside the binary: the line the host answers normally.
  CHECK(sb.Run(StartScript(o), "", absl::StrCat("\n", o.upload_token, "\n", body.substr(0, 5))) ==
        inline_line + plain_line);
  CHECK(fs::is_empty(sb.priv() + "/bin"));
  // The host never sends the token (it closes): the script just ends.
  CHECK(sb.Run(StartScript(o), "", "frames only") == inline_line);
  // A dd that cannot count bytes exactly (busybox before 1.24, toybox):
  // never inline.
  const fs::path fake = sb.root / "fakebin";
  fs::create_directories(fake);
  std::ofstream(fake / "dd") << "#!/bin/sh\ncat\n";
  ::chmod((fake / "dd").c_str(), 0700);
  CHECK(sb.Run(StartScript(o), fake.string(), absl::StrCat("\n", o.upload_token, "\n", body)) == plain_line);
  // No token (a text tunnel): never inline.
  o.upload_token.clear();
  CHECK(sb.Run(StartScript(o)) == plain_line);
}

TEST_CASE("need lines: every kind parses; a mangled line is refused, not guessed at") {
  absl::StatusOr<StartNeed> i = ParseStartNeed("tether-start-need upload-inline x86_64 /tmp/tether-0/bin");
  REQUIRE(i.ok());
  CHECK(i->kind == StartNeed::Kind::kUpload);
  CHECK(i->inline_upload);
  CHECK(i->path == "/tmp/tether-0/bin");
  CHECK_FALSE(ParseStartNeed("tether-start-need upload x86_64 /tmp/tether-0/bin")->inline_upload);
  absl::StatusOr<StartNeed> n = ParseStartNeed("tether-start-need upload aarch64 /tmp/a b/tether-0/bin");
  REQUIRE(n.ok());
  CHECK(n->kind == StartNeed::Kind::kUpload);
  CHECK(n->arch == "aarch64");
  CHECK(n->path == "/tmp/a b/tether-0/bin");
  n = ParseStartNeed("tether-start-need corrupt /tmp/tether-0/bin/tether-supervisor-1-x86_64-ab");
  REQUIRE(n.ok());
  CHECK(n->kind == StartNeed::Kind::kCorrupt);
  CHECK(ParseStartNeed("tether-start-need noexec; /tmp/tether-0: mounted noexec")->kind == StartNeed::Kind::kNoExec);
  CHECK(ParseStartNeed("tether-start-need nostate")->kind == StartNeed::Kind::kNoState);
  CHECK(ParseStartNeed("tether-start-need arch mips")->kind == StartNeed::Kind::kArch);
  CHECK(ParseStartNeed("tether-start-need gone")->kind == StartNeed::Kind::kGone);
  const std::string bad[] = {
      "",
      "tether-start-need",
      "tether-start-need frobnicate",
      "tether-start-need upload x86_64",            // no directory
      "tether-start-need upload x86_64 relative",   // not absolute
      "tether-start-need upload x86_64 /tmp/../etc",
      "tether-start-need upload x86_64 /tmp/a\x1b[2J",
      "tether-start-need upload x/y /tmp/a",        // not an architecture
      "tether-start-need upload-inline x86_64",     // no directory
      "tether-start-need uploadinline x86_64 /tmp/a",
      "tether-start-need corrupt /a//b",
      "TETHER-START-NEED upload x86_64 /tmp",
      std::string("tether-start-need upload x86_64 /") + std::string(5000, 'a'),
  };
  for (const std::string& b : bad) {
    CAPTURE(b);
    CHECK(absl::IsDataLoss(ParseStartNeed(b).status()));
  }
}

}  // namespace
}  // namespace tether::tunnel
