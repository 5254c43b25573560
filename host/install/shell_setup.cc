#include "tether/shell_setup.h"

#include <algorithm>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "protocol/sha256.h"

namespace tether {

namespace asio = boost::asio;

namespace {

constexpr std::size_t kUploadPiece = 64 * 1024;     // bytes per channel write
constexpr std::size_t kTextPiece = 48 * 1024;       // raw bytes per command line (64 KiB of base64)
constexpr std::size_t kSmallFileBytes = 64 * 1024;  // text tunnels: on stdin, not in command lines
constexpr int kTextPieceAttempts = 5;               // a piece whose answer was lost is sent again

// The sandbox's sha256sum, from coreutils or busybox.
constexpr char kSha256[] =
    "if command -v sha256sum >/dev/null 2>&1; then S=sha256sum; else S='busybox sha256sum'; fi; ";

std::string Diag(const ScriptResult& r) {
  std::string s = r.diag.empty() ? std::string() : absl::StrCat(" (stderr: ", r.diag, ")");
  if (r.exit_code && *r.exit_code != 0) absl::StrAppend(&s, " (exit status ", *r.exit_code, ")");
  return s;
}

// A script's answer that lacks its marker line: `broken` (a sandbox that
// answered wrong), unless the answer was cut, which is the error then.
absl::Status MissingMarker(const ScriptResult& r, absl::Status broken) {
  if (!r.cut.ok()) return absl::UnavailableError(absl::StrCat(r.cut.message(), Diag(r)));
  return broken;
}

std::string OctalMode(int mode) {
  return absl::StrCat(absl::Dec(mode >> 6 & 7), absl::Dec(mode >> 3 & 7), absl::Dec(mode & 7));
}

// A script that writes what `reader` makes of its stdin into a temporary
// file beside `path`, checks its sha256 and renames it into place; any
// failure (a full disk cutting the copy short included) removes the
// partial file. It prints tether-put-ok or tether-put-bad HASH.
std::string InstallScript(const std::string& path, const std::string& reader, const std::string& hash, int mode) {
  return absl::StrCat(kSha256, "umask 077; f=", ShellQuote(path), "; t=\"$f.tmp.$$\"; h=; if ", reader,
                      " > \"$t\" && ", "h=$($S < \"$t\" | cut -c1-64) && [ \"$h\" = ", hash, " ] && chmod ",
                      OctalMode(mode), " \"$t\" && mv -f \"$t\" \"$f\"; then echo tether-put-ok; ",
                      "else rm -f \"$t\"; echo \"tether-put-bad $h\"; fi");
}

bool CleanAbsolutePath(std::string_view p) {
  if (p.empty() || p[0] != '/' || p.size() > kMaxSandboxPath) return false;
  for (char c : p) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
  }
  const std::vector<std::string> parts = absl::StrSplit(std::string(p.substr(1)), '/');
  for (const std::string& part : parts) {
    if (part.empty() || part == "." || part == "..") return false;
  }
  return true;
}

bool PlainWord(std::string_view w) {
  if (w.empty() || w.size() > 64) return false;
  return std::all_of(w.begin(), w.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

asio::awaitable<absl::Status> PutSmallAsText(const ShellRunner& run, const std::string& path, std::string_view bytes,
                                             int mode, const std::string& hash) {
  std::string text;
  const std::string b64 = absl::Base64Escape(std::string(bytes));
  for (std::size_t off = 0; off < b64.size(); off += 76) absl::StrAppend(&text, b64.substr(off, 76), "\n");
  absl::StatusOr<ScriptResult> put = co_await run(InstallScript(path, "base64 -d", hash, mode), text);
  if (!put.ok()) co_return put.status();
  if (!absl::StrContains(put->out, "tether-put-ok")) {
    co_return MissingMarker(*put, absl::DataLossError(absl::StrCat("writing ", path, " (", bytes.size(),
                                                                   " bytes) as text failed: ", put->out, Diag(*put))));
  }
  co_return absl::OkStatus();
}

// Base64 pieces in the command lines, each into its own file (so a piece
// sent twice after a lost answer changes nothing), joined, decoded, checked
// and renamed into place.
asio::awaitable<absl::Status> PutAsText(const ShellRunner& run, const std::string& path, std::string_view bytes,
                                        int mode, const std::string& hash, const ShellUploadOptions& o) {
  const std::string tmp = absl::StrCat(path, ".up.", hash.substr(0, 16));
  std::vector<std::string> parts;
  std::string last_diag;
  for (std::size_t off = 0, n = 0; off < bytes.size(); off += kTextPiece, ++n) {
    const std::string part = absl::StrCat(tmp, ".", n);
    parts.push_back(ShellQuote(part));
    const std::string script = absl::StrCat("umask 077; printf '%s' '",
                                            absl::Base64Escape(std::string(bytes.substr(off, kTextPiece))),
                                            "' > ", ShellQuote(part), " && echo tether-part-ok");
    bool ok = false;
    for (int attempt = 0; attempt < kTextPieceAttempts && !ok; ++attempt) {
      absl::StatusOr<ScriptResult> out = co_await run(script, std::string_view());
      ok = out.ok() && absl::StrContains(out->out, "tether-part-ok");
      if (out.ok()) last_diag = Diag(*out);
    }
    if (!ok) {
      // Best effort: the pieces already sent are of no use to anyone.
      (void)co_await run(absl::StrCat("rm -f ", absl::StrJoin(parts, " ")), std::string_view());
      co_return absl::UnavailableError(absl::StrCat("uploading ", path, " as text failed", last_diag));
    }
    if (o.progress) o.progress(std::min(off + kTextPiece, bytes.size()), bytes.size());
  }
  const std::string finish = absl::StrCat(
      kSha256, "umask 077; f=", ShellQuote(path), "; t=", ShellQuote(tmp), "; cat ", absl::StrJoin(parts, " "),
      " | base64 -d > \"$t\"; ", "rm -f ", absl::StrJoin(parts, " "), "; h=$($S < \"$t\" | cut -c1-64); if [ \"$h\" = ",
      hash, " ]; then chmod ", OctalMode(mode), " \"$t\" && mv -f \"$t\" \"$f\" && echo tether-put-ok; ",
      "else rm -f \"$t\"; echo \"tether-put-bad $h\"; fi");
  absl::StatusOr<ScriptResult> out = co_await run(finish, std::string_view());
  if (!out.ok()) co_return out.status();
  if (!absl::StrContains(out->out, "tether-put-ok")) {
    co_return MissingMarker(*out, absl::DataLossError(absl::StrCat("uploading ", path, " as text (", bytes.size(),
                                                                   " bytes, sha256 ", hash, ") failed: the sandbox said: ",
                                                                   out->out, Diag(*out))));
  }
  co_return absl::OkStatus();
}

// (A coroutine with its parameters as copies: the runner may outlive the
// call that made it.)
asio::awaitable<absl::StatusOr<ScriptResult>> RunThroughExec(Transport& t,
                                                           std::function<void(std::size_t, std::size_t)> progress,
                                                           std::string script, std::string_view input) {
  std::vector<std::string> argv;  // (named: g++ 12 and braced lists in coroutines)
  argv.push_back("/bin/sh");
  argv.push_back("-c");
  argv.push_back(std::move(script));
  absl::StatusOr<std::unique_ptr<Channel>> ch = co_await t.Exec(std::move(argv));
  if (!ch.ok()) co_return ch.status();
  co_return co_await RunScriptOn(**ch, input, progress);
}

}  // namespace

ShellRunner ExecShellRunner(Transport& transport, std::function<void(std::size_t, std::size_t)> progress) {
  return [&transport, progress](std::string script, std::string_view input) {
    return RunThroughExec(transport, progress, std::move(script), input);
  };
}

asio::awaitable<absl::StatusOr<ScriptResult>> RunScriptOn(Channel& c, std::string_view input,
                                                         const std::function<void(std::size_t, std::size_t)>& progress) {
  for (std::size_t off = 0; off < input.size(); off += kUploadPiece) {
    if (absl::Status st = co_await c.Write(input.substr(off, kUploadPiece)); !st.ok()) {
      const std::string diag = c.Diagnostics();
      c.Close();
      co_return absl::UnavailableError(absl::StrCat("sending to the sandbox failed: ", st.message(),
                                                    diag.empty() ? "" : absl::StrCat(" (stderr: ", diag, ")")));
    }
    if (progress) progress(std::min(off + kUploadPiece, input.size()), input.size());
  }
  c.CloseWrite();
  ScriptResult r;
  char buf[4096];
  while (true) {
    absl::StatusOr<std::size_t> n = co_await c.ReadSome({buf, sizeof buf});
    if (!n.ok()) {
      // The answer was cut, or lost after the script ran: kept as far as
      // it came (its marker may be in it), and the cut said (ScriptResult).
      r.cut = absl::UnavailableError(
          absl::StrCat("the answer to a setup command was cut after ", r.out.size(), " bytes: ", n.status().message()));
      break;
    }
    if (*n == 0) break;
    r.out.append(buf, *n);
    if (r.out.size() > kMaxScriptOutput) {
      c.Close();
      co_return absl::DataLossError("the sandbox answered a setup command with more output than expected");
    }
  }
  r.diag = c.Diagnostics();
  r.exit_code = c.exit_code();
  c.Close();
  co_return r;
}

std::string ProbeScript() {
  // The private root: created 0700, and refused when it is a symlink or
  // someone else's. TMPDIR only when absolute: a relative one would put it
  // in whatever directory the channel's shell starts in.
  return "case \"${TMPDIR-}\" in /*) t=$TMPDIR ;; *) t=/tmp ;; esac; "
         "r=\"$t/tether-$(id -u)\"; umask 077; "
         "if [ -L \"$r\" ] || { [ -e \"$r\" ] && [ ! -O \"$r\" ]; }; then "
         "echo \"tether-probe-bad $r is a symlink or not ours\"; exit 1; fi; "
         "mkdir -p \"$r/run\" \"$r/bin\" && chmod 700 \"$r\" \"$r/run\" \"$r/bin\" && "
         "uname -m && printf '%s\\n' \"$r\" && echo tether-probe-ok";
}

absl::StatusOr<SandboxInfo> ParseProbeOutput(std::string_view out, std::string_view arch, std::string_view where) {
  const auto failed = [&](std::string_view why) {
    return absl::UnavailableError(absl::StrCat("probing the sandbox through '", std::string(where), "' failed",
                                               std::string(why), "; it said: ",
                                               absl::CHexEscape(std::string(out.substr(0, 1024)))));
  };
  const std::vector<std::string> lines = absl::StrSplit(std::string(out), '\n', absl::SkipEmpty());
  if (lines.size() < 3 || lines.back() != "tether-probe-ok") return failed("");
  SandboxInfo info;
  info.arch = arch.empty() ? lines[lines.size() - 3] : std::string(arch);
  if (!PlainWord(info.arch)) return failed(" (not an architecture name)");
  if (info.arch == "arm64") info.arch = "aarch64";
  if (info.arch == "amd64") info.arch = "x86_64";
  const std::string root(lines[lines.size() - 2]);
  if (!CleanAbsolutePath(root) || root.size() + 4 > kMaxSandboxPath) {
    return absl::UnavailableError(absl::StrCat("sandbox private directory is not a clean absolute path: ",
                                               absl::CHexEscape(root.substr(0, 256))));
  }
  info.state_root = root + "/run";
  info.bin_dir = root + "/bin";
  return info;
}

asio::awaitable<absl::StatusOr<SandboxInfo>> ShellProbe(const ShellRunner& run, std::string where, std::string arch) {
  absl::StatusOr<ScriptResult> out = co_await run(ProbeScript(), std::string_view());
  if (!out.ok()) co_return out.status();
  absl::StatusOr<SandboxInfo> info = ParseProbeOutput(out->out, arch, where);
  if (!info.ok()) co_return absl::Status(info.status().code(), absl::StrCat(info.status().message(), Diag(*out)));
  co_return info;
}

asio::awaitable<absl::Status> ShellPutFile(const ShellRunner& run, std::string path, std::string_view bytes, int mode,
                                           ShellUploadOptions o) {
  const std::string hash = protocol::Sha256Hex(bytes);
  const std::string key = absl::StrCat(path, "\n", hash);
  if (o.installed && o.installed->count(key)) co_return absl::OkStatus();
  if (o.tunnel != TunnelMode::kBinary && bytes.size() <= kSmallFileBytes) {
    // Small files (a launch, a hello: they carry the secret) go as base64
    // text lines on stdin, never in a command line that a provider logs.
    co_return co_await PutSmallAsText(run, path, bytes, mode, hash);
  }
  if (!o.known_missing) {
    // Already there with the right content: nothing to send.
    absl::StatusOr<bool> have = co_await ShellHasFile(run, "", path, hash);
    if (!have.ok()) co_return have.status();
    if (*have) {
      if (o.installed) o.installed->insert(key);
      co_return absl::OkStatus();
    }
  }
  if (o.tunnel != TunnelMode::kBinary) {
    absl::Status st = co_await PutAsText(run, path, bytes, mode, hash, o);
    if (st.ok() && o.installed) o.installed->insert(key);
    co_return st;
  }
  // Exact bytes into a temporary file, checked, then renamed into place.
  absl::StatusOr<ScriptResult> put =
      co_await run(InstallScript(path, absl::StrCat("head -c ", bytes.size()), hash, mode), bytes);
  if (!put.ok()) co_return put.status();
  if (!absl::StrContains(put->out, "tether-put-ok")) {
    co_return MissingMarker(*put, absl::DataLossError(absl::StrCat("uploading ", path, " (", bytes.size(),
                                                                   " bytes, sha256 ", hash, ") failed: the sandbox said: ",
                                                                   put->out, Diag(*put))));
  }
  if (o.installed) o.installed->insert(key);
  co_return absl::OkStatus();
}

std::string ShellQuote(std::string_view arg) {
  std::string out = "'";
  for (char c : arg) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out.push_back(c);
    }
  }
  out += "'";
  return out;
}


asio::awaitable<absl::StatusOr<bool>> ShellHasFile(const ShellRunner& run, std::string who, std::string path,
                                                  std::string sha256_hex) {
  absl::StatusOr<ScriptResult> have = co_await run(
      absl::StrCat(kSha256, "f=", ShellQuote(path), "; if [ -f \"$f\" ] && [ ! -L \"$f\" ] && ",
                   "[ \"$($S < \"$f\" | cut -c1-64)\" = ", sha256_hex, " ]; then echo tether-have; ",
                   "else echo tether-need; fi"),
      std::string_view());
  if (!have.ok()) co_return have.status();
  if (absl::StrContains(have->out, "tether-have")) co_return true;
  if (absl::StrContains(have->out, "tether-need")) co_return false;
  co_return absl::UnavailableError(absl::StrCat(who, "checking ", path, " in the sandbox failed: ",
                                                absl::CHexEscape(have->out.substr(0, 512)), Diag(*have)));
}

asio::awaitable<absl::Status> ShellPlaceFile(const ShellRunner& run, std::string who, std::string tmp,
                                             std::string path, std::string sha256_hex, int mode, std::size_t size,
                                             std::vector<std::string> leftovers) {
  std::string clear;
  if (!leftovers.empty()) {
    clear = "rm -f";
    for (const std::string& l : leftovers) absl::StrAppend(&clear, " ", ShellQuote(l));
    clear += " 2>/dev/null; ";
  }
  absl::StatusOr<ScriptResult> put = co_await run(
      absl::StrCat(clear, kSha256, "f=", ShellQuote(path), "; t=", ShellQuote(tmp), "; h=$($S < \"$t\" | cut -c1-64); ",
                   "if [ \"$h\" = ", sha256_hex, " ] && chmod ", OctalMode(mode), " \"$t\" && mv -f \"$t\" \"$f\"; ",
                   "then echo tether-put-ok; else rm -f \"$t\"; echo \"tether-put-bad $h\"; fi"),
      std::string_view());
  if (!put.ok()) co_return put.status();
  if (absl::StrContains(put->out, "tether-put-ok")) co_return absl::OkStatus();
  co_return MissingMarker(*put, absl::DataLossError(absl::StrCat(who, "uploading ", path, " (", size, " bytes, sha256 ",
                                                                 sha256_hex, ") failed: the sandbox said: ",
                                                                 absl::CHexEscape(put->out.substr(0, 512)), Diag(*put))));
}

}  // namespace tether
