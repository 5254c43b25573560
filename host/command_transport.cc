#include "host/command_transport.h"

#include <boost/asio/use_awaitable.hpp>
#include <optional>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "host/internal/spawn.h"
#include "protocol/sha256.h"

namespace tether {

namespace asio = boost::asio;

namespace {

constexpr std::size_t kMaxScriptOutput = 64 * 1024;
constexpr std::size_t kUploadPiece = 64 * 1024;
constexpr std::size_t kTextPiece = 48 * 1024;  // raw bytes per command line (64 KiB of base64)
constexpr std::size_t kSmallFileBytes = 64 * 1024;  // text tunnels: on stdin, not in command lines

// The sandbox's sha256sum, from coreutils or busybox.
constexpr char kSha256[] =
    "if command -v sha256sum >/dev/null 2>&1; then S=sha256sum; else S='busybox sha256sum'; fi; ";

class CommandTransport final : public Transport {
 public:
  CommandTransport(asio::any_io_executor ex, CommandOptions o) : ex_(std::move(ex)), o_(std::move(o)) {
    if (o_.sandbox_id.empty()) o_.sandbox_id = absl::StrJoin(o_.prefix, " ");
  }

  std::string_view name() const override { return "command"; }
  ChannelCapabilities capabilities() const override { return CapabilitiesOf(o_.tunnel); }
  std::string sandbox_id() const override { return o_.sandbox_id; }
  asio::any_io_executor executor() const override { return ex_; }

  asio::awaitable<absl::StatusOr<SandboxInfo>> Probe() override {
    if (info_) co_return *info_;
    // The private root: created 0700, and refused when it is a symlink or
    // someone else's. TMPDIR only when absolute: a relative one would put it
    // in whatever directory the channel's shell starts in.
    const std::string script =
        "case \"${TMPDIR-}\" in /*) t=$TMPDIR ;; *) t=/tmp ;; esac; "
        "r=\"$t/tether-$(id -u)\"; umask 077; "
        "if [ -L \"$r\" ] || { [ -e \"$r\" ] && [ ! -O \"$r\" ]; }; then "
        "echo \"tether-probe-bad $r is a symlink or not ours\"; exit 1; fi; "
        "mkdir -p \"$r/run\" \"$r/bin\" && chmod 700 \"$r\" \"$r/run\" \"$r/bin\" && "
        "uname -m && printf '%s\\n' \"$r\" && echo tether-probe-ok";
    absl::StatusOr<std::string> out = co_await RunScript(script, "");
    if (!out.ok()) co_return out.status();
    std::vector<std::string> lines = absl::StrSplit(*out, '\n', absl::SkipEmpty());
    if (lines.size() < 3 || lines.back() != "tether-probe-ok") {
      co_return absl::UnavailableError(absl::StrCat("probing the sandbox through '", o_.sandbox_id,
                                                    "' failed; it said: ", *out, Diag()));
    }
    SandboxInfo info;
    info.arch = o_.arch.empty() ? lines[lines.size() - 3] : o_.arch;
    if (info.arch == "arm64") info.arch = "aarch64";
    if (info.arch == "amd64") info.arch = "x86_64";
    const std::string& root = lines[lines.size() - 2];
    if (root.empty() || root[0] != '/') {
      co_return absl::UnavailableError(absl::StrCat("sandbox private directory is not absolute: ", root));
    }
    info.state_root = root + "/run";
    info.bin_dir = root + "/bin";
    info_ = info;
    co_return info;
  }

  asio::awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(std::vector<std::string> argv) override {
    if (argv.empty()) co_return absl::InvalidArgumentError("exec: empty argv");
    std::string line = "exec";
    if (!o_.emulator.empty() && absl::StrContains(argv[0], "/tether-supervisor-")) {
      absl::StrAppend(&line, " ", ShellQuote(o_.emulator));
    }
    for (const std::string& a : argv) absl::StrAppend(&line, " ", ShellQuote(a));
    co_return Spawn(line);
  }

  asio::awaitable<absl::Status> PutFile(std::string path, std::string_view bytes, int mode) override {
    const std::string hash = protocol::Sha256Hex(bytes);
    const std::string key = absl::StrCat(path, "\n", hash);
    if (installed_.count(key)) co_return absl::OkStatus();
    if (o_.tunnel != TunnelMode::kBinary && bytes.size() <= kSmallFileBytes) {
      // Small files (a launch, a hello: they carry the secret) go as base64
      // text lines on stdin, never in a command line that a provider logs.
      co_return co_await PutSmallAsText(path, bytes, mode, hash);
    }
    const std::string q = ShellQuote(path);
    // Already there with the right content: nothing to send.
    absl::StatusOr<std::string> have = co_await RunScript(
        absl::StrCat(kSha256, "f=", q, "; if [ -f \"$f\" ] && [ ! -L \"$f\" ] && ",
                     "[ \"$($S < \"$f\" | cut -c1-64)\" = ", hash, " ]; then echo tether-have; ",
                     "else echo tether-need; fi"),
        "");
    if (!have.ok()) co_return have.status();
    if (absl::StrContains(*have, "tether-have")) {
      installed_.insert(key);
      co_return absl::OkStatus();
    }
    if (!absl::StrContains(*have, "tether-need")) {
      co_return absl::UnavailableError(absl::StrCat("checking ", path, " in the sandbox failed: ", *have, Diag()));
    }
    if (o_.tunnel != TunnelMode::kBinary) {
      absl::Status st = co_await PutAsText(path, bytes, mode, hash);
      if (st.ok()) installed_.insert(key);
      co_return st;
    }
    // Exact bytes into a temporary file, checked, then renamed into place.
    // Any failure (a full disk cutting the copy short included) removes the
    // partial file: nothing is left behind but a complete, checked install.
    absl::StatusOr<std::string> put =
        co_await RunScript(InstallScript(path, absl::StrCat("head -c ", bytes.size()), hash, mode), bytes);
    if (!put.ok()) co_return put.status();
    if (!absl::StrContains(*put, "tether-put-ok")) {
      co_return absl::DataLossError(absl::StrCat("uploading ", path, " (", bytes.size(), " bytes, sha256 ", hash,
                                                 ") failed: the sandbox said: ", *put, Diag()));
    }
    installed_.insert(key);
    co_return absl::OkStatus();
  }

 private:
  absl::StatusOr<std::unique_ptr<Channel>> Spawn(const std::string& line) {
    std::vector<std::string> argv = o_.prefix;
    argv.push_back(line);
    return internal::SpawnChannel(ex_, argv, "");
  }

  // A script that writes what `reader` makes of its stdin into a temporary
  // file beside `path`, checks its sha256 and renames it into place; any
  // failure (a full disk cutting the copy short included) removes the
  // partial file. It prints tether-put-ok or tether-put-bad HASH.
  static std::string InstallScript(const std::string& path, const std::string& reader, const std::string& hash,
                                   int mode) {
    return absl::StrCat(
        kSha256, "umask 077; f=", ShellQuote(path), "; t=\"$f.tmp.$$\"; h=; if ", reader, " > \"$t\" && ",
        "h=$($S < \"$t\" | cut -c1-64) && [ \"$h\" = ", hash, " ] && chmod ",
        absl::StrCat(absl::Dec(mode >> 6 & 7), absl::Dec(mode >> 3 & 7), absl::Dec(mode & 7)),
        " \"$t\" && mv -f \"$t\" \"$f\"; then echo tether-put-ok; else rm -f \"$t\"; echo \"tether-put-bad $h\"; fi");
  }

  asio::awaitable<absl::Status> PutSmallAsText(const std::string& path, std::string_view bytes, int mode,
                                               const std::string& hash) {
    std::string text;
    const std::string b64 = absl::Base64Escape(std::string(bytes));
    for (std::size_t off = 0; off < b64.size(); off += 76) absl::StrAppend(&text, b64.substr(off, 76), "\n");
    absl::StatusOr<std::string> put = co_await RunScript(InstallScript(path, "base64 -d", hash, mode), text);
    if (!put.ok()) co_return put.status();
    if (!absl::StrContains(*put, "tether-put-ok")) {
      co_return absl::DataLossError(absl::StrCat("writing ", path, " (", bytes.size(), " bytes) as text failed: ",
                                                 *put, Diag()));
    }
    co_return absl::OkStatus();
  }

  // For channels that carry only text (or only one-shot commands): base64
  // pieces in the command lines, each into its own file (so a piece sent
  // twice after a lost answer changes nothing), joined, decoded, checked and
  // renamed into place.
  asio::awaitable<absl::Status> PutAsText(const std::string& path, std::string_view bytes, int mode,
                                          const std::string& hash) {
    const std::string q = ShellQuote(path);
    const std::string tmp = absl::StrCat(path, ".up.", hash.substr(0, 16));
    const std::string qt = ShellQuote(tmp);
    std::vector<std::string> parts;
    for (std::size_t off = 0, n = 0; off < bytes.size(); off += kTextPiece, ++n) {
      const std::string part = absl::StrCat(tmp, ".", n);
      parts.push_back(ShellQuote(part));
      const std::string script = absl::StrCat("umask 077; printf '%s' '",
                                              absl::Base64Escape(std::string(bytes.substr(off, kTextPiece))),
                                              "' > ", ShellQuote(part), " && echo tether-part-ok");
      bool ok = false;
      for (int attempt = 0; attempt < 5 && !ok; ++attempt) {
        absl::StatusOr<std::string> out = co_await RunScript(script, "");
        ok = out.ok() && absl::StrContains(*out, "tether-part-ok");
      }
      if (!ok) {
        // Best effort: the pieces already sent are of no use to anyone.
        (void)co_await RunScript(absl::StrCat("rm -f ", absl::StrJoin(parts, " ")), "");
        co_return absl::UnavailableError(absl::StrCat("uploading ", path, " as text failed", Diag()));
      }
      if (o_.upload_progress) o_.upload_progress(std::min(off + kTextPiece, bytes.size()), bytes.size());
    }
    const std::string finish = absl::StrCat(
        kSha256, "umask 077; f=", q, "; t=", qt, "; cat ", absl::StrJoin(parts, " "), " | base64 -d > \"$t\"; ",
        "rm -f ", absl::StrJoin(parts, " "), "; h=$($S < \"$t\" | cut -c1-64); if [ \"$h\" = ", hash,
        " ]; then chmod ", absl::StrCat(absl::Dec(mode >> 6 & 7), absl::Dec(mode >> 3 & 7), absl::Dec(mode & 7)),
        " \"$t\" && mv -f \"$t\" \"$f\" && echo tether-put-ok; else rm -f \"$t\"; echo \"tether-put-bad $h\"; fi");
    absl::StatusOr<std::string> out = co_await RunScript(finish, "");
    if (!out.ok()) co_return out.status();
    if (!absl::StrContains(*out, "tether-put-ok")) {
      co_return absl::DataLossError(absl::StrCat("uploading ", path, " as text (", bytes.size(), " bytes, sha256 ",
                                                 hash, ") failed: the sandbox said: ", *out, Diag()));
    }
    co_return absl::OkStatus();
  }

  // Runs `script` with `input` on its stdin; returns its stdout (bounded).
  asio::awaitable<absl::StatusOr<std::string>> RunScript(const std::string& script, std::string_view input) {
    absl::StatusOr<std::unique_ptr<Channel>> ch = Spawn(script);
    if (!ch.ok()) co_return ch.status();
    Channel& c = **ch;
    for (std::size_t off = 0; off < input.size(); off += kUploadPiece) {
      if (absl::Status st = co_await c.Write(input.substr(off, kUploadPiece)); !st.ok()) {
        last_diag_ = c.Diagnostics();
        co_return absl::UnavailableError(absl::StrCat("sending to the sandbox failed: ", st.message(), Diag()));
      }
      if (o_.upload_progress) o_.upload_progress(std::min(off + kUploadPiece, input.size()), input.size());
    }
    c.CloseWrite();
    std::string out;
    char buf[4096];
    while (true) {
      absl::StatusOr<std::size_t> n = co_await c.ReadSome({buf, sizeof buf});
      if (!n.ok() || *n == 0) break;
      out.append(buf, *n);
      if (out.size() > kMaxScriptOutput) {
        co_return absl::DataLossError("the sandbox answered a setup command with more output than expected");
      }
    }
    last_diag_ = c.Diagnostics();
    c.Close();
    co_return out;
  }

  std::string Diag() const {
    return last_diag_.empty() ? std::string() : absl::StrCat(" (stderr: ", last_diag_, ")");
  }

  asio::any_io_executor ex_;
  CommandOptions o_;
  std::optional<SandboxInfo> info_;
  std::set<std::string> installed_;  // path + sha256 verified in this sandbox
  std::string last_diag_;
};

}  // namespace

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

absl::StatusOr<std::unique_ptr<Transport>> MakeCommandTransport(asio::any_io_executor ex, CommandOptions options) {
  if (options.prefix.empty()) {
    return absl::InvalidArgumentError("the command provider needs a prefix (e.g. ssh -T host)");
  }
  if (!options.arch.empty() && options.arch != "x86_64" && options.arch != "aarch64") {
    return absl::InvalidArgumentError(absl::StrCat("arch must be x86_64 or aarch64, not '", options.arch, "'"));
  }
  return std::unique_ptr<Transport>(new CommandTransport(std::move(ex), std::move(options)));
}

}  // namespace tether
