#include "tether/command_transport.h"

#include <boost/asio/use_awaitable.hpp>
#include <optional>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "host/transports/spawn.h"
#include "tether/shell_setup.h"

namespace tether {

namespace asio = boost::asio;

namespace {

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
    absl::StatusOr<SandboxInfo> info = co_await ShellProbe(runner_, o_.sandbox_id, o_.arch);
    if (!info.ok()) co_return info.status();
    info_ = *info;
    co_return *info;
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
    co_return co_await Put(std::move(path), bytes, mode, false);
  }
  asio::awaitable<absl::Status> PutNewFile(std::string path, std::string_view bytes, int mode) override {
    co_return co_await Put(std::move(path), bytes, mode, true);
  }
  ScriptOverrides script_overrides() const override { return {o_.arch, o_.emulator}; }

 private:
  asio::awaitable<absl::Status> Put(std::string path, std::string_view bytes, int mode, bool known_missing) {
    ShellUploadOptions u;
    u.tunnel = o_.tunnel;
    u.progress = o_.upload_progress;
    u.installed = &installed_;
    u.known_missing = known_missing;
    co_return co_await ShellPutFile(runner_, std::move(path), bytes, mode, std::move(u));
  }

  absl::StatusOr<std::unique_ptr<Channel>> Spawn(const std::string& line) {
    std::vector<std::string> argv = o_.prefix;
    argv.push_back(line);
    return internal::SpawnChannel(ex_, argv, "");
  }

  // The shell runner: the script is the channel's command line itself (no
  // extra shell), `input` on its stdin; its stdout (bounded).
  asio::awaitable<absl::StatusOr<ScriptResult>> RunScript(std::string script, std::string_view input) {
    absl::StatusOr<std::unique_ptr<Channel>> ch = Spawn(script);
    if (!ch.ok()) co_return ch.status();
    co_return co_await RunScriptOn(**ch, input, o_.upload_progress);
  }

  asio::any_io_executor ex_;
  CommandOptions o_;
  std::optional<SandboxInfo> info_;
  std::set<std::string> installed_;  // path + sha256 verified in this sandbox
  ShellRunner runner_ = [this](std::string script, std::string_view input) {
    return RunScript(std::move(script), input);
  };
};

}  // namespace

absl::StatusOr<std::shared_ptr<Transport>> MakeCommandTransport(asio::any_io_executor ex, CommandOptions options) {
  if (options.prefix.empty()) {
    return absl::InvalidArgumentError("the command provider needs a prefix (e.g. ssh -T host)");
  }
  if (!options.arch.empty() && options.arch != "x86_64" && options.arch != "aarch64") {
    return absl::InvalidArgumentError(absl::StrCat("arch must be x86_64 or aarch64, not '", options.arch, "'"));
  }
  return std::shared_ptr<Transport>(new CommandTransport(std::move(ex), std::move(options)));
}

}  // namespace tether
