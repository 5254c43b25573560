// Choosing a tunnel: a pure function of what the native channel can do.
//
//   one-shot commands only (!streaming)     -> exchange: polls through a relay
//   same machine, socket reachable          -> direct: no bridge, no zstd
//   exact bytes both ways                   -> binary: frames through a bridge
//   text only                               -> text: frames as armored lines
//
// zstd pays where bytes are costly (a network, a metered API) and the host
// is not on the sandbox's machine; the supervisor still sends a frame raw
// when compressing does not shrink it, and stops trying on output that does
// not compress.
#pragma once

#include "tether/transport.h"

namespace tether::tunnel {

struct TunnelChoice {
  TunnelMode mode = TunnelMode::kBinary;
  bool zstd = true;
  // Attachments over this tunnel are reattached when the channel fails,
  // whatever StartOptions::reconnect says: text and exchange channels are
  // the ones that fail by design (replays, polls), and cut-prone native
  // streams (HTTP, WebSocket) fail by accident; none loses anything then.
  bool always_reconnect = false;

  bool operator==(const TunnelChoice&) const = default;
};

TunnelChoice ChooseTunnel(const ChannelCapabilities& caps);

}  // namespace tether::tunnel
