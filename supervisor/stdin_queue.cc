#include "supervisor/stdin_queue.h"

#include "absl/strings/str_cat.h"

namespace tether::supervisor {

absl::StatusOr<StdinQueue::Accepted> StdinQueue::Accept(const wire::StdinData& d, bool enabled) {
  const std::uint64_t next = received();
  if (!enabled) return absl::FailedPreconditionError("stdin: the process was started with stdin closed");
  if (eof_requested_) return absl::FailedPreconditionError("stdin: input after EOF");
  if (d.offset() > next) {
    return absl::InvalidArgumentError(
        absl::StrCat("stdin: data at offset ", d.offset(), " leaves a hole after ", next));
  }
  // Bytes below `next` were already accepted: a replay after reconnect.
  const std::uint64_t skip = next - d.offset();
  if (skip >= d.data().size()) return Accepted::kNothing;
  if (pending_.size() + (d.data().size() - skip) > kStdinWindowBytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "stdin: host sent beyond the ", kStdinWindowBytes, "-byte window it was given"));
  }
  if (closed_by_child_) {
    base_ += d.data().size() - skip;
    return Accepted::kDropped;
  }
  pending_.append(d.data(), skip, std::string::npos);
  return Accepted::kQueued;
}

absl::StatusOr<bool> StdinQueue::AcceptEof(const wire::StdinEof& e) {
  if (eof_requested_) {
    if (e.offset() != eof_offset_) {
      return absl::InvalidArgumentError(
          absl::StrCat("stdin_eof: at ", e.offset(), ", but EOF was already at ", eof_offset_));
    }
    return false;  // a replay
  }
  if (e.offset() != received()) {
    return absl::InvalidArgumentError(
        absl::StrCat("stdin_eof: at ", e.offset(), ", but ", received(), " bytes of stdin were sent"));
  }
  eof_requested_ = true;
  eof_offset_ = e.offset();
  return true;
}

void StdinQueue::Written(std::size_t n) {
  pending_.erase(0, n);
  base_ += n;
}

void StdinQueue::ChildClosed() {
  closed_by_child_ = true;
  base_ += pending_.size();
  pending_.clear();
}

}  // namespace tether::supervisor
