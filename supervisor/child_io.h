// The child's stdio on the daemon's loop: pumps that move bytes between its
// pipes (or terminal) and the Supervised rings and stdin queue.
//
//   output pump (per stream)  pipe -> OutputRing, only into free space: a
//                             full ring stops reading and the child blocks
//                             on its pipe (backpressure), unless the
//                             listener says the ring may evict (detached)
//   stdin pump                StdinQueue -> pipe (non-blocking), then EOF
//
// Owns the child's stdio descriptors. Never decides what the host is sent
// or when the exit is reported: it tells its ChildIoListener (the daemon).
#pragma once

#include <array>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "absl/status/status.h"
#include "supervisor/async.h"
#include "supervisor/child.h"
#include "supervisor/supervised.h"

namespace tether::supervisor {

class ChildIoListener {
 public:
  // A full ring may drop its oldest bytes instead of blocking the child.
  virtual bool MayEvict() const = 0;
  // New bytes in a ring, or its EOF.
  virtual void OutputArrived() = 0;
  // Stream `i` ended (Supervised::eof set): nothing more will come.
  virtual void StreamEnded(int i) = 0;
  // Stdin was written, dropped or closed: the host gets an ack.
  virtual void StdinMoved() = 0;

 protected:
  ~ChildIoListener() = default;
};

class ChildIo {
 public:
  ChildIo(asio::io_context& io, Supervised& process, ChildIoListener& listener);

  // Takes the child's descriptors and starts the pumps.
  void Start(const Child& child);
  // Ring `i` has free space (acknowledged, or evicting is now allowed).
  void Released(int i) { streams_[i]->space.Notify(); }
  void WakeOutputPumps() {
    for (auto& s : streams_) s->space.Notify();
  }
  // Stdin bytes or the EOF were queued.
  void StdinReady() { stdin_ready_.Notify(); }
  // Sets the terminal's size (a no-op once the terminal is gone).
  absl::Status Resize(const wire::PtySize& size);
  // Bytes waiting in stream i's pipe (or terminal), not yet read into its
  // ring (0 once the stream is closed).
  std::size_t Unread(int i);
  // Descendants hold the output open after the child exited: stop reading
  // (they get EPIPE or SIGPIPE on their next write). True if any was open.
  bool CutOutput();
  // The exit is recorded: close a terminal's master, kept open until now.
  void CloseTerminal();

 private:
  struct Stream {
    Stream(asio::io_context& io) : fd(io), space(io.get_executor()) {}
    asio::posix::stream_descriptor fd;
    Notifier space;
  };
  asio::awaitable<void> OutputPump(int i);
  asio::awaitable<void> StdinPump();
  asio::awaitable<void> WriteTerminalEof();

  asio::io_context& io_;
  Supervised& p_;
  ChildIoListener& listener_;
  std::array<std::unique_ptr<Stream>, kNumStreams> streams_;
  asio::posix::stream_descriptor stdin_fd_;
  Notifier stdin_ready_;
};

}  // namespace tether::supervisor
