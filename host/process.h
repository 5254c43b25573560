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
// coroutines must not be resumed from other threads. Keep the Transport alive
// until that executor's work is done: a dropped handle finishes in the
// background (it acknowledges the exit), through the transport. Output is flow
// controlled end to end: a consumer that stops reading makes the child block
// on its pipe, and nothing is lost.
//
// Limits (seed 000): a write carries at most 64 KiB; at most 256 KiB and 256
// writes wait in the input queue; a chunk from Read() is at most 16 KiB; at
// most 64 KiB (output_window_bytes) and 256 chunks of output are unread or in
// flight. Finite output (the default) stops at max_output_bytes (1 MiB).
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
#include "host/transport.h"

namespace tether {

inline constexpr std::size_t kMaxWriteBytes = 64 * 1024;          // per Write()
inline constexpr std::size_t kMaxWriteQueueBytes = 256 * 1024;    // waiting writes, incl. the one in progress
inline constexpr std::size_t kMaxWriteQueueCalls = 256;
inline constexpr std::size_t kMaxChunkBytes = 16 * 1024;          // per OutputChunk from Read()
inline constexpr std::size_t kMaxUnreadChunks = 256;
inline constexpr std::size_t kDefaultOutputWindowBytes = 64 * 1024;  // unread + in flight
inline constexpr std::size_t kMaxFiniteOutputBytes = 1 << 20;     // finite mode's cap
inline constexpr unsigned kMaxTerminalCells = 10000;               // cols or rows of a pty

// The number of a signal given as "TERM", "SIGTERM" or "15" (Linux numbers,
// the same on x86_64 and aarch64); kInvalidArgument for anything else.
absl::StatusOr<int> SignalNumber(std::string_view name);

// OK for a terminal size within 1..kMaxTerminalCells, else kInvalidArgument.
absl::Status CheckTerminalSize(unsigned cols, unsigned rows);

enum class OutputMode {
  // At most max_output_bytes (1..1 MiB) of output over the process's life;
  // past it Read() fails with OUTPUT_CAPACITY (after every byte up to the
  // cap), the rest is discarded, and the process keeps running.
  kFinite,
  // No total limit: read it as it comes.
  kStream,
};

enum class OutputFormat {
  // Valid UTF-8: characters split across chunks are joined, invalid bytes
  // become U+FFFD. Offsets still count the original bytes.
  kText,
  kBytes,  // the exact bytes, NUL and invalid UTF-8 included
};

struct StartOptions {
  std::vector<std::string> argv;  // argv[0]: absolute path or a bare name from PATH
  std::string cwd;                // empty: the sandbox's default directory
  std::vector<std::pair<std::string, std::string>> env;  // on top of the base
  bool inherit_env = true;  // base = the sandbox's environment minus credential-shaped names
  bool stdin_pipe = false;  // else the child's stdin is /dev/null (a pty always takes input)
  // Run on a new terminal of this size (cells, 1..10000): stdin, stdout and
  // stderr are the terminal, output is one combined stream (kPty), EOF is
  // the terminal's EOF character, and Resize() changes the size.
  struct PtySize {
    unsigned cols = 80, rows = 24;
  };
  std::optional<PtySize> pty;
  OutputMode output_mode = OutputMode::kFinite;
  OutputFormat output_format = OutputFormat::kText;
  // Finite mode's cap, 1..kMaxFiniteOutputBytes; 0: the cap. Must be 0 in
  // stream mode.
  std::size_t max_output_bytes = 0;
  // Backpressure (default): output unread by the application plus output in
  // flight never exceeds this many bytes (16 KiB..64 MiB); past it the
  // supervisor holds output in its ring and then the child blocks on its
  // pipe. Raise it for channels with a high bandwidth-delay product.
  std::size_t output_window_bytes = kDefaultOutputWindowBytes;
  // Without backpressure the supervisor sends output as it comes, and an
  // application that lets more than 64 KiB (output_window_bytes) or 256
  // chunks go unread gets OUTPUT_CAPACITY from Read(): observation stops
  // (after every chunk queued before it), nothing is dropped silently, the
  // process keeps running.
  bool backpressure = true;
  // The supervisor's output ring per stream, for output nobody has read yet
  // (kept while detached; 4 KiB..64 MiB). 0: 1 MiB.
  std::size_t ring_bytes = 0;
  // The supervisor drops an attachment that sends nothing for this long; the
  // host pings at a third of it. 0: the supervisor's default (30 s).
  unsigned lease_ms = 0;
  // How long the supervisor keeps an unacknowledged exit record (and the
  // output nobody read) for a later reopen. 0: its default, 10 minutes.
  unsigned linger_ms = 0;
  // When the native channel fails before the exit, attach again through a
  // new bridge (backing off, for up to 30 s) and continue exactly where the
  // acknowledged offsets stand: unacknowledged input is sent again (the
  // supervisor drops what it already has), and a pending terminate or
  // status request too. Always on for text tunnels. Off: a failed channel
  // is UNAVAILABLE, and Reopen() is the way back.
  bool reconnect = false;
  // Local limit on setup (install, launch, handshake). When it passes after
  // the launch was dispatched, Start leaves a cancellation marker so that a
  // delayed launch never starts the child, and fails with kUnknown
  // (OUTCOME_UNKNOWN); it never starts the command again to recover.
  unsigned setup_timeout_ms = 30 * 1000;
  // The process belongs to this host alone (`tether run`: no reference is
  // ever handed out). When the attachment is lost and nobody reattaches
  // within a further lease, the supervisor terminates it (SIGTERM, SIGKILL
  // after 2 s) and cleans up. A host on the sandbox's own machine that is
  // merely stopped (Ctrl-Z) keeps it.
  bool end_with_host = false;
};

struct ReopenOptions {
  // A control handle: Status(), Signal(), Terminate() and Resize() only.
  // It works while another handle holds the process (no BUSY), receives no
  // output and never acknowledges the exit, so a later Wait() through a full
  // reopen still gets the exit and every unread byte. Read() is UNSUPPORTED,
  // Write() INPUT_CLOSED, Wait() and Reference() kFailedPrecondition.
  bool control = false;
  // Local limit on finding the sandbox and attaching (every native call).
  unsigned timeout_ms = 30 * 1000;
};

enum class StreamId { kStdout = 1, kStderr = 2, kPty = 3 };

struct OutputChunk {
  StreamId stream;
  std::uint64_t offset;  // of bytes[0] within its stream
  std::string bytes;
};

struct ExitStatus {
  std::optional<int> code;    // exited normally
  std::optional<int> signal;  // terminated by this signal
  bool core_dumped = false;
  std::uint64_t user_us = 0, system_us = 0, max_rss_kib = 0;
  // Background descendants still held stdout/stderr open 2 s after the child
  // exited: output was collected up to there, not beyond.
  bool output_cut = false;
  // When Wait() returned: all output had been read through Read(), with no
  // gap and nothing cut. A wait before the output is read returns false; a
  // later one can return true.
  bool output_complete = false;
  // The shell convention: code, or 128 + signal.
  int ShellStatus() const { return code ? *code : 128 + signal.value_or(0); }
};

struct ProcessStatus {
  enum class State { kRunning, kExited, kUnknown };
  State state = State::kUnknown;
  std::optional<ExitStatus> exit;  // set when kExited
  std::chrono::system_clock::time_point observed_at;
};

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
      Transport& transport, std::string_view reference, ReopenOptions options = {});

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

  // Sends `signal` to the child's process group. kNotFound once it exited.
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
  // without a pty; kInvalidArgument for a size outside 1..10000.
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
  // True when the process runs on a terminal (output is kPty).
  bool has_pty() const;
  // How many times this handle reattached after its channel failed.
  std::uint64_t reconnects() const;
  // Output received and not yet taken by Read(): at most output_window_bytes
  // and kMaxUnreadChunks.
  std::size_t unread_bytes() const;
  std::size_t unread_chunks() const;

 private:
  static boost::asio::awaitable<absl::StatusOr<std::unique_ptr<Process>>> StartSetup(
      Transport& transport, StartOptions options);
  explicit Process(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace tether
