#include "tether/providers/modal.h"

#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "host/native/grpc/grpc_client.h"
#include "host/native/modal/modal_channel.h"
#include "host/native/modal/modal_config.h"
#include "host/native/modal/modal_session.h"
#include "host/native/native_options.h"
#include "host/native/native_transport.h"
#include "tether/shell_setup.h"

namespace tether {

namespace asio = boost::asio;

namespace {

constexpr char kDefaultServer[] = "https://api.modal.com:443";

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

class ModalTransport final : public native::NativeTransport {
 public:
  ModalTransport(asio::any_io_executor ex, ModalOptions o, std::shared_ptr<modal::ModalSession> s)
      : NativeTransport(std::move(ex), {"modal", o.sandbox_id, absl::StrCat("modal sandbox ", o.sandbox_id)},
                        std::move(o.upload_progress)),
        s_(std::move(s)) {}

  ChannelCapabilities capabilities() const override {
    ChannelCapabilities c;
    c.exact_bytes = true;  // protobuf bytes both ways
    c.streaming = true;
    c.costly_bytes = true;
    c.cut_prone = true;  // gRPC streams through Modal's proxies
    return c;
  }

  asio::awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(std::vector<std::string> argv) override {
    co_return co_await modal::StartExec(s_, std::move(argv));
  }

 protected:
  // Through the shell (exact bytes on stdin). (It does not skip its check
  // for a file known to be missing.)
  asio::awaitable<absl::Status> Put(std::string path, std::string_view bytes, int mode, bool) override {
    co_return co_await PutByShell(std::move(path), bytes, mode, false);
  }

 private:
  std::shared_ptr<modal::ModalSession> s_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<Transport>> MakeModalTransport(asio::any_io_executor ex, ModalOptions o) {
  if (absl::Status st = native::CheckId("modal", "sandbox id", "--sandbox ID", o.sandbox_id); !st.ok()) return st;
  // The SDK's sources, in its order: the environment, then ~/.modal.toml.
  modal::ModalProfile profile;
  std::string config = native::Env("MODAL_CONFIG_PATH");
  if (config.empty() && !native::Env("HOME").empty()) config = native::Env("HOME") + "/.modal.toml";
  if (!config.empty()) {
    bool too_big = false;
    std::optional<std::string> text = ReadSmallFile(config, modal::kMaxTomlBytes, &too_big);
    if (too_big) return absl::InvalidArgumentError(absl::StrCat("modal: ", config, " is larger than 1 MiB"));
    if (text) {
      absl::StatusOr<modal::ModalProfile> p = modal::ParseModalToml(*text, native::Env("MODAL_PROFILE"));
      if (!p.ok()) return absl::InvalidArgumentError(absl::StrCat("modal: ", config, ": ", p.status().message()));
      profile = *std::move(p);
    }
  }
  if (o.token_id.empty()) o.token_id = native::Env("MODAL_TOKEN_ID");
  if (o.token_id.empty()) o.token_id = profile.token_id;
  if (o.token_secret.empty()) o.token_secret = native::Env("MODAL_TOKEN_SECRET");
  if (o.token_secret.empty()) o.token_secret = profile.token_secret;
  if (o.token_id.empty() || o.token_secret.empty()) {
    return absl::UnauthenticatedError("modal: set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET (or run `modal token set`)");
  }
  if (o.server_url.empty()) o.server_url = native::Env("MODAL_SERVER_URL");
  if (o.server_url.empty()) o.server_url = profile.server_url;
  if (o.server_url.empty()) o.server_url = kDefaultServer;
  absl::StatusOr<modal::GrpcTarget> server = modal::ParseGrpcUrl(o.server_url);
  if (!server.ok()) return absl::InvalidArgumentError(absl::StrCat("modal: the server URL: ", server.status().message()));
  // Checked here, before any connection: the first call sends the token.
  if (absl::Status st = modal::CheckCleartext(*server, "the server URL"); !st.ok()) return st;
  modal::SessionOptions so;
  if (!o.ca_file.empty()) {
    absl::StatusOr<std::string> pem = rpc::ReadCaFile("modal", o.ca_file);
    if (!pem.ok()) return pem.status();
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
