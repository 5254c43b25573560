#include "host/tunnel/tunnel.h"

#include "absl/strings/str_cat.h"
#include "host/tunnel/tunnels.h"

namespace tether::tunnel {

absl::StatusOr<std::unique_ptr<Tunnel>> MakeTunnel(Transport& transport) {
  const TunnelChoice choice = ChooseTunnel(transport.capabilities());
  switch (choice.mode) {
    case TunnelMode::kDirect: {
      auto* connector = dynamic_cast<DirectConnector*>(&transport);
      if (connector == nullptr) {
        return absl::InternalError(absl::StrCat("transport ", std::string(transport.name()),
                                                " declares direct_connect but is no DirectConnector"));
      }
      return MakeDirectTunnel(transport, choice, *connector);
    }
    case TunnelMode::kExchange: return MakeExchangeTunnel(transport, choice);
    case TunnelMode::kBinary:
    case TunnelMode::kText: return MakeStreamTunnel(transport, choice);
  }
  return absl::InternalError("unknown tunnel mode");
}

}  // namespace tether::tunnel
