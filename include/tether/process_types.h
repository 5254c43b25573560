// The process API's value types and limits (docs/process-api.md), without
// I/O: shared by the API (process.h), its sans-I/O cores (host/core/) and
// helpers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>
#include <chrono>

namespace tether {

inline constexpr std::size_t kMaxWriteBytes = 64 * 1024;          // per Write()
inline constexpr std::size_t kMaxWriteQueueBytes = 256 * 1024;    // waiting writes, incl. the one in progress
inline constexpr std::size_t kMaxWriteQueueCalls = 256;
inline constexpr std::size_t kMaxChunkBytes = 16 * 1024;          // per OutputChunk from Read()
inline constexpr std::size_t kMaxUnreadChunks = 256;
inline constexpr std::size_t kDefaultOutputWindowBytes = 64 * 1024;  // unread + in flight
inline constexpr std::size_t kMaxFiniteOutputBytes = 1 << 20;     // finite mode's cap
inline constexpr unsigned kMaxTerminalCells = 10000;               // cols or rows of a pty

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
  // new bridge (backing off, for up to reconnect_timeout_ms) and continue
  // exactly where the acknowledged offsets stand: unacknowledged input is
  // sent again (the supervisor drops what it already has), and a pending
  // terminate or status request too. Always on for text tunnels. Off: a
  // failed channel is UNAVAILABLE, and Reopen() is the way back.
  bool reconnect = false;
  // How long reconnecting may take in all (ms): each attempt (a new channel
  // and its handshake) is bounded too, by a third of it (the last one by
  // what remains), so a channel that opens and then stays silent is given
  // up and another tried. When it passes, the handle fails with
  // UNAVAILABLE.
  unsigned reconnect_timeout_ms = 30 * 1000;
  // Local limit on setup (install, launch, handshake). When it passes after
  // the launch was dispatched, Start leaves a cancellation marker so that a
  // delayed launch never starts the child and a child already started is
  // ended (SIGTERM, SIGKILL a second later), and fails with kUnknown
  // (OUTCOME_UNKNOWN); it never starts the command again to recover.
  unsigned setup_timeout_ms = 30 * 1000;
  // The process belongs to this host alone (`tether run`: no reference is
  // ever handed out). When the attachment is lost and nobody reattaches
  // within a further lease, the supervisor terminates it (SIGTERM, SIGKILL
  // after 2 s) and cleans up. A host on the sandbox's own machine that is
  // merely stopped (Ctrl-Z) keeps it.
  bool end_with_host = false;
  // The supervisor in the sandbox. Over exec channels a start looks, in one
  // native call (host/tunnel/start_script.h), for: this path when set (a
  // supervisor baked into the image), then /usr/local/libexec/tether/ and
  // /usr/libexec/tether/tether-supervisor and tether-supervisor on PATH,
  // each accepted when its protocol is compatible; then the one this host
  // uploaded earlier. Only when none fits is the supervisor uploaded.
  std::string supervisor_path;
  // false: never upload; a start without a compatible preinstalled
  // supervisor fails with kFailedPrecondition naming what it found.
  bool upload_supervisor = true;
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
  // A preinstalled supervisor path the process may run under (as
  // StartOptions::supervisor_path); the well-known places and PATH are
  // always accepted.
  std::string supervisor_path;
  // Resume output at these byte offsets instead of where the reference's
  // holder stopped (stdout_from: the terminal's stream with a pty), e.g.
  // at the sizes of the files a killed reader wrote. An offset beyond what
  // the stream has produced so far is kInvalidArgument. One below what the
  // supervisor still holds resumes where its ring starts; Process::
  // output_missing() tells how many bytes were skipped and why.
  std::optional<std::uint64_t> stdout_from, stderr_from;
};

// Output a reopened handle will never see, per stream, between where it
// asked to resume and where the supervisor's ring started.
struct OutputMissing {
  std::uint64_t dropped = 0;       // dropped while nobody was attached (lost)
  std::uint64_t read_earlier = 0;  // acknowledged by an earlier reader
};

struct ProcessStatus {
  enum class State { kRunning, kExited, kUnknown };
  State state = State::kUnknown;
  std::optional<ExitStatus> exit;  // set when kExited
  std::chrono::system_clock::time_point observed_at;
};

}  // namespace tether
