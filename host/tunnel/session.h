// Session: one attachment to a supervisor daemon through a Channel.
//
// Frames out go through one writer coroutine fed by a queue (so concurrent
// requests never interleave bytes); frames in are decoded incrementally.
// Handshake() sends Hello and returns the Welcome; from then on every
// request carries the attachment's generation and a fresh request id.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tether/errors.h"
#include "tether/transport.h"
#include "protocol/envelope.h"

namespace tether {

namespace wire = ::tether::wire;

// The read buffer starts small and doubles while reads fill it, up to the
// maximum (few system calls when streaming). On a channel that can wait for
// readability it is released when a read found less than the initial size
// and everything was decoded: an idle or trickling process holds none.
inline constexpr std::size_t kSessionReadBytes = 256 * 1024;
inline constexpr std::size_t kSessionInitialReadBytes = 16 * 1024;

class Session : public std::enable_shared_from_this<Session> {
 public:
  static std::shared_ptr<Session> Create(boost::asio::any_io_executor ex,
                                         std::unique_ptr<Channel> channel);
  ~Session();

  // Queues raw frame bytes (the Launch frame, before the handshake).
  void SendFrame(std::string frame);
  // Stamps generation and a new request id, queues the frame; returns the id.
  std::uint64_t Send(wire::Envelope env);
  // Sends Hello and waits for Welcome. A supervisor Error becomes a Status
  // with its message (kUnauthenticated, kUnavailable for BUSY, ...).
  boost::asio::awaitable<absl::StatusOr<wire::Welcome>> Handshake(wire::Hello hello);
  // For tunnels that deliver the Hello out of band (the exchange tunnel puts
  // it in a private file, since it carries the secret): the Hello frame
  // exactly as Handshake() would send it, not sent; AwaitWelcome() then
  // waits for its reply.
  std::string PrepareHello(wire::Hello hello);
  boost::asio::awaitable<absl::StatusOr<wire::Welcome>> AwaitWelcome();
  // The next envelope from the supervisor; kUnavailable once the channel
  // ended or failed, kDataLoss / kInvalidArgument for a corrupt stream.
  boost::asio::awaitable<absl::StatusOr<wire::Envelope>> Receive();
  // Reads and discards until the supervisor ends the channel, or `limit`
  // passes; then closes. Used after a final acknowledgement so that it
  // reaches the supervisor before the channel goes away.
  boost::asio::awaitable<void> Drain(std::chrono::milliseconds limit);
  // Stops both directions; pending Receive() calls fail with kUnavailable.
  void Close();
  bool closed() const { return closed_; }
  // The supervisor ended the channel (a clean end of stream between
  // frames), rather than it failing, being cut, or being closed here.
  bool ended_by_peer() const { return ended_by_peer_; }
  // Frame bytes queued so far (the end of the frame Send just queued) and
  // frame bytes handed to the channel. A frame that ends beyond
  // handed_bytes() of a closed session never left this host.
  std::uint64_t queued_bytes() const { return queued_bytes_; }
  std::uint64_t handed_bytes() const { return handed_bytes_; }
  // Bytes read from the channel so far (a frame in progress counts: a slow
  // channel delivering a big frame is not a silent one).
  std::uint64_t received_bytes() const { return received_bytes_; }
  std::uint64_t generation() const { return generation_; }
  std::string Diagnostics() const { return channel_->Diagnostics(); }

 private:
  Session(boost::asio::any_io_executor ex, std::unique_ptr<Channel> channel);
  boost::asio::awaitable<void> Writer();

  boost::asio::any_io_executor ex_;
  std::unique_ptr<Channel> channel_;
  std::string outbox_;
  bool writing_ = false;
  bool closed_ = false;
  bool ended_by_peer_ = false;
  absl::Status write_error_;
  std::uint64_t queued_bytes_ = 0;
  std::uint64_t handed_bytes_ = 0;
  std::uint64_t received_bytes_ = 0;
  std::uint64_t generation_ = 0;
  std::uint64_t next_request_id_ = 1;
  std::uint64_t hello_id_ = 0;
  protocol::EnvelopeDecoder decoder_;
  std::unique_ptr<char[]> buf_;
  std::size_t buf_size_ = kSessionInitialReadBytes;
  bool filled_last_read_ = false;
  bool drained_small_ = false;  // the last read drained the channel, below the initial size
  std::string_view pending_;  // undecoded bytes inside buf_
};

}  // namespace tether
