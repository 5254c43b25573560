#include "tether/providers.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "host/support/typed_provider.h"
#include "tether/command_transport.h"
#include "tether/local_transport.h"
#ifdef TETHER_NATIVE_PROVIDERS
#include "host/registry/native_providers.h"
#endif

namespace tether {
namespace {

using internal::Into;
using internal::MakeProviderInfo;
using internal::TypedProvider;

absl::Status SetPrefix(CommandOptions& o, const std::string& value) {
  absl::StatusOr<std::vector<std::string>> words = SplitShellWords(value);
  if (!words.ok()) return words.status();
  o.prefix = *std::move(words);
  return absl::OkStatus();
}

absl::Status SetArch(CommandOptions& o, const std::string& value) {
  if (value != "x86_64" && value != "aarch64") {
    return absl::InvalidArgumentError(absl::StrCat("--arch must be x86_64 or aarch64, not '", value, "'"));
  }
  o.arch = value;
  return absl::OkStatus();
}

absl::Status SetTunnel(CommandOptions& o, const std::string& value) {
  if (value == "binary") {
    o.tunnel = TunnelMode::kBinary;
  } else if (value == "text") {
    o.tunnel = TunnelMode::kText;
  } else if (value == "exchange") {
    o.tunnel = TunnelMode::kExchange;
  } else {
    return absl::InvalidArgumentError("--tunnel is binary, text or exchange");
  }
  return absl::OkStatus();
}

std::vector<ProviderInfo> MakeRegistry() {
  std::vector<ProviderInfo> r;
  r.push_back(MakeProviderInfo(TypedProvider<LocalOptions>{
      "local",
      "this machine; its private directory is\n"
      "$TETHER_LOCAL_ROOT, else $XDG_RUNTIME_DIR/tether-local, else\n"
      "$TMPDIR/tether-local-UID (absolute TMPDIR only), else /tmp/tether-local-UID",
      {},  // (it takes no flags: ParseProviderFlags refuses others')
      [](boost::asio::any_io_executor ex, LocalOptions o) { return MakeLocalTransport(std::move(ex), std::move(o)); },
      true}));
  r.push_back(MakeProviderInfo(TypedProvider<CommandOptions>{
      "command",
      "any command that runs a shell command line inside the sandbox with\n"
      "stdio connected, e.g. 'ssh -T host', 'docker exec -i CTR sh -c',\n"
      "'kubectl exec -i POD -- sh -c'",
      {{"--prefix", "the command (split like a shell), required", SetPrefix},
       {"--arch", "x86_64|aarch64: skip detection (with --emulator)", SetArch},
       {"--emulator", "run the supervisor under this program, e.g. qemu-aarch64", Into(&CommandOptions::emulator)},
       {"--tunnel", "binary|text|exchange. text: the channel carries only text lines;\n"
                    "        frames go as armored lines and a failed channel is reattached.\n"
                    "        exchange: only one-shot commands; tether polls a relay",
        SetTunnel}},
      MakeCommandTransport,
      false,
      [](const CommandOptions& o) {
        // (A prefix of blanks alone splits into no words: refused as a missing one.)
        if (!o.prefix.empty()) return absl::OkStatus();
        return absl::InvalidArgumentError("--provider command needs --prefix 'CMD...' (e.g. 'ssh -T host')");
      }}));
#ifdef TETHER_NATIVE_PROVIDERS
  AppendNativeProviders(r);
#endif
  return r;
}

}  // namespace

const std::vector<ProviderInfo>& Providers() {
  static const std::vector<ProviderInfo> registry = MakeRegistry();
  return registry;
}

absl::StatusOr<const ProviderInfo*> FindProvider(std::string_view name) {
  std::vector<std::string> known;
  for (const ProviderInfo& p : Providers()) {
    if (p.name == name) return &p;
    known.emplace_back(p.name);
  }
#ifndef TETHER_NATIVE_PROVIDERS
  for (std::string_view native : {"docker", "e2b", "kubernetes", "boat", "runloop", "daytona", "modal"}) {
    if (name == native) {
      return absl::UnimplementedError(absl::StrCat(
          "provider '", std::string(name), "' is not built into this tether (configured with "
          "TETHER_NATIVE_PROVIDERS=OFF, as a first `./dev run` is; `./dev build` builds every provider)"));
    }
  }
#endif
  return absl::InvalidArgumentError(
      absl::StrCat("unknown provider '", std::string(name), "' (available: ", absl::StrJoin(known, ", "), ")"));
}

bool IsProviderFlag(std::string_view flag) {
  for (const ProviderInfo& p : Providers()) {
    for (const ProviderOption& o : p.options) {
      if (o.flag == flag) return true;
    }
  }
  return false;
}

absl::StatusOr<std::any> ParseProviderFlags(const ProviderInfo& info, const ProviderFlags& flags) {
  for (const auto& [flag, value] : flags) {
    bool own = false;
    for (const ProviderOption& o : info.options) own = own || o.flag == flag;
    if (own) continue;
    std::vector<std::string> takers;
    for (const ProviderInfo& p : Providers()) {
      for (const ProviderOption& o : p.options) {
        if (o.flag == flag) takers.push_back(absl::StrCat("--provider ", std::string(p.name)));
      }
    }
    if (takers.empty()) return absl::InvalidArgumentError(absl::StrCat("unknown provider option '", flag, "'"));
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " is for ", absl::StrJoin(takers, " or "), ", not --provider ", std::string(info.name)));
  }
  return info.parse(flags);
}

absl::StatusOr<std::shared_ptr<Transport>> MakeProviderTransport(boost::asio::any_io_executor ex,
                                                                 std::string_view name,
                                                                 const ProviderFlags& flags,
                                                                 const ProviderHooks& hooks) {
  absl::StatusOr<const ProviderInfo*> info = FindProvider(name);
  if (!info.ok()) return info.status();
  absl::StatusOr<std::any> parsed = ParseProviderFlags(**info, flags);
  if (!parsed.ok()) return parsed.status();
  return (*info)->make(std::move(ex), *parsed, hooks);
}

void LeaveProviderLibrariesToExit() {
#ifdef TETHER_NATIVE_PROVIDERS
  LeaveNativeLibrariesToExit();
#endif
}

absl::StatusOr<std::vector<std::string>> SplitShellWords(std::string_view line) {
  std::vector<std::string> words;
  std::string cur;
  bool in_word = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::move(cur));
      cur.clear();
      in_word = false;
    } else if (c == '\'') {
      const std::size_t end = line.find('\'', i + 1);
      if (end == std::string_view::npos) return absl::InvalidArgumentError("unterminated ' in --prefix");
      cur.append(line.substr(i + 1, end - i - 1));
      i = end;
      in_word = true;
    } else if (c == '"') {
      ++i;
      for (; i < line.size() && line[i] != '"'; ++i) {
        if (line[i] == '\\' && i + 1 < line.size()) ++i;
        cur.push_back(line[i]);
      }
      if (i >= line.size()) return absl::InvalidArgumentError("unterminated \" in --prefix");
      in_word = true;
    } else if (c == '\\' && i + 1 < line.size()) {
      cur.push_back(line[++i]);
      in_word = true;
    } else {
      cur.push_back(c);
      in_word = true;
    }
  }
  if (in_word) words.push_back(std::move(cur));
  return words;
}

}  // namespace tether
