#include "host/tunnel/choose.h"

namespace tether::tunnel {

TunnelChoice ChooseTunnel(const ChannelCapabilities& caps) {
  TunnelChoice c;
  if (!caps.streaming) {
    c.mode = TunnelMode::kExchange;
  } else if (caps.direct_connect && caps.exact_bytes) {
    c.mode = TunnelMode::kDirect;
  } else if (caps.exact_bytes) {
    c.mode = TunnelMode::kBinary;
  } else {
    c.mode = TunnelMode::kText;
  }
  c.zstd = caps.costly_bytes && c.mode != TunnelMode::kDirect;
  c.always_reconnect = c.mode == TunnelMode::kText || c.mode == TunnelMode::kExchange ||
                     (caps.cut_prone && c.mode == TunnelMode::kBinary);
  return c;
}

}  // namespace tether::tunnel
