// InputSender: the host's side of stdin, without I/O.
//
// Offsets of the bytes sent and acknowledged, the supervisor's stdin window,
// EOF, the queue of writers waiting their turn (by ticket, in call order),
// copies of unacknowledged bytes for a resend after a reconnect, and the
// OUTCOME_UNKNOWN verdict when the connection fails with input in flight.
// It builds the StdinData / StdinEof bodies; the caller sends them.
#pragma once

#include <cstdint>
#include <list>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tether/protocol/tether.pb.h"

namespace tether::core {

class InputSender {
 public:
  // `pipe`: the child has a stdin pipe (or a terminal). `keep_copies`: keep
  // unacknowledged bytes for a resend after a reconnect.
  InputSender(bool pipe = false, bool keep_copies = false) : pipe_(pipe), keep_copies_(keep_copies) {}

  void set_keep_copies(bool keep) { keep_copies_ = keep; }
  void disable() { pipe_ = false; }  // a control handle
  bool pipe() const { return pipe_; }

  // A reopened handle continues where the supervisor's stdin stands: after
  // every byte it accepted, EOF possibly already sent.
  void Resume(const wire::ProcessState& state);
  // The window the supervisor offers (Welcome); kDataLoss below one write.
  absl::Status SetWindow(std::uint64_t window);

  // Why input is refused by stdin itself (no pipe, EOF sent, closed by the
  // child, connection failed with input in flight); OK otherwise.
  absl::Status Allowed() const;

  // The writer queue. Admit() takes a place for a write of `bytes` (a close
  // is never refused for a full queue) and returns its ticket, or
  // kResourceExhausted. Ready(): the ticket is first and `bytes` fit the
  // window. Leave(): the place is given up (sent or abandoned).
  absl::StatusOr<std::uint64_t> Admit(std::size_t bytes, bool is_close);
  bool Ready(std::uint64_t ticket, std::size_t bytes) const;
  void Leave(std::uint64_t ticket, std::size_t bytes);

  // The body for the next write / for EOF after everything written.
  wire::StdinData MakeData(std::string data);
  wire::StdinEof MakeEof();

  // Supervisor -> host.
  absl::Status OnAck(const wire::StdinAck& a);
  void OnClosedByChild() { closed_by_child_ = true; }
  // The connection failed: unacknowledged input becomes OUTCOME_UNKNOWN.
  void OnConnectionLost(const absl::Status& why);

  // After a reconnect: what the new attachment lacks, given the state its
  // Welcome reports (it drops what it already has, by offset).
  std::vector<wire::Envelope> Resend(const wire::ProcessState& state);

  // kFailedPrecondition while input is not acknowledged (a reference must
  // not be issued then), or the connection-failure verdict.
  absl::Status Settled(bool exited) const;

  std::uint64_t sent() const { return sent_; }
  std::uint64_t acked() const { return acked_; }
  bool eof_sent() const { return eof_sent_; }
  bool closed_by_child() const { return closed_by_child_; }
  std::size_t queued_calls() const { return queue_.size(); }
  std::size_t queued_bytes() const { return queue_bytes_; }

 private:
  bool pipe_;
  bool keep_copies_;
  std::uint64_t sent_ = 0;
  std::uint64_t acked_ = 0;
  std::uint64_t window_ = 0;
  bool eof_sent_ = false;
  bool eof_acked_ = false;
  bool closed_by_child_ = false;
  std::list<std::uint64_t> queue_;
  std::uint64_t next_ticket_ = 0;
  std::size_t queue_bytes_ = 0;
  absl::Status error_;  // OUTCOME_UNKNOWN once the connection failed with input unacknowledged
  // Copies of sent, unacknowledged input (offsets copy_base_..sent_).
  std::string unacked_;
  std::uint64_t copy_base_ = 0;
};

}  // namespace tether::core
