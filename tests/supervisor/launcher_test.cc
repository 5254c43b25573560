#include "supervisor/launcher.h"
#include "supervisor/child.h"

#include <functional>
#include <string>

#include <doctest.h>

#include "tests/supervisor/test_util.h"

namespace tether::supervisor {
namespace {

using testing::Contains;

wire::Launch GoodLaunch() {
  wire::Launch l;
  l.set_launch_id("abc-DEF_0123456789");
  l.set_secret(std::string(32, 's'));
  l.add_argv("/bin/true");
  l.add_argv("");  // empty arguments after argv[0] are fine
  l.set_state_dir("/tmp/tether/run/abc");
  return l;
}

// ValidateLaunch of GoodLaunch() changed by `edit`: kInvalidArgument whose
// message contains `why`.
void CheckRejected(const std::function<void(wire::Launch&)>& edit, const std::string& why) {
  CAPTURE(why);
  wire::Launch l = GoodLaunch();
  edit(l);
  absl::Status st = ValidateLaunch(l);
  CHECK(absl::IsInvalidArgument(st));
  CHECK_MESSAGE(Contains(st.message(), why), st.message());
}

void CheckAccepted(const std::function<void(wire::Launch&)>& edit) {
  wire::Launch l = GoodLaunch();
  edit(l);
  absl::Status st = ValidateLaunch(l);
  CHECK_MESSAGE(st.ok(), st.ToString());
}

TEST_CASE("accepts a good launch") {
  CHECK(ValidateLaunch(GoodLaunch()).ok());
  CheckAccepted([](wire::Launch& l) {
    l.set_cwd("/tmp");
    wire::EnvVar* e = l.add_env();
    e->set_name("A");
    e->set_value("b");
    l.set_stdin_mode(wire::STDIN_PIPE);
    l.set_ring_bytes(123);
    l.set_linger_ms(5);
  });
}

TEST_CASE("rejects an empty or too long launch id") {
  CheckRejected([](wire::Launch& l) { l.clear_launch_id(); }, "launch id must be 1..64 bytes");
  CheckRejected([](wire::Launch& l) { l.set_launch_id(std::string(kMaxLaunchIdBytes + 1, 'a')); },
                "launch id must be 1..64 bytes");
  CheckAccepted([](wire::Launch& l) { l.set_launch_id(std::string(kMaxLaunchIdBytes, 'a')); });
  CheckAccepted([](wire::Launch& l) { l.set_launch_id("x"); });
}

TEST_CASE("rejects a launch id with characters outside [A-Za-z0-9_-]") {
  for (const std::string& id : {std::string("a/b"), std::string(".."), std::string("a.b"), std::string("a b"),
                                std::string("a\nb"), std::string("a\0b", 3), std::string("\xc3\xa9"),
                                std::string("a+b"), std::string("~")}) {
    CAPTURE(id);
    CheckRejected([&](wire::Launch& l) { l.set_launch_id(id); }, "launch id may hold only [A-Za-z0-9_-]");
  }
}

TEST_CASE("rejects a secret shorter than 16 or longer than 64 bytes") {
  CheckRejected([](wire::Launch& l) { l.clear_secret(); }, "secret must be 16..64 bytes");
  CheckRejected([](wire::Launch& l) { l.set_secret(std::string(kMinSecretBytes - 1, 's')); },
                "secret must be 16..64 bytes");
  CheckRejected([](wire::Launch& l) { l.set_secret(std::string(kMaxSecretBytes + 1, 's')); },
                "secret must be 16..64 bytes");
  CheckAccepted([](wire::Launch& l) { l.set_secret(std::string(kMinSecretBytes, '\0')); });
  CheckAccepted([](wire::Launch& l) { l.set_secret(std::string(kMaxSecretBytes, '\xff')); });
}

TEST_CASE("rejects an empty argv, an empty argv[0] and NUL bytes in arguments") {
  CheckRejected([](wire::Launch& l) { l.clear_argv(); }, "argv is empty");
  CheckRejected([](wire::Launch& l) { l.set_argv(0, ""); }, "argv[0] is empty");
  CheckRejected([](wire::Launch& l) { l.set_argv(0, std::string("/bin/true\0x", 11)); },
                "argv[0] contains a NUL byte");
  CheckRejected([](wire::Launch& l) { l.add_argv(std::string("a\0", 2)); }, "argv[2] contains a NUL byte");
  CheckRejected(
      [](wire::Launch& l) {
        for (std::size_t i = l.argv_size(); i <= kMaxArgs; ++i) l.add_argv("x");
      },
      "argv has more than 65536 entries");
}

TEST_CASE("rejects a relative, empty or NUL-holding state dir") {
  CheckRejected([](wire::Launch& l) { l.clear_state_dir(); }, "state_dir must be an absolute path");
  CheckRejected([](wire::Launch& l) { l.set_state_dir("tmp/state"); }, "state_dir must be an absolute path");
  CheckRejected([](wire::Launch& l) { l.set_state_dir("./state"); }, "state_dir must be an absolute path");
  CheckRejected([](wire::Launch& l) { l.set_state_dir(std::string("/tmp/a\0b", 8)); },
                "state_dir must be an absolute path");
}

TEST_CASE("rejects a cwd holding a NUL byte") {
  CheckRejected([](wire::Launch& l) { l.set_cwd(std::string("/tmp\0x", 6)); }, "cwd contains a NUL byte");
}

TEST_CASE("accepts a pty of a sane size and rejects zero or huge sizes") {
  wire::Launch l = GoodLaunch();
  l.mutable_pty()->set_cols(80);
  l.mutable_pty()->set_rows(24);
  CHECK(ValidateLaunch(l).ok());
  CheckRejected([](wire::Launch& l) { l.mutable_pty(); }, "pty size 0x0");
  CheckRejected(
      [](wire::Launch& l) {
        l.mutable_pty()->set_cols(80);
        l.mutable_pty()->set_rows(kMaxPtyCells + 1);
      },
      "is outside 1..");
}

}  // namespace
}  // namespace tether::supervisor
