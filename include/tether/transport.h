// Transport: what tether needs from a sandbox provider's native channel.
//
// A provider only has to run a command inside the sandbox with its stdin and
// stdout connected as byte streams (Exec) and put a file there (PutFile).
// Everything else (framing, offsets, acknowledgements, reattach) is built on
// top by the session layer, identically for every provider.
//
// All calls run on one Asio executor; results are values, never exceptions.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace tether {

// One command running in the sandbox; its stdio as byte streams.
//
// The contract Process and Session rely on (and test doubles must keep):
// - At most one ReadSome and one Write are pending at a time.
// - Cancellation: ReadSome and Write honour Asio's per-operation
//   cancellation (the terminal type, which `op || timer` emits) by
//   completing promptly with an error. A cancelled ReadSome returns no
//   bytes and must not have consumed any; a cancelled Write may have sent a
//   prefix, so the caller treats the channel as failed and closes it.
// - Close() always works: it never blocks, is idempotent, and makes every
//   pending ReadSome and Write complete promptly with an error. A native
//   channel that cannot cancel an operation (a blocking SDK call) must still
//   end it on Close(): the deadlines of Process close the channel when they
//   pass, so such a channel cannot hold them (tests/host/transports/channel_contract_test.cc).
// - Nothing here throws; errors are Status values.
class Channel {
 public:
  virtual ~Channel() = default;
  // Reads some bytes of the command's stdout; 0 means EOF.
  virtual boost::asio::awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf) = 0;
  // Optional: waits until ReadSome() would not wait (bytes, EOF or an
  // error), so that a reader holds no buffer while the channel is quiet.
  // Only called when waits_readable() and after a ReadSome() that left
  // nothing waiting (it returned less than it was offered). Cancellation
  // and Close() as for ReadSome (an error).
  virtual bool waits_readable() const { return false; }
  virtual boost::asio::awaitable<absl::Status> WaitReadable() { co_return absl::OkStatus(); }
  // Writes all of `bytes` to the command's stdin.
  virtual boost::asio::awaitable<absl::Status> Write(std::string_view bytes) = 0;
  // Sends EOF to the command's stdin.
  virtual void CloseWrite() = 0;
  // Abandons the command: stops I/O and releases local resources. The
  // supervisor's daemon survives; only this channel's bridge goes away.
  virtual void Close() = 0;
  // Closes gracefully where the native channel has a closing handshake (a
  // WebSocket close frame): completes when it is done or has failed, within
  // a bounded time of its own, and at once (as Close()) when cancelled.
  // Afterwards the channel is closed as by Close(). Default: Close().
  virtual boost::asio::awaitable<void> AsyncClose() {
    Close();
    co_return;
  }
  // The remote command's exit status (its code, or 128 + signal) once the
  // native channel has reported one, typically after ReadSome() returned
  // EOF; nullopt while unknown, and always for channels whose native API
  // reports none (the default). Never a guess.
  virtual std::optional<int> exit_code() const { return std::nullopt; }
  // The last few KiB the command wrote to stderr, for error messages.
  virtual std::string Diagnostics() const = 0;
};

// What the host learns about a sandbox before using it.
struct SandboxInfo {
  std::string arch;        // "x86_64" or "aarch64" (uname -m)
  std::string state_root;  // private directory for supervisor state (absolute)
  std::string bin_dir;     // where the supervisor binary is installed (absolute)
};

// What a transport's native channel can do. The host chooses how frames
// travel from this alone (host/tunnel/choose.h): a transport never names a
// tunnel itself.
struct ChannelCapabilities {
  // stdin and stdout carry every byte value (NUL, invalid UTF-8) unchanged.
  bool exact_bytes = true;
  // Closing stdin reaches the command as EOF. (No tunnel depends on it: the
  // protocol ends input and attachments with frames of its own.)
  bool stdin_eof = true;
  // A command runs with live stdio while it runs; false: one-shot commands
  // only, their output returned once they exit.
  bool streaming = true;
  // The transport also implements DirectConnector: the sandbox shares this
  // machine and the supervisor's socket can be connected to directly.
  bool direct_connect = false;
  // Bytes cross a network or a metered API: compression pays for its CPU.
  bool costly_bytes = true;
  // The native channel is a network stream that can be cut while both ends
  // live (an HTTP response stream, a WebSocket through proxies): attachments
  // are reattached through a new Exec when it fails, losing nothing.
  bool cut_prone = false;
};

// How frames travel over the native channel (docs/providers/README.md, Tunnels).
enum class TunnelMode {
  kBinary,    // exact bytes both ways, through a bridge process
  kText,      // text lines only: frames go as armored lines (protocol/armor.h)
  kExchange,  // one-shot commands only: polls through a relay (supervisor/exchange.h)
  kDirect,    // this machine: the host connects to the supervisor's socket itself
};

// The capabilities of a channel that carries exactly what `mode` needs (test
// decorators and the command provider describe their channels this way).
inline ChannelCapabilities CapabilitiesOf(TunnelMode mode) {
  ChannelCapabilities c;
  c.exact_bytes = mode == TunnelMode::kBinary || mode == TunnelMode::kDirect;
  c.streaming = mode != TunnelMode::kExchange;
  c.direct_connect = mode == TunnelMode::kDirect;
  c.costly_bytes = mode != TunnelMode::kDirect;
  return c;
}

// Transports are owned by std::shared_ptr (every factory returns one): a
// process handle, a dropped handle finishing in the background and a
// reconnect each hold a reference to the transport they use, so it lives as
// long as they do. Process::Start and Reopen refuse a transport that is not
// owned by a shared_ptr.
class Transport : public std::enable_shared_from_this<Transport> {
 public:
  virtual ~Transport() = default;
  virtual ChannelCapabilities capabilities() const { return {}; }
  // Called by Process::Start and Reopen before they read capabilities(): a
  // transport that can only learn what its channel does by trying (Runloop:
  // whether sending stdin kills an execution) finds out here, once, and
  // capabilities() then answers from what it found. Default: nothing to learn.
  virtual boost::asio::awaitable<absl::Status> Prepare() { co_return absl::OkStatus(); }
  // For the start scripts (host/tunnel/start_script.h): an architecture to
  // assume instead of `uname -m`, a program every supervisor runs through
  // (user-mode emulation, in tests), and this sandbox's supervisor policy
  // (a preinstalled path; whether uploads are allowed), which a start's own
  // StartOptions refine. Default: none of them.
  struct ScriptOverrides {
    std::string arch, emulator;
    // The sandbox's one private directory (0700, ours), used as is instead
    // of <$TMPDIR, /tmp, ...>/tether-<uid> (the local provider's root).
    std::string private_root;
    std::string supervisor_path;     // StartOptions::supervisor_path, when that is empty
    bool upload_supervisor = true;   // and-ed with StartOptions::upload_supervisor
  };
  virtual ScriptOverrides script_overrides() const { return {}; }
  // Installs a file the caller knows is not there yet (a start script said
  // so): a transport may skip its check for an identical copy. Same
  // contract as PutFile otherwise.
  virtual boost::asio::awaitable<absl::Status> PutNewFile(std::string path, std::string_view bytes, int mode) {
    co_return co_await PutFile(std::move(path), bytes, mode);
  }
  virtual std::string_view name() const = 0;
  // Identifies the sandbox (for the local provider, its directory); saved in
  // process references so that one is never reopened in another sandbox.
  virtual std::string sandbox_id() const = 0;
  virtual boost::asio::any_io_executor executor() const = 0;
  // Architecture and private paths inside the sandbox.
  virtual boost::asio::awaitable<absl::StatusOr<SandboxInfo>> Probe() = 0;
  // Runs argv (argv[0] an absolute path in the sandbox) with piped stdio.
  virtual boost::asio::awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(
      std::vector<std::string> argv) = 0;
  // Installs `bytes` at `path` with `mode`, atomically (never a partial file
  // at `path`). A file already there with the same content is left alone.
  virtual boost::asio::awaitable<absl::Status> PutFile(std::string path, std::string_view bytes,
                                                       int mode) = 0;
};

// Implemented by transports whose sandbox shares this machine (the local
// provider, capabilities().direct_connect): the host connects to the
// supervisor's socket in `state_dir` itself, no bridge process, one hop and
// two copies less. (Decorating transports do not forward this: their
// channels are Exec's.)
class DirectConnector {
 public:
  virtual ~DirectConnector() = default;
  virtual boost::asio::awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Connect(std::string state_dir) = 0;
};

}  // namespace tether
