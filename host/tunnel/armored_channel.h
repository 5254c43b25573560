// The duplex-text tunnel: a Channel adapter that carries frames as armored
// lines (protocol/armor.h) over a channel that only carries text. What the
// session writes (whole frames) goes out one armored line per frame; what
// comes back is scanned for armored lines addressed to the host, and every
// other line (shell noise, echoes of our input, provider markers, damaged
// or blank lines) is skipped and counted.
#pragma once

#include <memory>

#include "tether/transport.h"

namespace tether::internal {

std::unique_ptr<Channel> MakeArmoredChannel(std::unique_ptr<Channel> text_channel);

}  // namespace tether::internal
