// The tunnel implementations (private to host/tunnel/): see tunnel.h.
#pragma once

#include <memory>

#include "host/tunnel/tunnel.h"

namespace tether::tunnel {

std::unique_ptr<Tunnel> MakeStreamTunnel(Transport& transport, TunnelChoice choice);  // binary, text
std::unique_ptr<Tunnel> MakeDirectTunnel(Transport& transport, TunnelChoice choice, DirectConnector& connector);
std::unique_ptr<Tunnel> MakeExchangeTunnel(Transport& transport, TunnelChoice choice);

}  // namespace tether::tunnel
