#include "host/tunnel/start_script.h"

#include <algorithm>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "protocol/command_line.h"
#include "tether/protocol/version.h"
#include "tether/shell_setup.h"

namespace tether::tunnel {
namespace {

// Shared by every script: the user's id, "a directory of ours" and the
// candidate private roots in order (each calls $1 with a root until one
// returns 0; it returns 1 when none did).
constexpr char kPreludeHead[] =
    "umask 077; u=$(id -u) || exit 1\n"
    "ours() { [ -d \"$1\" ] && [ ! -L \"$1\" ] && [ -O \"$1\" ]; }\n";
constexpr char kEachCandidate[] =
    "each() {\n"
    "  case \"${TMPDIR-}\" in /?*) \"$1\" \"${TMPDIR%/}/tether-$u\" && return 0 ;; esac\n"
    "  \"$1\" \"/tmp/tether-$u\" && return 0\n"
    "  \"$1\" \"/var/tmp/tether-$u\" && return 0\n"
    "  \"$1\" \"/dev/shm/tether-$u\" && return 0\n"
    "  case \"${HOME-}\" in /?*) \"$1\" \"${HOME%/}/.cache/tether-$u\" && return 0 ;; esac\n"
    "  return 1\n"
    "}\n";

// The prelude, with `each` over the one root the transport names when it
// names one.
std::string Prelude(std::string_view private_root) {
  if (private_root.empty()) return absl::StrCat(kPreludeHead, kEachCandidate);
  return absl::StrCat(kPreludeHead, "each() { \"$1\" ", ShellQuote(private_root),
                      " && return 0; return 1; }\n");
}

std::string Emulator(const std::string& emulator) {
  return emulator.empty() ? std::string() : absl::StrCat(ShellQuote(emulator), " ");
}

bool Printable(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x20 && c != 0x7f; });
}

bool PlainWord(std::string_view w) {
  return !w.empty() && w.size() <= 64 && std::all_of(w.begin(), w.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

}  // namespace

bool CleanAbsolute(std::string_view p) {
  if (p.empty() || p[0] != '/' || p.size() > kMaxSandboxPath || !Printable(p)) return false;
  const std::string slashed = std::string(p) + "/";
  return slashed.find("/../") == std::string::npos && slashed.find("/./") == std::string::npos &&
         p.find("//") == std::string_view::npos;
}

namespace {

bool ConsumePrefix(std::string_view* s, std::string_view prefix) {
  if (s->substr(0, prefix.size()) != prefix) return false;
  s->remove_prefix(prefix.size());
  return true;
}

}  // namespace

std::string StartScript(const StartScriptOptions& o) {
  const std::string emu = Emulator(o.emulator);
  const std::string need(protocol::kStartNeedPrefix);
  std::string s = Prelude(o.private_root);
  // 1. The state root.
  absl::StrAppend(&s,
                  "st() { [ -L \"$1\" ] && return 1; [ -e \"$1\" ] && ! ours \"$1\" && return 1\n"
                  "  mkdir -p \"$1/run\" 2>/dev/null && ours \"$1\" && ours \"$1/run\" && "
                  "chmod 700 \"$1\" \"$1/run\" 2>/dev/null && R=$1; }\n"
                  "R=; each st || { echo '",
                  need, "nostate'; exit 0; }\n");
  // 2. The architecture and our binary for it.
  if (o.arch.empty()) {
    absl::StrAppend(&s, "m=$(uname -m)\n");
  } else {
    absl::StrAppend(&s, "m=", ShellQuote(o.arch), "\n");
  }
  absl::StrAppend(&s, "case \"$m\" in amd64) m=x86_64 ;; arm64) m=aarch64 ;; esac\nn=; h=; z=\ncase \"$m\" in\n");
  for (const UploadableSupervisor& u : o.ours) {
    absl::StrAppend(&s, "  ", ShellQuote(u.arch), ") n=", ShellQuote(u.name), " h=", u.sha256, " z=", u.size,
                    " ;;\n");
  }
  absl::StrAppend(&s, "esac\n");
  // 3. A preinstalled supervisor: the caller's, the well-known places, PATH.
  absl::StrAppend(
      &s, "W=; s=; H=\n",
      "pre() { [ -f \"$1\" ] && [ -x \"$1\" ] || { W=\"$W; $1: not an executable file\"; return 1; }\n"
      "  v=$(",
      emu, "\"$1\" --version </dev/null 2>/dev/null) || v=\n", "  case \"$v\" in *\"(protocol ", kProtocolVersion,
      ", command line \"*\")\") c=${v##*command line }; c=${c%)}\n",
      "    [ \"$c\" -ge ", protocol::kCommandLineRevision, " ] 2>/dev/null && { s=$1; return 0; } ;; esac\n",
      "  v=$(printf '%s' \"$v\" | tr '\\n\\r' '  ' | cut -c1-100)\n",
      "  W=\"$W; $1 says '${v:-nothing: not a supervisor, or another architecture}' (needs protocol ", kProtocolVersion,
      ", command line ", protocol::kCommandLineRevision, " or later)\"; return 1; }\n");
  if (!o.named.empty()) absl::StrAppend(&s, "pre ", ShellQuote(o.named), "\n");
  if (o.preinstalled) {
    absl::StrAppend(&s, "for p in");
    for (std::string_view p : kPreinstalledPaths) absl::StrAppend(&s, " ", ShellQuote(p));
    absl::StrAppend(&s,
                    "; do [ -z \"$s\" ] && [ -e \"$p\" ] && pre \"$p\"; done\n"
                    "if [ -z \"$s\" ]; then p=$(command -v tether-supervisor 2>/dev/null) || p=\n"
                    "  case \"$p\" in /*) pre \"$p\" ;; esac; fi\n");
  }
  // 4. Ours, in the first root whose bin/ has it or could take it: a root
  // passed over (read-only, noexec, not ours) is never where we uploaded.
  absl::StrAppend(
      &s,
      "X=; B=\n"
      "bn() { if [ -L \"$1\" ] || { [ -e \"$1\" ] && ! ours \"$1\"; }; then X=\"$X; $1: a symlink or not ours\"; "
      "return 1; fi\n"
      "  if ! { mkdir -p \"$1/bin\" 2>/dev/null && ours \"$1\" && ours \"$1/bin\" && "
      "chmod 700 \"$1\" \"$1/bin\" 2>/dev/null; }; then X=\"$X; $1: read-only or not writable\"; return 1; fi\n"
      "  t=\"$1/bin/.exec-test-$$\"\n"
      "  if ! printf '#!/bin/sh\\nexit 0\\n' > \"$t\" 2>/dev/null; then rm -f \"$t\"; "
      "X=\"$X; $1: read-only or full\"; return 1; fi\n"
      "  chmod 700 \"$t\"\n"
      "  if \"$t\" </dev/null >/dev/null 2>&1; then rm -f \"$t\"; B=\"$1/bin\"; return 0; fi\n"
      "  rm -f \"$t\"; X=\"$X; $1: mounted noexec\"; return 1; }\n"
      "fa() { f=\"$1/bin/$n\"; if [ -f \"$f\" ] && [ ! -L \"$f\" ] && [ -O \"$f\" ] && [ -x \"$f\" ] && "
      "ours \"$1\" && ours \"$1/bin\" && [ $(wc -c < \"$f\") -eq \"$z\" ]; then s=$f; H=$h; return 0; fi\n",
      o.allow_upload ? "  bn \"$1\"; }\n" : "  return 1; }\n",
      "if [ -z \"$s\" ] && [ -n \"$n\" ]; then each fa; fi\n");
  // 5. Launch, or say what is missing.
  absl::StrAppend(&s, "if [ -n \"$s\" ]; then exec ", emu, "\"$s\" launch", o.text ? " --text" : "", " ",
                  std::string(protocol::kStateRootFlag), " \"$R/run\" ${H:+",
                  std::string(protocol::kExpectSha256Flag), " $H}; fi\n");
  if (!o.allow_upload) {
    absl::StrAppend(&s, "printf '%s\\n' \"", need, "nopreinstalled$W\"; exit 0\n");
    return s;
  }
  absl::StrAppend(&s, "[ -n \"$n\" ] || { printf '%s\\n' \"", need, "arch $m\"; exit 0; }\n",
                  "if [ -n \"$B\" ]; then printf '%s\\n' \"", need, "upload $m $B\"; else printf '%s\\n' \"", need,
                  "noexec$X\"; fi\n");
  return s;
}

std::string ReattachScript(const ReattachScriptOptions& o) {
  const std::string need(protocol::kStartNeedPrefix);
  std::string s = Prelude(o.private_root);
  absl::StrAppend(&s, "S=", ShellQuote(o.supervisor), "; D=", ShellQuote(o.state_dir), "; N=", ShellQuote(o.named),
                  "\n");
  absl::StrAppend(
      &s,
      "sd() { [ \"$D\" = \"$1/run/${D##*/}\" ] || return 1; [ -e \"$1/run\" ] || return 0\n"
      "  ours \"$1\" && ours \"$1/run\"; }\n"
      "each sd || { printf '%s\\n' \"",
      need,
      "refused the state directory $D is not in a private directory of this user\"; exit 0; }\n"
      "[ -d \"$D\" ] || { echo '", need, "gone'; exit 0; }\n"
      "sb() { [ \"$S\" = \"$1/bin/${S##*/}\" ] && ours \"$1\" && ours \"$1/bin\" && [ -f \"$S\" ] && "
      "[ ! -L \"$S\" ] && [ -O \"$S\" ]; }\n"
      "al() { [ -n \"$1\" ] && { [ \"$S\" = \"$1\" ] || [ \"$S\" = \"$(readlink -f \"$1\" 2>/dev/null)\" ]; }; }\n"
      "ok=; case \"${S##*/}\" in tether-supervisor-*) each sb && ok=1 ;; esac\n"
      "[ -n \"$ok\" ] || al \"$N\"");
  for (std::string_view p : kPreinstalledPaths) absl::StrAppend(&s, " || al ", ShellQuote(p));
  absl::StrAppend(&s, " || al \"$(command -v tether-supervisor 2>/dev/null)\" || { printf '%s\\n' \"", need,
                  "refused the supervisor $S is neither ours nor preinstalled\"; exit 0; }\n");
  absl::StrAppend(&s, "exec ", Emulator(o.emulator), "\"$S\" bridge", o.text ? " --text" : "", " \"$D\"\n");
  return s;
}

std::string CancelScript(std::string_view launch_id, std::string_view private_root) {
  std::string s = Prelude(private_root);
  absl::StrAppend(&s, "cm() { ours \"$1/run\" && : > \"$1/run/\"",
                  ShellQuote(std::string(launch_id) + ".cancel"),
                  "; return 1; }\neach cm; echo tether-cancel-ok\n");
  return s;
}

namespace {
constexpr char kNeedPayload[] = "tether.dev/start-need";
}  // namespace

absl::Status StartNeedStatus(std::string line) {
  absl::Status st = absl::FailedPreconditionError(
      absl::StrCat("the sandbox's start script did not launch: ", absl::CHexEscape(line.substr(0, 512))));
  st.SetPayload(kNeedPayload, absl::Cord(std::move(line)));
  return st;
}

std::optional<std::string> StartNeedLineOf(const absl::Status& status) {
  absl::optional<absl::Cord> c = status.GetPayload(kNeedPayload);
  if (!c) return std::nullopt;
  return std::string(*c);
}

absl::StatusOr<StartNeed> ParseStartNeed(std::string_view line) {
  const auto bad = [&](std::string_view why) {
    return absl::DataLossError(absl::StrCat("the sandbox's start script answered a malformed line (", std::string(why), "): '",
                                            absl::CHexEscape(std::string(line.substr(0, 200))), "'"));
  };
  if (line.size() > protocol::kMaxStartNeedLine) return bad("too long");
  if (!ConsumePrefix(&line, protocol::kStartNeedPrefix)) return bad("no prefix");
  const std::size_t sp = line.find_first_of(" ;");
  const std::string_view what = line.substr(0, sp);
  std::string_view rest = sp == std::string_view::npos ? std::string_view() : line.substr(sp);
  StartNeed n;
  std::string_view trimmed = rest;
  while (!trimmed.empty() && (trimmed[0] == ' ' || trimmed[0] == ';')) trimmed.remove_prefix(1);
  n.detail = absl::CHexEscape(std::string(trimmed));
  if (what == "upload") {
    ConsumePrefix(&rest, " ");
    const std::size_t gap = rest.find(' ');
    if (gap == std::string_view::npos) return bad("upload without a directory");
    n.kind = StartNeed::Kind::kUpload;
    n.arch = std::string(rest.substr(0, gap));
    n.path = std::string(rest.substr(gap + 1));
    if (!PlainWord(n.arch)) return bad("not an architecture name");
    if (!CleanAbsolute(n.path)) return bad("not a clean absolute directory");
    return n;
  }
  if (what == "corrupt") {
    ConsumePrefix(&rest, " ");
    n.kind = StartNeed::Kind::kCorrupt;
    n.path = std::string(rest);
    if (!CleanAbsolute(n.path)) return bad("not a clean absolute path");
    return n;
  }
  static constexpr std::pair<std::string_view, StartNeed::Kind> kPlain[] = {
      {"arch", StartNeed::Kind::kArch},       {"noexec", StartNeed::Kind::kNoExec},
      {"nostate", StartNeed::Kind::kNoState}, {"nopreinstalled", StartNeed::Kind::kNoPreinstalled},
      {"gone", StartNeed::Kind::kGone},       {"refused", StartNeed::Kind::kRefused}};
  for (const auto& [name, kind] : kPlain) {
    if (what == name) {
      n.kind = kind;
      return n;
    }
  }
  return bad("unknown need");
}

}  // namespace tether::tunnel
