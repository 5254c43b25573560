#include "protocol/command_line.h"

#include <string>
#include <vector>

#include <doctest.h>

#include "protocol/exchange_format.h"
#include "tests/protocol/test_util.h"

namespace tether::protocol {
namespace {

using testing::Contains;
using Argv = std::vector<std::string>;

constexpr char kSup[] = "/tmp/bin/tether-supervisor-x86_64";
constexpr char kDir[] = "/tmp/tether-1000/run/0123456789abcdef";

Argv With(Argv rest) {
  rest.insert(rest.begin(), kSup);
  return rest;
}

struct Golden {
  Command command;
  Argv argv;  // after the binary
};

// Every form the host sends, exactly (PROTOCOL.md section 11).
std::vector<Golden> Goldens() {
  ExchangePollCommand empty_poll;
  empty_poll.state_dir = kDir;
  empty_poll.relay_id = "00ff00ff00ff00ff";
  empty_poll.in_offset = 0;
  empty_poll.out_offset = 18446744073709551615ULL;
  ExchangePollCommand poll = empty_poll;
  poll.in_offset = 123;
  poll.out_offset = 4567;
  poll.data = std::string("\0\0\0\0\xff\xff\xff\xff\0", 9);
  std::vector<Golden> g;
  g.push_back({VersionCommand{}, {"--version"}});
  g.push_back({LaunchCommand{}, {"launch"}});
  g.push_back({LaunchCommand{LaunchTunnel::kText, "", ""}, {"launch", "--text"}});
  g.push_back({LaunchCommand{LaunchTunnel::kDirect, "", ""}, {"launch", "--direct"}});
  g.push_back({LaunchCommand{LaunchTunnel::kExchange, "relay1", "/tmp/x.init"},
               {"launch", "--exchange", "relay1", "@/tmp/x.init"}});
  LaunchCommand rooted;
  rooted.state_root = "/tmp/tether-0/run";
  g.push_back({rooted, {"launch", "--state-root", "/tmp/tether-0/run"}});
  LaunchCommand checked = rooted;
  checked.tunnel = LaunchTunnel::kText;
  checked.expect_sha256 = std::string(64, 'a');
  g.push_back({checked, {"launch", "--text", "--state-root", "/tmp/tether-0/run", "--expect-sha256",
                         std::string(64, 'a')}});
  g.push_back({BridgeCommand{false, kDir}, {"bridge", kDir}});
  g.push_back({BridgeCommand{true, kDir}, {"bridge", "--text", kDir}});
  g.push_back({RelayCommand{kDir, "abc", "/tmp/r.init"}, {"relay", kDir, "abc", "@/tmp/r.init"}});
  g.push_back({empty_poll, {"exchange", kDir, "00ff00ff00ff00ff", "0", "18446744073709551615"}});
  // Base85 of the armor alphabet: 00000 for four zero bytes, _NsC0 for four
  // 0xFF, 00 for one zero byte (PROTOCOL.md section 9).
  g.push_back({poll, {"exchange", kDir, "00ff00ff00ff00ff", "123", "4567", "00000_NsC000"}});
  g.push_back({ExchangeCloseCommand{kDir, "abc"}, {"exchange", kDir, "abc", "close"}});
  g.push_back({SelftestCommand{}, {"selftest"}});
  return g;
}

TEST_CASE("ToArgv writes every command form exactly as pinned") {
  for (const Golden& g : Goldens()) {
    const std::string verb(VerbName(g.command));
    CAPTURE(verb);
    CHECK(ToArgv(g.command, kSup) == With(g.argv));
  }
}

TEST_CASE("ParseCommandLine reads every pinned form back to the same command") {
  for (const Golden& g : Goldens()) {
    const std::string verb(VerbName(g.command));
    CAPTURE(verb);
    absl::StatusOr<Command> got = ParseCommandLine(With(g.argv));
    REQUIRE_MESSAGE(got.ok(), got.status().ToString());
    CHECK(*got == g.command);
    CHECK(ToArgv(*got, kSup) == With(g.argv));
  }
}

TEST_CASE("round trip: every command survives ToArgv and ParseCommandLine, whatever its data") {
  ExchangePollCommand poll;
  poll.state_dir = "/";
  poll.relay_id = std::string(kMaxRelayIdBytes, 'z');
  for (std::size_t n : {1, 2, 3, 4, 5, 255, 256, 1000}) {
    poll.data.clear();
    for (std::size_t i = 0; i < n; ++i) poll.data.push_back(static_cast<char>(i * 37));
    const Argv argv = ToArgv(poll, "s");
    absl::StatusOr<Command> back = ParseCommandLine(argv);
    REQUIRE(back.ok());
    CHECK(*back == Command(poll));
  }
  poll.data.assign(kMaxExchangePollBytes, '\xff');
  absl::StatusOr<Command> back = ParseCommandLine(ToArgv(poll, "s"));
  REQUIRE(back.ok());
  CHECK(std::get<ExchangePollCommand>(*back).data.size() == kMaxExchangePollBytes);
}

TEST_CASE("accepts `version` as well as --version") {
  CHECK(ParseCommandLine(With({"version"})).value() == Command(VersionCommand{}));
}

// The error for argv (after the binary): kInvalidArgument containing `why`.
void CheckRefused(const Argv& rest, const std::string& why) {
  CAPTURE(why);
  absl::StatusOr<Command> got = ParseCommandLine(With(rest));
  REQUIRE_FALSE(got.ok());
  CHECK(absl::IsInvalidArgument(got.status()));
  CHECK_MESSAGE(Contains(got.status().message(), why), got.status().message());
}

TEST_CASE("refuses unknown verbs and flags with a message naming them") {
  CHECK(absl::IsInvalidArgument(ParseCommandLine(Argv{kSup}).status()));
  CHECK(absl::IsInvalidArgument(ParseCommandLine(Argv{}).status()));
  CheckRefused({"frob"}, "unknown verb 'frob'");
  CheckRefused({""}, "unknown verb ''");
  CheckRefused({std::string(1000, 'v')}, "unknown verb 'vvvv");
  CheckRefused({"launch", "--bogus"},
               "launch: unknown flag or flag out of place (expected [--text|--direct|--exchange ...] "
               "[--state-root DIR] [--expect-sha256 HEX]): '--bogus'");
  CheckRefused({"launch", "text"}, "launch: unknown flag");
  CheckRefused({"bridge", "--direct", kDir}, "bridge: unknown flag (expected --text): '--direct'");
  CheckRefused({"--VERSION"}, "unknown verb");
}

TEST_CASE("refuses missing operands, naming the one missing") {
  CheckRefused({"bridge"}, "bridge: missing STATE_DIR");
  CheckRefused({"bridge", "--text"}, "bridge: missing STATE_DIR");
  CheckRefused({"launch", "--exchange"}, "launch: missing RELAY_ID");
  CheckRefused({"launch", "--exchange", "r1"}, "launch: missing @INIT_FILE");
  CheckRefused({"relay", kDir, "r1"}, "relay: missing @INIT_FILE");
  CheckRefused({"relay"}, "relay: missing STATE_DIR");
  CheckRefused({"exchange", kDir, "r1"}, "exchange: missing IN_OFFSET");
  CheckRefused({"exchange", kDir, "r1", "0"}, "exchange: missing OUT_OFFSET");
}

TEST_CASE("refuses extra operands and flags out of place") {
  CheckRefused({"--version", "x"}, "--version: unexpected argument: 'x'");
  CheckRefused({"launch", "--text", "--direct"}, "launch: unknown flag or flag out of place");
  CheckRefused({"launch", "--exchange", "r1", "@/f", "x"}, "flag out of place (expected [--text");
  CheckRefused({"launch", "--expect-sha256", std::string(64, 'a'), "--state-root", "/r"}, "flag out of place");
  CheckRefused({"launch", "--state-root", "/r", "--text"}, "flag out of place");
  CheckRefused({"launch", "--state-root", "/r", "--state-root", "/r"}, "flag out of place");
  CheckRefused({"bridge", kDir, "--text"}, "bridge: unexpected argument: '--text'");
  CheckRefused({"relay", kDir, "r1", "@/f", "x"}, "relay: unexpected argument");
  CheckRefused({"exchange", kDir, "r1", "close", "0"}, "exchange: unexpected argument: '0'");
  CheckRefused({"exchange", kDir, "r1", "1", "2", "00", "x"}, "exchange: unexpected argument: 'x'");
}

TEST_CASE("refuses bad operands before anything runs") {
  CheckRefused({"bridge", "relative/dir"}, "STATE_DIR must be an absolute path: 'relative/dir'");
  CheckRefused({"bridge", ""}, "STATE_DIR must be an absolute path");
  CheckRefused({"relay", kDir, "R1", "@/f"}, "RELAY_ID must be 1..64 of [a-z0-9]: 'R1'");
  CheckRefused({"launch", "--exchange", "", "@/f"}, "RELAY_ID must be 1..64 of [a-z0-9]");
  CheckRefused({"launch", "--exchange", std::string(kMaxRelayIdBytes + 1, 'a'), "@/f"}, "RELAY_ID must be");
  CheckRefused({"launch", "--exchange", "../x", "@/f"}, "RELAY_ID must be");
  CheckRefused({"launch", "--exchange", "r1", "/f"}, "expected @ and the absolute path of the init file: '/f'");
  CheckRefused({"launch", "--exchange", "r1", "@f"}, "expected @ and the absolute path");
  CheckRefused({"launch", "--exchange", "r1", "@"}, "expected @ and the absolute path");
  CheckRefused({"launch", "--state-root", "run"}, "STATE_ROOT must be an absolute path: 'run'");
  CheckRefused({"launch", "--state-root"}, "launch: missing STATE_ROOT");
  CheckRefused({"launch", "--expect-sha256", "ABC"}, "SHA256 must be 64 lowercase hex digits: 'ABC'");
  CheckRefused({"launch", "--expect-sha256", std::string(64, 'A')}, "SHA256 must be 64 lowercase hex digits");
  CheckRefused({"launch", "--expect-sha256", std::string(63, 'a')}, "SHA256 must be 64 lowercase hex digits");
  CheckRefused({"launch", "--direct", "--state-root", "/r"}, "--state-root goes with the binary or --text launch");
  CheckRefused({"exchange", kDir, "r1", "-1", "0"}, "IN_OFFSET must be a decimal number below 2^64: '-1'");
  CheckRefused({"exchange", kDir, "r1", "0", "18446744073709551616"}, "OUT_OFFSET must be a decimal number");
  CheckRefused({"exchange", kDir, "r1", "0x10", "0"}, "IN_OFFSET must be");
  CheckRefused({"exchange", kDir, "r1", " 1", "0"}, "IN_OFFSET must be");
  CheckRefused({"exchange", kDir, "r1", "", "0"}, "IN_OFFSET must be");
  CheckRefused({"exchange", kDir, "r1", "0", "0", "0"}, "BASE85 is not valid base85");  // length 1 mod 5
  CheckRefused({"exchange", kDir, "r1", "0", "0", "ab~de"}, "BASE85 is not valid base85");
  CheckRefused({"exchange", kDir, "r1", "0", "0", ""}, "BASE85 is not valid base85");
}

TEST_CASE("refuses a poll over kMaxExchangePollBytes from its length, before decoding") {
  // 1 MiB + 1 byte is 1 MiB / 4 groups of 5 characters and a 2-character tail.
  CheckRefused({"exchange", kDir, "r1", "0", "0", std::string(kMaxExchangePollBytes / 4 * 5 + 2, '0')},
               "BASE85 holds more than 1048576 bytes");
  // Exactly the limit is fine.
  absl::StatusOr<Command> ok =
      ParseCommandLine(With({"exchange", kDir, "r1", "0", "0", std::string(kMaxExchangePollBytes / 4 * 5, '0')}));
  CHECK(ok.ok());
}

TEST_CASE("shows at most 80 characters of a bad argument") {
  absl::StatusOr<Command> got = ParseCommandLine(With({"bridge", std::string(10000, 'x')}));
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().message().size() < 200);
}

TEST_CASE("names each verb and has a usage line for each form") {
  CHECK(VerbName(Command(BridgeCommand{})) == "bridge");
  CHECK(VerbName(Command(ExchangeCloseCommand{})) == "exchange");
  for (const char* form : {"launch [--text|--direct]", "launch --exchange RELAY_ID @INIT_FILE",
                           "bridge [--text] STATE_DIR", "relay STATE_DIR RELAY_ID @INIT_FILE",
                           "exchange STATE_DIR RELAY_ID IN_OFFSET OUT_OFFSET [BASE85]",
                           "exchange STATE_DIR RELAY_ID close", "--version"}) {
    CHECK(Contains(std::string(CommandLineUsage()), form));
  }
}

TEST_CASE("selftest takes no operands or flags") {
  CHECK(VerbName(Command(SelftestCommand{})) == "selftest");
  CheckRefused({"selftest", "x"}, "selftest: unexpected argument: 'x'");
  CheckRefused({"selftest", "--json"}, "selftest: unexpected argument: '--json'");
  CheckRefused({"selftest", ""}, "selftest: unexpected argument: ''");
  CheckRefused({"SELFTEST"}, "unknown verb 'SELFTEST'");
  CHECK(Contains(std::string(CommandLineUsage()), "tether-supervisor selftest"));
}

TEST_CASE("ValidRelayId takes 1..64 of [a-z0-9]") {
  CHECK(ValidRelayId("0"));
  CHECK(ValidRelayId(std::string(64, 'a')));
  CHECK_FALSE(ValidRelayId(""));
  CHECK_FALSE(ValidRelayId(std::string(65, 'a')));
  CHECK_FALSE(ValidRelayId("a-b"));
  CHECK_FALSE(ValidRelayId("A"));
  CHECK_FALSE(ValidRelayId(std::string("a\0", 2)));
}

TEST_CASE("IsExecTag takes TETHER_EXEC_TAG= and 1..64 of [0-9a-f], nothing else") {
  CHECK(IsExecTag("TETHER_EXEC_TAG=0"));
  CHECK(IsExecTag("TETHER_EXEC_TAG=" + std::string(64, 'f')));
  CHECK(ExecTagEntry("00ff") == "TETHER_EXEC_TAG=00ff");
  CHECK_FALSE(IsExecTag("TETHER_EXEC_TAG="));
  CHECK_FALSE(IsExecTag("TETHER_EXEC_TAG=" + std::string(65, 'f')));
  CHECK_FALSE(IsExecTag("TETHER_EXEC_TAG=00FF"));
  CHECK_FALSE(IsExecTag("TETHER_EXEC_TAG=api-key"));
  CHECK_FALSE(IsExecTag("TETHER_EXEC_TAGS=00"));
  CHECK_FALSE(IsExecTag("XTETHER_EXEC_TAG=00"));
  CHECK_FALSE(IsExecTag("TETHER_EXEC_TAG"));
  CHECK_FALSE(IsExecTag(std::string("TETHER_EXEC_TAG=0\0", 18)));
}

}  // namespace
}  // namespace tether::protocol
