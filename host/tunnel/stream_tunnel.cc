// The binary and text tunnels: a supervisor command (launch or bridge) runs
// through Transport::Exec and its stdio carries the frames, as they are
// (binary) or as armored lines (text, protocol/armor.h). The Launch frame is
// the first thing written; the bridge relays to the daemon's socket.
#include "host/internal/armored_channel.h"
#include "host/tunnel/tunnels.h"
#include "protocol/command_line.h"

namespace tether::tunnel {

namespace asio = boost::asio;

namespace {

class StreamTunnel final : public Tunnel {
 public:
  using Tunnel::Tunnel;

  asio::awaitable<absl::StatusOr<wire::Welcome>> Launch(const Target& target, std::string launch_frame,
                                                        wire::Hello hello, std::shared_ptr<Session>& session) override {
    protocol::LaunchCommand launch{.tunnel = text() ? protocol::LaunchTunnel::kText : protocol::LaunchTunnel::kBinary};
    std::vector<std::string> argv = protocol::ToArgv(launch, target.supervisor);
    co_return co_await Run(std::move(argv), std::move(launch_frame), std::move(hello), session);
  }

  asio::awaitable<absl::StatusOr<wire::Welcome>> Reattach(const Target& target, wire::Hello hello,
                                                          std::shared_ptr<Session>& session) override {
    protocol::BridgeCommand bridge{.text = text(), .state_dir = target.state_dir};
    std::vector<std::string> argv = protocol::ToArgv(bridge, target.supervisor);
    co_return co_await Run(std::move(argv), std::string(), std::move(hello), session);
  }

 private:
  bool text() const { return choice_.mode == TunnelMode::kText; }

  asio::awaitable<absl::StatusOr<wire::Welcome>> Run(std::vector<std::string> argv, std::string first,
                                                     wire::Hello hello, std::shared_ptr<Session>& session) {
    absl::StatusOr<std::unique_ptr<Channel>> channel = co_await transport_.Exec(std::move(argv));
    if (!channel.ok()) co_return channel.status();
    // Text: frames as armored lines, the Launch frame too.
    if (text()) *channel = internal::MakeArmoredChannel(*std::move(channel));
    session = Session::Create(transport_.executor(), *std::move(channel));
    if (!first.empty()) session->SendFrame(std::move(first));
    hello.set_zstd(choice_.zstd);
    co_return co_await session->Handshake(std::move(hello));
  }
};

}  // namespace

std::unique_ptr<Tunnel> MakeStreamTunnel(Transport& transport, TunnelChoice choice) {
  return std::make_unique<StreamTunnel>(transport, choice);
}

}  // namespace tether::tunnel
