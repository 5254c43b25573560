// The Docker exec channel (internal to the docker provider): the stdio of
// one exec, a raw stream upgraded from `POST /exec/{id}/start`, read as
// stdcopy frames (stdout is the channel, stderr its Diagnostics(), the
// engine's own error report a failure) with stdin written raw; once the
// stream ends, the exit status from `GET /exec/{id}/json`.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "host/net/http.h"
#include "tether/transport.h"

namespace tether::docker {

// What the transport and its channels share.
struct Engine {
  std::shared_ptr<net::Client> client;
  std::string container;
  std::string api;    // "/v1.41"
  std::string where;  // the endpoint and where it came from, for messages
};

// A stream that is not what the engine should send (kProtocol attached).
absl::Status ProtocolError(std::string_view message);

// The channel over exec `exec_id`'s upgraded stream. `on_abandon` (may be
// empty) is called once if the channel is closed before the stream's end:
// the engine may leave such a command running, and the transport ends it.
std::unique_ptr<Channel> MakeExecChannel(boost::asio::any_io_executor ex, std::shared_ptr<const Engine> engine,
                                         std::string exec_id, std::unique_ptr<net::RawStream> raw,
                                         std::function<void()> on_abandon);

}  // namespace tether::docker
