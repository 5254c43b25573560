// The exchange tunnel (one-shot commands only): a relay beside the daemon
// (started with the launch, or alone to reattach) is polled by one-shot
// commands (host/tunnel/exchange_channel.h). The frames that carry the
// secret (the Launch and the Hello) go in a private file, never in a command
// line (provider logs, /proc/PID/cmdline); the supervisor reads it once and
// removes it.
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tether/errors.h"
#include "host/tunnel/exchange_channel.h"
#include "host/support/random.h"
#include "host/tunnel/tunnels.h"
#include "protocol/armor.h"
#include "protocol/command_line.h"
#include "protocol/envelope.h"
#include "protocol/frame.h"
#include "host/support/trace.h"

namespace tether::tunnel {

namespace asio = boost::asio;

namespace {

class ExchangeTunnel final : public Tunnel {
 public:
  using Tunnel::Tunnel;

  asio::awaitable<absl::StatusOr<wire::Welcome>> Launch(const Target& target, std::string launch_frame,
                                                        wire::Hello hello, std::shared_ptr<Session>& session) override {
    co_return co_await Start(target, std::move(launch_frame), std::move(hello), session);
  }

  asio::awaitable<absl::StatusOr<wire::Welcome>> Reattach(const Target& target, wire::Hello hello,
                                                          std::shared_ptr<Session>& session) override {
    co_return co_await Start(target, std::string(), std::move(hello), session);
  }

 private:
  asio::awaitable<absl::StatusOr<wire::Welcome>> Start(const Target& target, std::string first, wire::Hello hello,
                                                       std::shared_ptr<Session>& session) {
    const std::string id = absl::BytesToHexString(internal::RandomBytes(8));
    session = Session::Create(transport_.executor(),
                              internal::MakeExchangeChannel(transport_, target.supervisor, target.state_dir, id));
    const std::string init_path = absl::StrCat(target.state_dir, ".x-", id, ".init");
    hello.set_zstd(choice_.zstd);
    std::string init = first;
    init += session->PrepareHello(std::move(hello));
    if (absl::Status st = co_await transport_.PutFile(init_path, init, 0600); !st.ok()) co_return st;
    // (a named vector: g++ 12 miscompiles braced temporaries in co_await operands)
    std::vector<std::string> argv;
    if (!first.empty()) {
      protocol::LaunchCommand launch{
          .tunnel = protocol::LaunchTunnel::kExchange, .relay_id = id, .init_file = init_path};
      argv = protocol::ToArgv(launch, target.supervisor);
    } else {
      protocol::RelayCommand relay{.state_dir = target.state_dir, .relay_id = id, .init_file = init_path};
      argv = protocol::ToArgv(relay, target.supervisor);
    }
    tether::internal::Trace("tunnel.exec");
    absl::StatusOr<std::string> out = co_await internal::RunOneShot(transport_, std::move(argv));
    if (!out.ok()) co_return out.status();
    tether::internal::Trace("tunnel.exec_done");
    if (!absl::StrContains(*out, "tether-relay-ok")) {
      // The launcher reports a refused launch as an armored error frame.
      protocol::ArmorDecoder dec(protocol::ArmorDirection::kToHost);
      std::string_view text = *out;
      std::string frame;
      while (true) {
        absl::StatusOr<protocol::DecodeResult> r = dec.Next(&text, &frame);
        if (!r.ok() || *r != protocol::DecodeResult::kFrame) break;
        absl::StatusOr<std::string> payload = protocol::DecodeWholeFrame(frame);
        if (!payload.ok()) continue;
        absl::StatusOr<wire::Envelope> env = protocol::ParseEnvelope(*payload);
        if (env.ok() && env->has_error()) co_return StatusFromWireError(env->error());
      }
      if (absl::StrContains(*out, "tether-relay-gone")) co_return absl::NotFoundError("the process is gone");
      co_return absl::UnavailableError(absl::StrCat("could not start the exchange relay: ", *out));
    }
    co_return co_await session->AwaitWelcome();
  }
};

}  // namespace

std::unique_ptr<Tunnel> MakeExchangeTunnel(Transport& transport, TunnelChoice choice) {
  return std::make_unique<ExchangeTunnel>(transport, choice);
}

}  // namespace tether::tunnel
