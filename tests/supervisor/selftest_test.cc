#include "supervisor/selftest.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <string>
#include <vector>

#include <doctest.h>

#include "tests/build_paths.h"

#include "absl/strings/str_cat.h"
#include "tests/supervisor/test_util.h"

namespace tether::supervisor {
namespace {

using testing::Contains;
using testing::PathExists;
using testing::TempDir;
using Roots = std::vector<std::string>;

TEST_CASE("a check prints as one line: ok or missing, its name, its detail") {
  CHECK(FormatCheck({true, "proc", "fine"}) == "ok proc: fine");
  CHECK(FormatCheck({false, "pty", "posix_openpt: ENOENT (mount devpts)"}) ==
        "missing pty: posix_openpt: ENOENT (mount devpts)");
}

TEST_CASE("the exit status is 0 only when every check is ok") {
  CHECK(SelftestExitStatus({}) == 0);
  CHECK(SelftestExitStatus({{true, "a", ""}, {true, "b", ""}}) == 0);
  CHECK(SelftestExitStatus({{true, "a", ""}, {false, "b", ""}}) == 1);
}

TEST_CASE("EnvValue finds NAME=value and nothing that merely starts with NAME") {
  const std::vector<std::string> env = {"TMPDIRX=/no", "HOME=/root", "TMPDIR=", "PATH=/bin"};
  CHECK(EnvValue(env, "HOME") == std::optional<std::string>("/root"));
  CHECK(EnvValue(env, "TMPDIR") == std::optional<std::string>(""));
  CHECK_FALSE(EnvValue(env, "USER").has_value());
  CHECK_FALSE(EnvValue({"TMPDIR"}, "TMPDIR").has_value());
}

TEST_CASE("candidate roots come in the host's order: TMPDIR, /tmp, /var/tmp, /dev/shm, HOME/.cache") {
  CHECK(CandidateRoots(std::nullopt, std::nullopt) == Roots{"/tmp", "/var/tmp", "/dev/shm"});
  CHECK(CandidateRoots("/scratch", "/home/u") == Roots{"/scratch", "/tmp", "/var/tmp", "/dev/shm", "/home/u/.cache"});
  // Only absolute ones: a relative TMPDIR or HOME would depend on the cwd.
  CHECK(CandidateRoots("scratch", "home/u") == Roots{"/tmp", "/var/tmp", "/dev/shm"});
  CHECK(CandidateRoots("", "") == Roots{"/tmp", "/var/tmp", "/dev/shm"});
  // Each directory once, written without a trailing slash.
  CHECK(CandidateRoots("/tmp/", "/") == Roots{"/tmp", "/var/tmp", "/dev/shm", "/.cache"});
  CHECK(CandidateRoots("/var/tmp", "/root/") == Roots{"/var/tmp", "/tmp", "/dev/shm", "/root/.cache"});
}

TEST_CASE("refusals are named by their cause") {
  CHECK(RefusalReason(EROFS) == "read-only");
  CHECK(RefusalReason(ENOSPC) == "no space");
  CHECK(RefusalReason(ENOENT) == "does not exist");
  CHECK(Contains(RefusalReason(EACCES), "permission denied"));
  CHECK_FALSE(RefusalReason(EIO).empty());
}

TEST_CASE("the private-dir line names the root used and why each earlier candidate was refused") {
  const SelftestCheck first = PrivateDirCheck({{"/tmp", "/tmp/tether-0", ""}});
  CHECK(first.ok);
  CHECK(FormatCheck(first) == "ok private-dir: /tmp/tether-0");
  const SelftestCheck later = PrivateDirCheck(
      {{"/tmp", "/tmp/tether-0", "noexec"}, {"/var/tmp", "/var/tmp/tether-0", "read-only"},
       {"/dev/shm", "/dev/shm/tether-0", ""}});
  CHECK(later.ok);
  CHECK(FormatCheck(later) == "ok private-dir: /dev/shm/tether-0 (refused: /tmp: noexec; /var/tmp: read-only)");
}

TEST_CASE("the private-dir line is missing, naming every cause, when no candidate works") {
  const SelftestCheck none = PrivateDirCheck(
      {{"/tmp", "/tmp/tether-0", "noexec"}, {"/var/tmp", "/var/tmp/tether-0", "read-only"}});
  CHECK_FALSE(none.ok);
  CHECK(Contains(FormatCheck(none), "missing private-dir: no candidate can hold the private directory: "
                                    "/tmp: noexec; /var/tmp: read-only ("));
  CHECK(Contains(none.detail, "TMPDIR"));  // what to change
  CHECK_FALSE(PrivateDirCheck({}).ok);
}

const std::string kExe = ::tether::testing::kNativeSupervisorPath;
const std::string kTether = absl::StrCat("tether-", ::geteuid());

TEST_CASE("ProbeRoot accepts a writable directory that can execute, and leaves nothing behind") {
  TempDir t;
  const RootVerdict v = ProbeRoot(t.path(), kExe);
  CHECK_MESSAGE(v.refused.empty(), v.refused);
  CHECK(v.root == t / kTether);
  CHECK_FALSE(PathExists(t / kTether));
}

TEST_CASE("ProbeRoot uses an existing root of ours, fixing its mode as a launch would") {
  TempDir t;
  REQUIRE(::mkdir((t / kTether).c_str(), 0755) == 0);
  REQUIRE(::chmod((t / kTether).c_str(), 0755) == 0);
  const RootVerdict v = ProbeRoot(t.path(), kExe);
  CHECK_MESSAGE(v.refused.empty(), v.refused);
  struct stat st {};
  REQUIRE(::lstat((t / kTether).c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  CHECK(::rmdir((t / kTether).c_str()) == 0);  // kept, and empty
}

TEST_CASE("ProbeRoot refuses a missing candidate, a file, a symlinked root and someone else's root") {
  TempDir t;
  CHECK(ProbeRoot(t / "absent", kExe).refused == "does not exist");
  std::ofstream(t / "file") << "x";
  CHECK(ProbeRoot(t / "file", kExe).refused == "not a directory");

  REQUIRE(::mkdir((t / "linked").c_str(), 0700) == 0);
  REQUIRE(::mkdir((t / "elsewhere").c_str(), 0700) == 0);
  REQUIRE(::symlink((t / "elsewhere").c_str(), (t / "linked/" + kTether).c_str()) == 0);
  CHECK(ProbeRoot(t / "linked", kExe).refused == kTether + " is a symlink");

  REQUIRE(::mkdir((t / "plain").c_str(), 0700) == 0);
  std::ofstream(t / "plain/" + kTether) << "x";
  CHECK(ProbeRoot(t / "plain", kExe).refused == kTether + " is not a directory");

  if (::geteuid() == 0) {
    REQUIRE(::mkdir((t / "theirs").c_str(), 0700) == 0);
    REQUIRE(::mkdir((t / "theirs/" + kTether).c_str(), 0700) == 0);
    REQUIRE(::chown((t / "theirs/" + kTether).c_str(), 4321, 4321) == 0);
    CHECK(ProbeRoot(t / "theirs", kExe).refused == kTether + " is owned by uid 4321, not by us");
  }
}

TEST_CASE("ProbeRoot refuses a directory whose copy of the binary does not run, saying why") {
  TempDir t;
  REQUIRE(::mkdir((t / "c").c_str(), 0700) == 0);
  const RootVerdict v = ProbeRoot(t / "c", "/bin/false");
  CHECK(v.refused == "a file executed there exited 1");
  CHECK_FALSE(PathExists(t / "c/" + kTether));
}

TEST_CASE("ProbeRoot accepts a directory where only a script runs (a binary the kernel cannot load, as under qemu-user)") {
  TempDir t;
  std::ofstream(t / "foreign") << "not an executable the kernel knows\n";
  REQUIRE(::mkdir((t / "c").c_str(), 0700) == 0);
  const RootVerdict v = ProbeRoot(t / "c", t / "foreign");
  CHECK_MESSAGE(v.refused.empty(), v.refused);
  CHECK_FALSE(PathExists(t / "c/" + kTether));
}

TEST_CASE("this machine has what the supervisor needs") {
  for (const SelftestCheck& c : {CheckProc(), CheckPty(), CheckSubreaper(), CheckSignals(), CheckShell("/bin/sh")}) {
    CHECK_MESSAGE(c.ok, FormatCheck(c));
  }
}

TEST_CASE("a missing shell is reported with what to change") {
  const SelftestCheck c = CheckShell("/nonexistent/sh");
  CHECK_FALSE(c.ok);
  CHECK(FormatCheck(c) ==
        "missing exec: /nonexistent/sh not found (install a POSIX shell at /nonexistent/sh: the host's setup "
        "commands run it)");
}

}  // namespace
}  // namespace tether::supervisor
