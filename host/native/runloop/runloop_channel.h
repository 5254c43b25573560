// The Runloop provider's two kinds of Channel (internal to
// host/native/runloop/):
//   - a streaming execution (execute_async with attach_stdin): stdout from
//     the SSE stream, resumed from its offset after a 408 or a cut; stdin
//     batched through send_std_in; the exit from wait_for_status. It records
//     in `verdict` when sending stdin killed the execution.
//   - one synchronous execute: its stdout once it is done, then EOF (the
//     exchange tunnel's polls).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <memory>
#include <string>

#include "host/native/runloop/runloop_calls.h"
#include "tether/transport.h"

namespace tether::runloop {

// Starts reading execution `eid` (already started by execute_async) in the
// background and returns its channel.
std::unique_ptr<Channel> StartStreamChannel(const asio::any_io_executor& ex, std::shared_ptr<RunloopApi> api,
                                            std::shared_ptr<StdinVerdict> verdict, std::string eid);

// Runs `command` through execute in the background; its channel.
std::unique_ptr<Channel> StartOneShotChannel(const asio::any_io_executor& ex, std::shared_ptr<RunloopApi> api,
                                             std::string command);

}  // namespace tether::runloop
