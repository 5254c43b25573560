// Fuzz target: ParseCommandLine (protocol/command_line.h) over hostile argv.
//
// Input: argv after the binary, arguments separated by NUL bytes (a real
// argv cannot hold NUL either). Parsing must never crash; whatever parses
// must satisfy the grammar's rules (absolute paths, valid relay ids, a poll
// within kMaxExchangePollBytes), and ToArgv of it must parse back to the
// same command (ToArgv itself CHECKs that).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "protocol/command_line.h"
#include "protocol/exchange_format.h"

namespace {

constexpr char kFuzzTarget[] = "command_line";

using namespace tether::protocol;

bool AbsolutePath(const std::string& p) { return !p.empty() && p[0] == '/'; }

struct CheckRules {
  void operator()(const VersionCommand&) const {}
  void operator()(const LaunchCommand& c) const {
    if (c.tunnel == LaunchTunnel::kExchange) {
      FUZZ_CHECK(ValidRelayId(c.relay_id));
      FUZZ_CHECK(AbsolutePath(c.init_file));
    } else {
      FUZZ_CHECK(c.relay_id.empty() && c.init_file.empty());
    }
  }
  void operator()(const BridgeCommand& c) const { FUZZ_CHECK(AbsolutePath(c.state_dir)); }
  void operator()(const RelayCommand& c) const {
    FUZZ_CHECK(AbsolutePath(c.state_dir));
    FUZZ_CHECK(ValidRelayId(c.relay_id));
    FUZZ_CHECK(AbsolutePath(c.init_file));
  }
  void operator()(const ExchangePollCommand& c) const {
    FUZZ_CHECK(AbsolutePath(c.state_dir));
    FUZZ_CHECK(ValidRelayId(c.relay_id));
    FUZZ_CHECK(c.data.size() <= kMaxExchangePollBytes);
  }
  void operator()(const ExchangeCloseCommand& c) const {
    FUZZ_CHECK(AbsolutePath(c.state_dir));
    FUZZ_CHECK(ValidRelayId(c.relay_id));
  }
  void operator()(const SelftestCommand&) const {}
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> argv{"tether-supervisor"};
  while (true) {
    const std::size_t nul = in.find('\0');
    argv.emplace_back(in.substr(0, nul));
    if (nul == std::string_view::npos) break;
    in.remove_prefix(nul + 1);
  }
  absl::StatusOr<Command> cmd = ParseCommandLine(argv);
  if (!cmd.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(cmd.status()));
    FUZZ_CHECK(!cmd.status().message().empty());
    FUZZ_CHECK(cmd.status().message().size() < 400);  // bad arguments are echoed bounded
    return 0;
  }
  std::visit(CheckRules{}, *cmd);
  const std::vector<std::string> again = ToArgv(*cmd, "/s");  // CHECKs the round trip
  absl::StatusOr<Command> back = ParseCommandLine(again);
  FUZZ_CHECK(back.ok() && *back == *cmd);
  return 0;
}
