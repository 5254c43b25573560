// The conformance cases, one function each (the table is in runner.cc).
// Each returns OK (pass), kUnimplemented (unsupported here) or a failure.
#pragma once

#include <boost/asio/awaitable.hpp>

#include "absl/status/status.h"
#include "tether/transport.h"

namespace tether::conformance {

// Bytes, EOF, exit, start, limits and flow control (cases_io.cc).
boost::asio::awaitable<absl::Status> StdoutAllValues(Transport& t);
boost::asio::awaitable<absl::Status> StdinRoundTrip(Transport& t);
boost::asio::awaitable<absl::Status> StdinWcCounts(Transport& t);
boost::asio::awaitable<absl::Status> StdinClosed(Transport& t);
boost::asio::awaitable<absl::Status> StderrApart(Transport& t);
boost::asio::awaitable<absl::Status> ExitCodes(Transport& t);
boost::asio::awaitable<absl::Status> ExitBySignal(Transport& t);
boost::asio::awaitable<absl::Status> StartErrors(Transport& t);
boost::asio::awaitable<absl::Status> EnvironmentExact(Transport& t);
boost::asio::awaitable<absl::Status> LimitsRejected(Transport& t);
boost::asio::awaitable<absl::Status> TextMode(Transport& t);
boost::asio::awaitable<absl::Status> SlowReader(Transport& t);

// Signals, terminate, pty, reopen, cancellation and detach (cases_control.cc).
boost::asio::awaitable<absl::Status> SignalGroup(Transport& t);
boost::asio::awaitable<absl::Status> TerminateIgnoringTerm(Transport& t);
boost::asio::awaitable<absl::Status> TerminateSetsidGrandchild(Transport& t);
boost::asio::awaitable<absl::Status> PtySizeAndResize(Transport& t);
boost::asio::awaitable<absl::Status> PtyEof(Transport& t);
boost::asio::awaitable<absl::Status> DisconnectReopen(Transport& t);
boost::asio::awaitable<absl::Status> ReopenAfterCut(Transport& t);
boost::asio::awaitable<absl::Status> OneAttachment(Transport& t);
boost::asio::awaitable<absl::Status> BadReferences(Transport& t);
boost::asio::awaitable<absl::Status> CancelledSetup(Transport& t);
boost::asio::awaitable<absl::Status> AbortedWait(Transport& t);
boost::asio::awaitable<absl::Status> DetachLeavesItRunning(Transport& t);

}  // namespace tether::conformance
