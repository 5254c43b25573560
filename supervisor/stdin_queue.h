// Stdin the host sent and the child has not read yet, addressed by absolute
// offset, with the EOF the host asked for.
//
// Owns the accounting (what was accepted, written, acknowledged, dropped)
// and the checks on the host's offsets. Never touches the child's pipe: the
// daemon's stdin pump (child_io.h) writes pending() and reports Written(),
// ChildClosed() and Close().
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "tether/protocol/tether.pb.h"

namespace tether::supervisor {

inline constexpr std::size_t kStdinWindowBytes = 256 * 1024;  // unacked stdin the host may send

class StdinQueue {
 public:
  enum class Accepted {
    kNothing,  // a replay of bytes already accepted
    kQueued,   // new bytes for the pump
    kDropped,  // the child closed its stdin: counted as written, to acknowledge at once
  };
  // The host's StdinData; `enabled`: the process has a stdin (a pipe or a
  // terminal). Errors: FailedPrecondition (stdin closed, or after EOF: the
  // request is refused, the attachment stays), InvalidArgument (a hole),
  // ResourceExhausted (beyond kStdinWindowBytes).
  absl::StatusOr<Accepted> Accept(const wire::StdinData& d, bool enabled);
  // The host's StdinEof: true when newly requested, false for a replay.
  // InvalidArgument when it is not at the end of the stdin sent.
  absl::StatusOr<bool> AcceptEof(const wire::StdinEof& e);

  // Bytes accepted and not yet in the pipe.
  std::string_view pending() const { return pending_; }
  // The pipe took the first `n` pending bytes.
  void Written(std::size_t n);
  // EPIPE: the child closed its stdin; pending and later bytes are dropped.
  void ChildClosed();
  // EOF delivered (or there never was a pipe).
  void Close() { closed_ = true; }
  // Everything before the EOF is in the pipe: deliver the EOF now.
  bool eof_due() const { return eof_requested_ && pending_.empty() && base_ == eof_offset_; }

  std::uint64_t written() const { return base_; }  // bytes in the pipe (or dropped): the stdin ack
  std::uint64_t received() const { return base_ + pending_.size(); }
  bool eof_requested() const { return eof_requested_; }
  bool closed() const { return closed_; }
  bool closed_by_child() const { return closed_by_child_; }

 private:
  std::string pending_;        // bytes [base_, base_ + pending_.size()) not yet in the pipe
  std::uint64_t base_ = 0;     // bytes written into the pipe so far
  bool eof_requested_ = false;
  std::uint64_t eof_offset_ = 0;
  bool closed_ = false;
  bool closed_by_child_ = false;
};

}  // namespace tether::supervisor
