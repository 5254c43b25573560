#include "protocol/command_line.h"

#include <charconv>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "protocol/armor.h"
#include "protocol/exchange_format.h"
#include "protocol/status_macros.h"

namespace tether::protocol {
namespace {

constexpr std::string_view kUsage =
    "usage: tether-supervisor launch [--text|--direct] [--state-root DIR] [--expect-sha256 HEX]\n"
    "         (reads a Launch frame on stdin)\n"
    "       tether-supervisor launch --exchange RELAY_ID @INIT_FILE\n"
    "       tether-supervisor bridge [--text] STATE_DIR\n"
    "       tether-supervisor relay STATE_DIR RELAY_ID @INIT_FILE\n"
    "       tether-supervisor exchange STATE_DIR RELAY_ID IN_OFFSET OUT_OFFSET [BASE85]\n"
    "       tether-supervisor exchange STATE_DIR RELAY_ID close\n"
    "       tether-supervisor --version\n"
    "       tether-supervisor selftest  (checks this image: one line per requirement)\n";

bool ValidPath(std::string_view p) { return !p.empty() && p[0] == '/' && p.find('\0') == std::string_view::npos; }

// The operands after the verb and its flags, consumed in order.
class Operands {
 public:
  Operands(absl::string_view verb, std::span<const std::string> rest) : verb_(verb), rest_(rest) {}

  absl::StatusOr<std::string> Next(absl::string_view what) {
    if (next_ == rest_.size()) return absl::InvalidArgumentError(absl::StrCat(verb_, ": missing ", what));
    return rest_[next_++];
  }
  absl::StatusOr<std::string> StateDir() {
    ASSIGN_OR_RETURN(std::string dir, Next("STATE_DIR"));
    if (!ValidPath(dir)) return Bad("STATE_DIR must be an absolute path", dir);
    return dir;
  }
  absl::StatusOr<std::string> RelayId() {
    ASSIGN_OR_RETURN(std::string id, Next("RELAY_ID"));
    if (!ValidRelayId(id)) return Bad("RELAY_ID must be 1..64 of [a-z0-9]", id);
    return id;
  }
  absl::StatusOr<std::string> InitFile() {
    ASSIGN_OR_RETURN(std::string at, Next("@INIT_FILE"));
    if (at.size() < 2 || at[0] != '@' || !ValidPath(std::string_view(at).substr(1))) {
      return Bad("expected @ and the absolute path of the init file", at);
    }
    return at.substr(1);
  }
  absl::StatusOr<std::uint64_t> Offset(absl::string_view what) {
    ASSIGN_OR_RETURN(std::string s, Next(what));
    std::uint64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size()) {
      return Bad(absl::StrCat(what, " must be a decimal number below 2^64"), s);
    }
    return v;
  }
  bool more() const { return next_ < rest_.size(); }
  absl::Status Done() const {
    if (!more()) return absl::OkStatus();
    return Bad("unexpected argument", rest_[next_]);
  }
  absl::Status Bad(absl::string_view why, absl::string_view arg) const {
    // Bounded: argv may be long (a poll's base85) and is not ours to echo whole.
    constexpr std::size_t kShown = 80;
    return absl::InvalidArgumentError(absl::StrCat(verb_, ": ", why, ": '", arg.substr(0, kShown),
                                                   arg.size() > kShown ? "...'" : "'"));
  }

 private:
  absl::string_view verb_;
  std::span<const std::string> rest_;
  std::size_t next_ = 0;
};

bool LowerHex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

absl::StatusOr<Command> ParseLaunch(Operands& ops) {
  LaunchCommand c;
  bool tunnel_flag = false;
  while (ops.more()) {
    ASSIGN_OR_RETURN(std::string flag, ops.Next("flag"));
    if (!tunnel_flag && c.state_root.empty() && c.expect_sha256.empty() &&
        (flag == "--text" || flag == "--direct" || flag == "--exchange")) {
      tunnel_flag = true;
      if (flag == "--text") {
        c.tunnel = LaunchTunnel::kText;
      } else if (flag == "--direct") {
        c.tunnel = LaunchTunnel::kDirect;
      } else {
        c.tunnel = LaunchTunnel::kExchange;
        ASSIGN_OR_RETURN(c.relay_id, ops.RelayId());
        ASSIGN_OR_RETURN(c.init_file, ops.InitFile());
      }
    } else if (flag == kStateRootFlag && c.state_root.empty() && c.expect_sha256.empty()) {
      ASSIGN_OR_RETURN(c.state_root, ops.Next("STATE_ROOT"));
      if (!ValidPath(c.state_root)) return ops.Bad("STATE_ROOT must be an absolute path", c.state_root);
    } else if (flag == kExpectSha256Flag && c.expect_sha256.empty()) {
      ASSIGN_OR_RETURN(c.expect_sha256, ops.Next("SHA256"));
      if (c.expect_sha256.size() != 64 || !LowerHex(c.expect_sha256)) {
        return ops.Bad("SHA256 must be 64 lowercase hex digits", c.expect_sha256);
      }
    } else {
      return ops.Bad(
          "unknown flag or flag out of place (expected [--text|--direct|--exchange ...] [--state-root DIR] "
          "[--expect-sha256 HEX])",
          flag);
    }
  }
  if (!c.state_root.empty() && c.tunnel != LaunchTunnel::kBinary && c.tunnel != LaunchTunnel::kText) {
    return ops.Bad("--state-root goes with the binary or --text launch only", c.state_root);
  }
  return c;
}

absl::StatusOr<Command> ParseBridge(std::span<const std::string> rest) {
  BridgeCommand c;
  if (!rest.empty() && rest[0].starts_with("--")) {
    if (rest[0] != "--text") return Operands("bridge", rest).Bad("unknown flag (expected --text)", rest[0]);
    c.text = true;
    rest = rest.subspan(1);
  }
  Operands ops("bridge", rest);
  ASSIGN_OR_RETURN(c.state_dir, ops.StateDir());
  RETURN_IF_ERROR(ops.Done());
  return c;
}

absl::StatusOr<Command> ParseRelay(Operands& ops) {
  RelayCommand c;
  ASSIGN_OR_RETURN(c.state_dir, ops.StateDir());
  ASSIGN_OR_RETURN(c.relay_id, ops.RelayId());
  ASSIGN_OR_RETURN(c.init_file, ops.InitFile());
  RETURN_IF_ERROR(ops.Done());
  return c;
}

absl::StatusOr<Command> ParseExchange(std::span<const std::string> rest) {
  Operands ops("exchange", rest);
  ASSIGN_OR_RETURN(std::string dir, ops.StateDir());
  ASSIGN_OR_RETURN(std::string id, ops.RelayId());
  if (rest.size() >= 3 && rest[2] == "close") {
    (void)ops.Next("close");
    RETURN_IF_ERROR(ops.Done());
    return ExchangeCloseCommand{std::move(dir), std::move(id)};
  }
  ExchangePollCommand c;
  c.state_dir = std::move(dir);
  c.relay_id = std::move(id);
  ASSIGN_OR_RETURN(c.in_offset, ops.Offset("IN_OFFSET"));
  ASSIGN_OR_RETURN(c.out_offset, ops.Offset("OUT_OFFSET"));
  if (ops.more()) {
    ASSIGN_OR_RETURN(std::string text, ops.Next("BASE85"));
    // Checked before decoding: 5 characters per 4 bytes, n + 1 for a last n.
    const std::size_t decoded = text.size() / 5 * 4 + (text.size() % 5 ? text.size() % 5 - 1 : 0);
    if (decoded > kMaxExchangePollBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("exchange: BASE85 holds more than ", kMaxExchangePollBytes, " bytes"));
    }
    if (text.empty() || !Base85Decode(text, &c.data)) return ops.Bad("BASE85 is not valid base85", text);
  }
  RETURN_IF_ERROR(ops.Done());
  return c;
}

struct ArgvBuilder {
  std::vector<std::string>* out;

  void operator()(const VersionCommand&) const { out->push_back("--version"); }
  void operator()(const LaunchCommand& c) const {
    out->push_back("launch");
    switch (c.tunnel) {
      case LaunchTunnel::kBinary:
        break;
      case LaunchTunnel::kText:
        out->push_back("--text");
        break;
      case LaunchTunnel::kDirect:
        out->push_back("--direct");
        break;
      case LaunchTunnel::kExchange:
        out->push_back("--exchange");
        out->push_back(c.relay_id);
        out->push_back(absl::StrCat("@", c.init_file));
        break;
    }
    if (!c.state_root.empty()) {
      out->push_back(std::string(kStateRootFlag));
      out->push_back(c.state_root);
    }
    if (!c.expect_sha256.empty()) {
      out->push_back(std::string(kExpectSha256Flag));
      out->push_back(c.expect_sha256);
    }
  }
  void operator()(const BridgeCommand& c) const {
    out->push_back("bridge");
    if (c.text) out->push_back("--text");
    out->push_back(c.state_dir);
  }
  void operator()(const RelayCommand& c) const {
    out->push_back("relay");
    out->push_back(c.state_dir);
    out->push_back(c.relay_id);
    out->push_back(absl::StrCat("@", c.init_file));
  }
  void operator()(const ExchangePollCommand& c) const {
    out->push_back("exchange");
    out->push_back(c.state_dir);
    out->push_back(c.relay_id);
    out->push_back(absl::StrCat(c.in_offset));
    out->push_back(absl::StrCat(c.out_offset));
    if (!c.data.empty()) out->push_back(Base85Encode(c.data));
  }
  void operator()(const ExchangeCloseCommand& c) const {
    out->push_back("exchange");
    out->push_back(c.state_dir);
    out->push_back(c.relay_id);
    out->push_back("close");
  }
  void operator()(const SelftestCommand&) const { out->push_back("selftest"); }
};

}  // namespace

bool ValidRelayId(std::string_view id) {
  if (id.empty() || id.size() > kMaxRelayIdBytes) return false;
  for (char c : id) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) return false;
  }
  return true;
}

bool IsExecTag(std::string_view entry) {
  if (entry.size() <= kExecTagName.size() + 1 || entry.substr(0, kExecTagName.size()) != kExecTagName ||
      entry[kExecTagName.size()] != '=') {
    return false;
  }
  const std::string_view hex = entry.substr(kExecTagName.size() + 1);
  return hex.size() <= kMaxExecTagBytes && LowerHex(hex);
}

std::string ExecTagEntry(std::string_view hex) {
  std::string entry = std::string(kExecTagName) + "=" + std::string(hex);
  TETHER_CHECK(IsExecTag(entry));
  return entry;
}

std::string_view CommandLineUsage() { return kUsage; }

std::string_view VerbName(const Command& command) {
  static constexpr std::string_view kNames[] = {"--version", "launch", "bridge", "relay",
                                                "exchange", "exchange", "selftest"};
  static_assert(std::size(kNames) == std::variant_size_v<Command>);
  return kNames[command.index()];
}

std::vector<std::string> ToArgv(const Command& command, std::string_view supervisor_path) {
  std::vector<std::string> argv;
  argv.emplace_back(supervisor_path);
  std::visit(ArgvBuilder{&argv}, command);
  // Our own commands always parse back to themselves.
  TETHER_CHECK(!supervisor_path.empty());
  absl::StatusOr<Command> back = ParseCommandLine(argv);
  TETHER_CHECK(back.ok() && *back == command);
  return argv;
}

absl::StatusOr<Command> ParseCommandLine(std::span<const std::string> argv) {
  if (argv.size() < 2) return absl::InvalidArgumentError("missing verb");
  const std::string& verb = argv[1];
  const std::span<const std::string> rest = argv.subspan(2);
  if (verb == "--version" || verb == "version") {
    RETURN_IF_ERROR(Operands(verb, rest).Done());
    return VersionCommand{};
  }
  if (verb == "launch") {
    Operands ops("launch", rest);
    return ParseLaunch(ops);
  }
  if (verb == "bridge") return ParseBridge(rest);
  if (verb == "relay") {
    Operands ops("relay", rest);
    return ParseRelay(ops);
  }
  if (verb == "exchange") return ParseExchange(rest);
  if (verb == "selftest") {
    RETURN_IF_ERROR(Operands(verb, rest).Done());
    return SelftestCommand{};
  }
  constexpr std::size_t kShown = 40;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown verb '", verb.substr(0, kShown), verb.size() > kShown ? "...'" : "'"));
}

}  // namespace tether::protocol
