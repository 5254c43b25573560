// The process API: one process inside a sandbox, exact and uniform on every
// provider.
//
//   auto transport = *MakeLocalTransport(io.get_executor());
//   StartOptions opts;
//   opts.argv = {"sh", "-c", "cat; exit 3"};
//   opts.stdin_pipe = true;
//   auto p = co_await Process::Start(*transport, opts);      // StatusOr
//   co_await (*p)->Write("bytes\0\xff");
//   co_await (*p)->CloseStdin();
//   while (auto chunk = co_await (*p)->Read()) {             // StatusOr<optional>
//     if (!chunk.ok() || !*chunk) break;
//     Consume((*chunk)->stream, (*chunk)->bytes);
//   }
//   auto exit = co_await (*p)->Wait();                        // code or signal
//
// A Process is driven from one executor (one io_context thread); its
// coroutines must not be resumed from other threads. The transport must be
// owned by a std::shared_ptr (its factory returns one): a handle, a dropped
// handle finishing in the background (it acknowledges the exit) and a
// reconnect hold a reference to it. Output is flow
// controlled end to end: a consumer that stops reading makes the child block
// on its pipe, and nothing is lost.
//
// Limits (docs/process-api.md): a write carries at most 64 KiB; at most
// 256 KiB and 256 writes wait in the input queue; a chunk from Read() is at
// most 16 KiB; at most 64 KiB (output_window_bytes) and 256 chunks of output
// are unread or in flight. Finite output (the default) stops at
// max_output_bytes (1 MiB).
//
// Aborting: Start, Write, Read, Wait, Status and Terminate honour Asio's
// per-operation cancellation, e.g.
//   co_await (p->Wait() || timer.async_wait(asio::use_awaitable));
// An aborted call returns WAIT_ABORTED (ErrorCodeOf) and cancels only that
// caller: a queued write is dropped unsent; a Start aborted before its launch
// was dispatched started nothing, one aborted after is OUTCOME_UNKNOWN and
// leaves a cancellation marker, exactly like a setup timeout.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tether/process_types.h"
#include "tether/transport.h"

namespace tether {

// The number of a signal given as "TERM", "SIGTERM" or "15" (Linux numbers,
// the same on x86_64 and aarch64); kInvalidArgument for anything else.
absl::StatusOr<int> SignalNumber(std::string_view name);

// OK for a terminal size within 1..kMaxTerminalCells, else kInvalidArgument.
absl::Status CheckTerminalSize(unsigned cols, unsigned rows);

class Process {
 public:
  // Installs the supervisor if needed, launches the child and attaches.
  // kInvalidArgument for a bad request (nothing started); kNotFound /
  // kPermissionDenied when the executable or cwd cannot be used.
  static boost::asio::awaitable<absl::StatusOr<std::unique_ptr<Process>>> Start(
      Transport& transport, StartOptions options);

  struct State;  // shared with the receive pump

  // Reattaches to a process from its Reference() (see reference.h) through
  // `transport`, which must reach the same sandbox. Output resumes where the
  // reference's holder stopped; output_gap() tells whether bytes evicted
  // while nobody was attached were lost. Never starts anything.
  // kDeadlineExceeded for an expired reference, kNotFound when the process
  // is gone, BUSY (kUnavailable) while another attachment holds it,
  // kUnavailable when the supervisor cannot be reached (never "gone"). The
  // reference's paths must be this sandbox's private ones (a tampered
  // reference is kInvalidArgument and runs nothing).
  static boost::asio::awaitable<absl::StatusOr<std::unique_ptr<Process>>> Reopen(
      Transport& transport, std::string_view reference, ReopenOptions options);
  // With default options. (An overload, not a default argument: g++ 12
  // destroys default-argument temporaries twice inside coroutines.)
  static boost::asio::awaitable<absl::StatusOr<std::unique_ptr<Process>>> Reopen(Transport& transport,
                                                                                  std::string_view reference);

  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  // Writes exact bytes to the child's stdin (at most kMaxWriteBytes per call),
  // in call order; returns once the bytes are handed to the channel (waiting
  // for the supervisor's stdin window first). An empty write checks that
  // input is still allowed. INPUT_CLOSED once stdin is closed or was never a
  // pipe; kResourceExhausted when kMaxWriteQueueBytes / kMaxWriteQueueCalls
  // already wait; OUTCOME_UNKNOWN once the connection failed while input was
  // unacknowledged (input is then disabled, never retried).
  boost::asio::awaitable<absl::Status> Write(std::string_view bytes);
  // Sends EOF after everything written so far. Idempotent.
  boost::asio::awaitable<absl::Status> CloseStdin();
  // The next chunk of output (at most kMaxChunkBytes) in arrival order,
  // stdout and stderr kept apart by `stream`; nullopt once both streams have
  // ended. One consumer. OUTPUT_CAPACITY (see OutputMode, backpressure) once
  // observation stopped; everything before it was delivered.
  boost::asio::awaitable<absl::StatusOr<std::optional<OutputChunk>>> Read();
  // Waits for the confirmed exit. kUnavailable if the connection failed
  // before the exit was observed (never a guessed status).
  boost::asio::awaitable<absl::StatusOr<ExitStatus>> Wait();

  // Sends `signal` to the child's process group and returns once the
  // supervisor sent it (kNotFound once it exited). If the connection breaks
  // before the supervisor confirmed it, a signal that never left this host
  // is sent through the next attachment; one that may have reached the
  // supervisor is never sent again (it could arrive twice) and the result
  // is kUnknown (OUTCOME_UNKNOWN), as when no confirmation comes within 30 s.
  boost::asio::awaitable<absl::Status> Signal(int signal);
  // The same by name: "SIGTERM", "TERM" or "15".
  boost::asio::awaitable<absl::Status> Signal(std::string_view name);
  // SIGTERM to the group, then SIGKILL after grace_ms if it is still alive
  // (and anything that escaped the group with setsid). Returns once the
  // supervisor acknowledged the request; Wait() confirms the exit.
  // Concurrent callers share one request. When its acknowledgement is lost
  // (30 s, or the connection failed) the result is kUnknown
  // (OUTCOME_UNKNOWN), saved and returned to later calls without sending
  // another request.
  boost::asio::awaitable<absl::Status> Terminate(unsigned grace_ms);

  // Changes the terminal size (the child gets SIGWINCH). UNSUPPORTED
  // without a pty; kInvalidArgument for a size outside 1..10000. Returns
  // once the supervisor applied it; a broken connection is handled as for
  // Signal (OUTCOME_UNKNOWN when it cannot tell).
  boost::asio::awaitable<absl::Status> Resize(unsigned cols, unsigned rows);

  // running | exited | unknown, asking the supervisor (30 s timeout).
  // WAIT_ABORTED when the caller aborts it.
  boost::asio::awaitable<absl::StatusOr<ProcessStatus>> Status();

  // Private JSON to reopen this process later; expires within 24 h.
  // kFailedPrecondition while written input is not yet acknowledged.
  absl::StatusOr<std::string> Reference() const;
  // Releases this attachment at once without touching the child (its stdin
  // stays open); the handle then refuses input and control. Idempotent.
  // Unread output stays in the supervisor's ring for Reopen().
  boost::asio::awaitable<absl::Status> Disconnect();
  // Done with this handle: releases the attachment like Disconnect() and
  // discards the output not yet read (Read() then ends). Requests no kill
  // and does not close the child's stdin. Idempotent.
  boost::asio::awaitable<absl::Status> Detach();

  // The child's pid inside the sandbox (also its process group id).
  std::int32_t pid() const;
  // True once the supervisor reported output lost while detached.
  bool output_gap() const;
  // What this handle skipped of `stream` (kStdout or kPty, kStderr) and why.
  OutputMissing output_missing(StreamId stream) const;
  // True when the process runs on a terminal (output is kPty).
  bool has_pty() const;
  // How many times this handle reattached after its channel failed.
  std::uint64_t reconnects() const;
  // Output received and not yet taken by Read(): at most output_window_bytes
  // and kMaxUnreadChunks.
  std::size_t unread_bytes() const;
  std::size_t unread_chunks() const;
  // Whether Read() would return without waiting (a chunk, the end or an
  // error). In text output a received chunk may hold only part of a
  // character, so unread_chunks() > 0 does not promise it.
  bool read_ready() const;

 private:
  static boost::asio::awaitable<absl::StatusOr<std::unique_ptr<Process>>> StartSetup(
      Transport& transport, StartOptions options);
  explicit Process(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace tether
