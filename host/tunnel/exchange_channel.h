// The exchange tunnel (supervisor/exchange.h), host side: a Channel built
// from one-shot commands. Writes are queued with offsets; reads poll
// `tether-supervisor exchange DIR ID IN OUT [BASE85]` (immediately while
// bytes flow, backing off to 200 ms when idle). A poll whose reply is lost or
// damaged is made again with the same offsets, so every byte arrives once.
// When the relay is gone the channel fails (UNAVAILABLE) and the process
// reattaches with a new relay.
#pragma once

#include <memory>
#include <string>

#include "tether/transport.h"

namespace tether::internal {

std::unique_ptr<Channel> MakeExchangeChannel(Transport& transport, std::string supervisor, std::string state_dir,
                                             std::string relay_id);

// Output a one-shot command may print: an exchange reply is at most 256 KiB,
// armored (5/4) with room for a channel's noise.
inline constexpr std::size_t kMaxOneShotOutputBytes = 2 << 20;

// Runs a one-shot command and returns all it printed; kResourceExhausted
// (never a cut output) when it printed more than kMaxOneShotOutputBytes.
boost::asio::awaitable<absl::StatusOr<std::string>> RunOneShot(Transport& transport,
                                                               std::vector<std::string> argv);

}  // namespace tether::internal
