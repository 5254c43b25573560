#include "host/native/modal/modal_transport.h"

#include <cstdlib>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "host/native/modal/exec_channel.h"
#include "host/native/modal/modal_config.h"
#include "host/native/modal/modal_session.h"
#include "tether/shell_setup.h"

namespace tether {

namespace asio = boost::asio;

namespace {

constexpr char kDefaultServer[] = "https://api.modal.com:443";
constexpr std::size_t kMaxCaBytes = 1 << 20;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

// A whole small file, or nullopt when it cannot be read or exceeds `limit`.
std::optional<std::string> ReadSmallFile(const std::string& path, std::size_t limit, bool* too_big) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  std::string out(limit + 1, '\0');
  f.read(out.data(), static_cast<std::streamsize>(out.size()));
  out.resize(static_cast<std::size_t>(f.gcount()));
  *too_big = out.size() > limit;
  if (*too_big) return std::nullopt;
  return out;
}

class ModalTransport final : public Transport {
 public:
  ModalTransport(asio::any_io_executor ex, ModalOptions o, std::shared_ptr<modal::ModalSession> s)
      : ex_(std::move(ex)), o_(std::move(o)), s_(std::move(s)) {}

  std::string_view name() const override { return "modal"; }
  ChannelCapabilities capabilities() const override {
    ChannelCapabilities c;
    c.exact_bytes = true;  // protobuf bytes both ways
    c.streaming = true;
    c.costly_bytes = true;
    c.cut_prone = true;  // gRPC streams through Modal's proxies
    return c;
  }
  std::string sandbox_id() const override { return o_.sandbox_id; }
  asio::any_io_executor executor() const override { return ex_; }

  asio::awaitable<absl::StatusOr<SandboxInfo>> Probe() override {
    if (info_) co_return *info_;
    absl::StatusOr<SandboxInfo> info = co_await ShellProbe(runner_, absl::StrCat("modal sandbox ", o_.sandbox_id), "");
    if (!info.ok()) co_return info.status();
    info_ = *info;
    co_return *info;
  }

  asio::awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(std::vector<std::string> argv) override {
    co_return co_await modal::StartExec(s_, std::move(argv));
  }

  asio::awaitable<absl::Status> PutFile(std::string path, std::string_view bytes, int mode) override {
    ShellUploadOptions u;
    u.tunnel = TunnelMode::kBinary;
    u.progress = o_.upload_progress;
    u.installed = &installed_;
    co_return co_await ShellPutFile(runner_, std::move(path), bytes, mode, std::move(u));
  }

 private:
  asio::any_io_executor ex_;
  ModalOptions o_;
  std::shared_ptr<modal::ModalSession> s_;
  std::optional<SandboxInfo> info_;
  std::set<std::string> installed_;  // path + sha256 verified in this sandbox
  ShellRunner runner_ = ExecShellRunner(*this, o_.upload_progress);
};

}  // namespace

absl::StatusOr<std::shared_ptr<Transport>> MakeModalTransport(asio::any_io_executor ex, ModalOptions o) {
  if (o.sandbox_id.empty()) return absl::InvalidArgumentError("modal: a sandbox id is required (--sandbox ID)");
  if (o.sandbox_id.size() > 128) return absl::InvalidArgumentError("modal: the sandbox id is too long");
  for (char c : o.sandbox_id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    if (!ok) return absl::InvalidArgumentError("modal: a sandbox id is letters, digits, '-' and '_'");
  }
  // The SDK's sources, in its order: the environment, then ~/.modal.toml.
  modal::ModalProfile profile;
  std::string config = Env("MODAL_CONFIG_PATH");
  if (config.empty() && !Env("HOME").empty()) config = Env("HOME") + "/.modal.toml";
  if (!config.empty()) {
    bool too_big = false;
    std::optional<std::string> text = ReadSmallFile(config, modal::kMaxTomlBytes, &too_big);
    if (too_big) return absl::InvalidArgumentError(absl::StrCat("modal: ", config, " is larger than 1 MiB"));
    if (text) {
      absl::StatusOr<modal::ModalProfile> p = modal::ParseModalToml(*text, Env("MODAL_PROFILE"));
      if (!p.ok()) return absl::InvalidArgumentError(absl::StrCat("modal: ", config, ": ", p.status().message()));
      profile = *std::move(p);
    }
  }
  if (o.token_id.empty()) o.token_id = Env("MODAL_TOKEN_ID");
  if (o.token_id.empty()) o.token_id = profile.token_id;
  if (o.token_secret.empty()) o.token_secret = Env("MODAL_TOKEN_SECRET");
  if (o.token_secret.empty()) o.token_secret = profile.token_secret;
  if (o.token_id.empty() || o.token_secret.empty()) {
    return absl::UnauthenticatedError("modal: set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET (or run `modal token set`)");
  }
  if (o.server_url.empty()) o.server_url = Env("MODAL_SERVER_URL");
  if (o.server_url.empty()) o.server_url = profile.server_url;
  if (o.server_url.empty()) o.server_url = kDefaultServer;
  absl::StatusOr<modal::GrpcTarget> server = modal::ParseGrpcUrl(o.server_url);
  if (!server.ok()) return absl::InvalidArgumentError(absl::StrCat("modal: the server URL: ", server.status().message()));
  // Checked here, before any connection: the first call sends the token.
  if (absl::Status st = modal::CheckCleartext(*server, "the server URL"); !st.ok()) return st;
  modal::SessionOptions so;
  if (!o.ca_file.empty()) {
    bool too_big = false;
    std::optional<std::string> pem = ReadSmallFile(o.ca_file, kMaxCaBytes, &too_big);
    if (!pem || pem->find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("modal: --ca-file ", o.ca_file, too_big ? " is larger than 1 MiB" : " is not a readable PEM file"));
    }
    so.ca_pem = *std::move(pem);
  }
  so.sandbox_id = o.sandbox_id;
  so.token_id = o.token_id;
  so.token_secret = o.token_secret;
  so.server = *server;
  auto session = std::make_shared<modal::ModalSession>(ex, std::move(so));
  return std::shared_ptr<Transport>(new ModalTransport(std::move(ex), std::move(o), std::move(session)));
}

}  // namespace tether
