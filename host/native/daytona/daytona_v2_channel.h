// The daytona provider's Channel over the process API v2 (internal to
// host/native/daytona/; the design is at the top of daytona_v2_channel.cc,
// the wire in daytona_v2.h).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <memory>
#include <string>

#include "host/native/daytona/daytona_channel.h"
#include "tether/transport.h"

namespace tether::daytona {

// The channel of process `id`, created under `prefix` (v2::kPrefixes); its
// log stream is opened by a background reader at once.
std::unique_ptr<Channel> MakeDaytonaV2Channel(boost::asio::any_io_executor ex, std::shared_ptr<DaytonaApi> api,
                                              std::string prefix, std::string id);

}  // namespace tether::daytona
