// One connection from a host (through a bridge or directly), on the daemon's
// loop: moves bytes between its socket and its AttachmentCore.
//
// Owns the socket, the writer's wake-up and the lease timer. Three
// coroutines: the reader feeds the core what the socket delivers and hands
// the core's actions to the daemon (AttachmentOwner); the writer writes the
// batches the core fills (one gather write each); the lease closes the
// connection when the core says its lease ran out. Never decides anything
// about the protocol: that is attachment_core.h.
#pragma once

#include <sys/types.h>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>

#include "supervisor/async.h"
#include "supervisor/attachment_core.h"

namespace tether::supervisor {

class Attachment;

// What an attachment asks of the daemon.
class AttachmentOwner {
 public:
  // Performs `action` for `from` (failures go back through from.Refused()).
  virtual void Perform(const Action& action, Attachment& from) = 0;
  // `a` closed; `lost`: the connection broke (no detach, lease not over).
  virtual void Detached(const Attachment* a, bool lost) = 0;

 protected:
  ~AttachmentOwner() = default;
};

// True when `pid` is stopped (SIGSTOP, Ctrl-Z) or stopped by a tracer: an
// attachment whose peer is stopped is not lost, only paused.
bool ProcessStopped(pid_t pid);

class Attachment : public std::enable_shared_from_this<Attachment> {
 public:
  // `peer_pid`: SO_PEERCRED at connect; 0 when not visible here.
  Attachment(AttachmentOwner& owner, Supervised& process, asio::local::stream_protocol::socket socket,
             pid_t peer_pid);

  // Runs until the connection ends; the attachment is closed then.
  asio::awaitable<void> Run();
  void Close();
  bool closed() const { return closed_; }
  bool authenticated() const { return core_.authenticated(); }
  bool control() const { return core_.control(); }
  pid_t peer_pid() const { return peer_pid_; }
  std::uint64_t generation() const { return core_.generation(); }
  // New output, EOF or exit: the writer looks again.
  void Wake() { wake_.Notify(); }
  void QueueStdinAck();
  // The daemon could not perform `action`: the host is told why.
  void Refused(const Action& action, const absl::Status& why);

 private:
  asio::awaitable<void> Reader();
  asio::awaitable<void> Writer();
  asio::awaitable<void> Lease();
  void WakeIfQueued();

  AttachmentOwner& owner_;
  AttachmentCore core_;
  asio::local::stream_protocol::socket socket_;
  Notifier wake_;
  asio::steady_timer lease_timer_;
  bool closed_ = false;
  pid_t peer_pid_ = 0;
};

}  // namespace tether::supervisor
