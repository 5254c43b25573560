#include "tether/providers/boxd.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "host/native/boxd/boxd_channel.h"
#include "host/native/boxd/boxd_session.h"
#include "host/native/grpc/grpc_client.h"
#include "host/native/grpc/grpc_target.h"
#include "host/native/native_options.h"
#include "host/native/native_transport.h"

namespace tether {

namespace asio = boost::asio;

namespace {

constexpr char kDefaultEndpoint[] = "https://boxd.sh:9443";
constexpr char kDefaultAuthUrl[] = "https://app.boxd.sh/api/v1/auth/token";

class BoxdTransport final : public native::NativeTransport {
 public:
  BoxdTransport(asio::any_io_executor ex, BoxdOptions o, std::shared_ptr<boxd::BoxdSession> s)
      : NativeTransport(std::move(ex), {"boxd", o.vm_id, absl::StrCat("boxd VM ", o.vm_id)},
                        std::move(o.upload_progress)),
        s_(std::move(s)) {}

  ChannelCapabilities capabilities() const override {
    ChannelCapabilities c;
    c.exact_bytes = true;  // protobuf bytes both ways
    c.stdin_eof = true;    // the half-close
    c.streaming = true;
    c.costly_bytes = true;
    c.cut_prone = true;  // one HTTP/2 stream through the Internet
    return c;
  }

  asio::awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(std::vector<std::string> argv) override {
    co_return co_await boxd::StartExec(s_, std::move(argv));
  }

 protected:
  // Through the shell, exact bytes on stdin (UploadFileStream's numbers
  // rest on one source: include/tether/providers/boxd.h).
  asio::awaitable<absl::Status> Put(std::string path, std::string_view bytes, int mode, bool missing) override {
    co_return co_await PutByShell(std::move(path), bytes, mode, missing);
  }

 private:
  std::shared_ptr<boxd::BoxdSession> s_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<Transport>> MakeBoxdTransport(asio::any_io_executor ex, BoxdOptions o) {
  if (absl::Status st = native::CheckId("boxd", "VM id", "--vm ID", o.vm_id); !st.ok()) return st;
  // Credentials: a key to exchange, else a JWT as it is.
  if (o.api_key.empty() && o.token.empty()) {
    o.api_key = native::Env("BOXD_API_KEY");
    if (o.api_key.empty()) o.token = native::Env("BOXD_TOKEN");
  }
  if (o.api_key.empty() && o.token.empty()) {
    return absl::UnauthenticatedError("boxd: set BOXD_API_KEY to your API key (or BOXD_TOKEN to a JWT)");
  }
  if (!native::HeaderSafe(o.api_key) || !native::HeaderSafe(o.token)) {
    return absl::InvalidArgumentError("boxd: BOXD_API_KEY / BOXD_TOKEN holds a space or a control character");
  }
  if (o.endpoint.empty()) o.endpoint = native::Env("BOXD_ENDPOINT");
  if (o.endpoint.empty()) o.endpoint = kDefaultEndpoint;
  absl::StatusOr<rpc::GrpcTarget> server = rpc::ParseGrpcUrl(o.endpoint);
  if (!server.ok()) return absl::InvalidArgumentError(absl::StrCat("boxd: --endpoint: ", server.status().message()));
  // Checked here, before any connection: every call carries the JWT.
  if (absl::Status st = rpc::CheckCleartext(*server, "boxd", "--endpoint"); !st.ok()) return st;
  boxd::SessionOptions so;
  if (!o.ca_file.empty()) {
    absl::StatusOr<std::string> pem = rpc::ReadCaFile("boxd", o.ca_file);
    if (!pem.ok()) return pem.status();
    so.ca_pem = *std::move(pem);
  }
  if (!o.api_key.empty()) {
    if (o.auth_url.empty()) o.auth_url = native::Env("BOXD_AUTH_URL");
    if (o.auth_url.empty()) o.auth_url = kDefaultAuthUrl;
    absl::StatusOr<net::ClientOptions> auth = native::ApiClientOptions("boxd: --auth-endpoint", o.auth_url, o.ca_file);
    if (!auth.ok()) return auth.status();
    // The URL's path is the request's target (a URL without one: boxd's).
    so.auth_target = auth->url.base_path.empty() ? "/api/v1/auth/token" : auth->url.base_path;
    auth->url.base_path.clear();
    so.auth = *std::move(auth);
    so.api_key = o.api_key;
  } else {
    so.token = o.token;
  }
  so.vm_id = o.vm_id;
  so.server = *server;
  auto session = std::make_shared<boxd::BoxdSession>(ex, std::move(so));
  return std::shared_ptr<Transport>(new BoxdTransport(std::move(ex), std::move(o), std::move(session)));
}

}  // namespace tether
