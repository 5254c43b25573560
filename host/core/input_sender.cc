#include "host/core/input_sender.h"

#include <algorithm>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "tether/errors.h"
#include "tether/process_types.h"

namespace tether::core {

void InputSender::Resume(const wire::ProcessState& state) {
  acked_ = state.stdin_acked();
  sent_ = std::max(state.stdin_received(), acked_);
  eof_sent_ = state.stdin_closed() || state.stdin_eof_received();
  eof_acked_ = state.stdin_closed();
  // What the supervisor holds but has not written yet it keeps: no copies.
  copy_base_ = sent_;
  unacked_.clear();
}

absl::Status InputSender::SetWindow(std::uint64_t window) {
  window_ = window;
  if (pipe_ && window_ < kMaxWriteBytes) {
    return absl::DataLossError(absl::StrCat("supervisor offers a stdin window of ", window_,
                                            " bytes, below one write"));
  }
  return absl::OkStatus();
}

absl::Status InputSender::Allowed() const {
  if (!pipe_) return InputClosedError("the process has no stdin pipe");
  if (eof_sent_) return InputClosedError("stdin was already closed");
  if (closed_by_child_) return InputClosedError("the process closed its stdin");
  return error_;
}

absl::StatusOr<std::uint64_t> InputSender::Admit(std::size_t bytes, bool is_close) {
  if (!is_close && (queue_.size() >= kMaxWriteQueueCalls || queue_bytes_ + bytes > kMaxWriteQueueBytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "input queue full: ", queue_.size(), " calls and ", queue_bytes_, " bytes are waiting (limits ",
        kMaxWriteQueueCalls, " and ", kMaxWriteQueueBytes, "); await earlier writes first"));
  }
  const std::uint64_t ticket = next_ticket_++;
  queue_.push_back(ticket);
  queue_bytes_ += bytes;
  return ticket;
}

bool InputSender::Ready(std::uint64_t ticket, std::size_t bytes) const {
  return !queue_.empty() && queue_.front() == ticket && sent_ + bytes - acked_ <= window_;
}

void InputSender::Leave(std::uint64_t ticket, std::size_t bytes) {
  queue_.remove(ticket);
  queue_bytes_ -= bytes;
}

wire::StdinData InputSender::MakeData(std::string data) {
  if (keep_copies_) unacked_.append(data);  // for a resend after a reconnect
  wire::StdinData d;
  d.set_offset(sent_);
  sent_ += data.size();
  d.set_data(std::move(data));
  return d;
}

wire::StdinEof InputSender::MakeEof() {
  eof_sent_ = true;
  wire::StdinEof e;
  e.set_offset(sent_);
  return e;
}

absl::Status InputSender::OnAck(const wire::StdinAck& a) {
  if (a.offset() < acked_) return absl::OkStatus();  // an old ack, replayed
  if (a.offset() > sent_) {
    return absl::DataLossError(
        absl::StrCat("stdin ack at ", a.offset(), ", but ", sent_, " bytes were sent and ", acked_, " acked"));
  }
  if (a.offset() > copy_base_) {
    const std::uint64_t drop = std::min<std::uint64_t>(a.offset() - copy_base_, unacked_.size());
    unacked_.erase(0, static_cast<std::size_t>(drop));
    copy_base_ += drop;
  }
  acked_ = a.offset();
  eof_acked_ = eof_acked_ || a.eof();
  closed_by_child_ = closed_by_child_ || a.closed_by_child();
  return absl::OkStatus();
}

void InputSender::OnConnectionLost(const absl::Status& why) {
  if (!error_.ok() || (sent_ == acked_ && (!eof_sent_ || eof_acked_))) return;
  error_ = OutcomeUnknownError(absl::StrCat(
      "the connection failed with ", sent_ - acked_, " bytes of input", eof_sent_ && !eof_acked_ ? " and EOF" : "",
      " unacknowledged; whether they reached the process is unknown, and input is disabled (never retried): ",
      std::string(why.message())));
}

std::vector<wire::Envelope> InputSender::Resend(const wire::ProcessState& state) {
  std::vector<wire::Envelope> out;
  const std::uint64_t have = std::max(state.stdin_received(), copy_base_);
  for (std::uint64_t off = have; off < sent_;) {
    const std::size_t from = static_cast<std::size_t>(off - copy_base_);
    if (from >= unacked_.size()) break;
    const std::size_t n = std::min<std::size_t>(kMaxWriteBytes, unacked_.size() - from);
    wire::Envelope env;
    env.mutable_stdin_data()->set_offset(off);
    env.mutable_stdin_data()->set_data(unacked_.substr(from, n));
    out.push_back(std::move(env));
    off += n;
  }
  if (eof_sent_ && !state.stdin_eof_received()) {
    wire::Envelope env;
    env.mutable_stdin_eof()->set_offset(sent_);
    out.push_back(std::move(env));
  }
  return out;
}

absl::Status InputSender::Settled(bool exited) const {
  if (!error_.ok()) return error_;
  if (sent_ != acked_ || (eof_sent_ && !eof_acked_ && !exited)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "input delivery is pending (", sent_ - acked_, " bytes", eof_sent_ && !eof_acked_ ? " and EOF" : "",
        " not yet acknowledged); retry once they are"));
  }
  return absl::OkStatus();
}

}  // namespace tether::core
