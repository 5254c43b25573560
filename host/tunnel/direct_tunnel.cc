// The direct tunnel (the sandbox shares this machine): `launch --direct`
// starts the daemon and exits, and the host connects to the daemon's socket
// itself (DirectConnector), with no bridge process in the data path.
#include <boost/asio/use_awaitable.hpp>

#include "absl/strings/str_cat.h"
#include "tether/errors.h"
#include "host/tunnel/tunnels.h"
#include "protocol/command_line.h"
#include "protocol/envelope.h"
#include "host/support/trace.h"

namespace tether::tunnel {

namespace asio = boost::asio;

namespace {

class DirectTunnel final : public Tunnel {
 public:
  DirectTunnel(Transport& transport, TunnelChoice choice, DirectConnector& connector)
      : Tunnel(transport, choice), connector_(connector) {}

  asio::awaitable<absl::StatusOr<wire::Welcome>> Launch(const Target& target, std::string launch_frame,
                                                        wire::Hello hello, std::shared_ptr<Session>& session) override {
    protocol::LaunchCommand launch{.tunnel = protocol::LaunchTunnel::kDirect};
    std::vector<std::string> argv = protocol::ToArgv(launch, target.supervisor);
    tether::internal::Trace("tunnel.exec");
    absl::StatusOr<std::unique_ptr<Channel>> l = co_await transport_.Exec(std::move(argv));
    if (!l.ok()) co_return l.status();
    tether::internal::Trace("tunnel.exec_open");
    std::unique_ptr<Channel> launcher = *std::move(l);
    if (absl::Status st = co_await launcher->Write(launch_frame); !st.ok()) co_return st;
    // Nothing on success; an error frame when the launch was refused.
    protocol::EnvelopeDecoder dec;
    char buf[4096];
    while (true) {
      absl::StatusOr<std::size_t> n = co_await launcher->ReadSome({buf, sizeof buf});
      if (!n.ok()) co_return n.status();
      if (*n == 0) {
        if (!dec.idle()) co_return absl::DataLossError("launch --direct ended in the middle of a frame");
        break;
      }
      std::string_view in(buf, *n);
      wire::Envelope env;
      absl::StatusOr<bool> got = dec.Next(&in, &env);
      if (got.ok() && *got && env.has_error()) co_return StatusFromWireError(env.error());
      if (!got.ok() || *got) co_return absl::DataLossError("launch --direct wrote something other than an error");
    }
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await connector_.Connect(target.state_dir);
    if (!ch.ok()) {
      const std::string diag = launcher->Diagnostics();
      co_return absl::Status(ch.status().code(),
                             absl::StrCat("the launch left no supervisor to connect to: ",
                                          std::string(ch.status().message()),
                                          diag.empty() ? "" : absl::StrCat("; its stderr: ", diag)));
    }
    tether::internal::Trace("tunnel.connected");
    co_return co_await Handshake(*std::move(ch), std::move(hello), session);
  }

  asio::awaitable<absl::StatusOr<wire::Welcome>> Reattach(const Target& target, wire::Hello hello,
                                                          std::shared_ptr<Session>& session) override {
    absl::StatusOr<std::unique_ptr<Channel>> ch = co_await connector_.Connect(target.state_dir);
    if (!ch.ok()) co_return ch.status();
    co_return co_await Handshake(*std::move(ch), std::move(hello), session);
  }

 private:
  asio::awaitable<absl::StatusOr<wire::Welcome>> Handshake(std::unique_ptr<Channel> ch, wire::Hello hello,
                                                           std::shared_ptr<Session>& session) {
    session = Session::Create(transport_.executor(), std::move(ch));
    hello.set_zstd(choice_.zstd);
    co_return co_await session->Handshake(std::move(hello));
  }

  DirectConnector& connector_;
};

}  // namespace

std::unique_ptr<Tunnel> MakeDirectTunnel(Transport& transport, TunnelChoice choice, DirectConnector& connector) {
  return std::make_unique<DirectTunnel>(transport, choice, connector);
}

}  // namespace tether::tunnel
