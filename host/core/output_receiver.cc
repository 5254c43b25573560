#include "host/core/output_receiver.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "tether/errors.h"
#include "tether/output_helpers.h"

namespace tether::core {

int StreamIndex(wire::Stream s, bool pty) {
  if (s == wire::STREAM_STDERR) return 1;
  if (s == (pty ? wire::STREAM_PTY : wire::STREAM_STDOUT)) return 0;
  return -1;
}

OutputReceiver::OutputReceiver(OutputConfig config) : config_(config) {
  if (config_.finite_limit != 0) {
    output_left_ = config_.finite_limit;
    finite_ = true;
  }
}

void OutputReceiver::Resume(std::uint64_t stdout_offset, std::uint64_t stderr_offset) {
  received_[0] = consumed_[0] = released_[0] = acked_[0] = seen_[0] = stdout_offset;
  received_[1] = consumed_[1] = released_[1] = acked_[1] = seen_[1] = stderr_offset;
}

void OutputReceiver::Attached() {
  seen_[0] = acked_[0];
  seen_[1] = acked_[1];
}

// What we acknowledge: what the application consumed, or, without
// backpressure or once observation stopped, everything received. (Never
// below an earlier ack: a gap moves acked past what was consumed.)
std::uint64_t OutputReceiver::AckPosition(int i) const {
  return std::max(acked_[i], config_.backpressure && error_.ok() ? released_[i] : received_[i]);
}

void OutputReceiver::ReleaseTaken() {
  released_[0] = consumed_[0];
  released_[1] = consumed_[1];
}

// Credit goes back in quarter-window steps (few acks). A supervisor that
// used up its window (or its ring) is never left waiting on a partial step:
// it holds a whole one unacknowledged, so the consumer catching up makes a
// step.
// Less than a step waits for the shell's next ping (AckPending).
bool OutputReceiver::AckDue() const {
  const std::uint64_t unacked = AckPosition(0) - acked_[0] + AckPosition(1) - acked_[1];
  const std::uint64_t step = std::max<std::uint64_t>(1, std::min(config_.window, config_.ring) / 4);
  return unacked > 0 && (unacked >= step || (ended() && all_taken()));
}

bool OutputReceiver::AckPending() const { return AckPosition(0) > acked_[0] || AckPosition(1) > acked_[1]; }

wire::Ack OutputReceiver::MakeAck(bool exit) {
  wire::Ack a;
  acked_[0] = AckPosition(0);
  acked_[1] = AckPosition(1);
  if (config_.pty) {
    a.set_pty_offset(acked_[0]);
  } else {
    a.set_stdout_offset(acked_[0]);
  }
  a.set_stderr_offset(acked_[1]);
  a.set_window_bytes(config_.window);
  a.set_exit(exit);
  return a;
}

void OutputReceiver::Stop(absl::Status why) {
  if (error_.ok()) error_ = std::move(why);
}

StreamId OutputReceiver::StreamOf(int i) const {
  return i == 1 ? StreamId::kStderr : config_.pty ? StreamId::kPty : StreamId::kStdout;
}

// Queues received output for Take(), within the unread limits. Takes `data`
// by value: a received frame's data is moved, not copied.
void OutputReceiver::Enqueue(int i, std::uint64_t offset, std::string data) {
  if (!error_.ok() || data.empty()) return;  // observation stopped: discarded
  if (data.size() > output_left_) {
    data.resize(static_cast<std::size_t>(output_left_));
    Enqueue(i, offset, std::move(data));
    Stop(OutputCapacityError(absl::StrCat(
        "finite output reached its limit of ", config_.finite_limit,
        " bytes; the rest is discarded and the process keeps running (start it in stream mode to read "
        "all of its output)")));
    return;
  }
  if (!config_.backpressure &&
      (queued_bytes_ + data.size() > config_.unread_limit || queue_.size() >= kMaxUnreadChunks)) {
    Stop(OutputCapacityError(absl::StrCat(
        "more than ", config_.unread_limit, " bytes or ", kMaxUnreadChunks,
        " chunks of output went unread; observation stopped after the queued chunks (the process keeps "
        "running; read faster or start it with backpressure)")));
    return;
  }
  output_left_ -= data.size();
  queued_bytes_ += data.size();
  const StreamId stream = StreamOf(i);
  if (queue_.size() + 2 >= kMaxUnreadChunks) {
    // Keep the chunk count bounded: join the newest chunk of this stream
    // (stdout and stderr are not ordered against each other).
    for (auto it = queue_.rbegin(); it != queue_.rend(); ++it) {
      if (it->stream == stream) {
        it->bytes.append(data);
        return;
      }
    }
  }
  queue_.push_back(OutputChunk{stream, offset, std::move(data)});
}

absl::Status OutputReceiver::OnOutput(wire::Output& o) {
  const int i = StreamIndex(o.stream(), config_.pty);
  if (i < 0) return absl::DataLossError(absl::StrCat("output on unknown stream ", o.stream()));
  const std::uint64_t end = o.offset() + o.data().size();
  if (end < o.offset()) return absl::DataLossError("output offset overflows");
  if (eof_[i] && end > received_[i]) return absl::DataLossError("output after the stream's EOF");
  if (o.offset() > received_[i]) {
    return absl::DataLossError(absl::StrCat("output at offset ", o.offset(), " skips bytes after ",
                                            received_[i], " without reporting a gap"));
  }
  seen_[i] = std::max(seen_[i], end);
  if (end > received_[i]) {
    const std::size_t skip = static_cast<std::size_t>(received_[i] - o.offset());  // replayed prefix
    // The supervisor may run at most `window` ahead of our last acks, both
    // streams together, counting what it sent on this attachment (after a
    // reattach it resends from our acks, and we may hold more than that).
    const std::uint64_t other = seen_[1 - i] > acked_[1 - i] ? seen_[1 - i] - acked_[1 - i] : 0;
    if (end - acked_[i] + other > config_.window) {
      return absl::DataLossError(absl::StrCat("supervisor sent beyond the ", config_.window,
                                              "-byte output window it was granted"));
    }
    // A gap moves the window past bytes still unread here; a supervisor
    // that sends gap after gap must not make us hold more than that one
    // extra window.
    if (config_.backpressure && queued_bytes_ + (end - received_[i]) > 2 * config_.window) {
      return absl::DataLossError(absl::StrCat("supervisor sent more than twice the ", config_.window,
                                              "-byte output window without it being read"));
    }
    const std::uint64_t start = received_[i];
    received_[i] = end;
    std::string data = std::move(*o.mutable_data());
    if (skip > 0) data.erase(0, skip);
    Enqueue(i, start, std::move(data));
  }
  if (o.eof()) {
    if (end != received_[i]) return absl::DataLossError("output EOF at an offset before the received end");
    eof_[i] = true;
  }
  return absl::OkStatus();
}

absl::Status OutputReceiver::OnGap(const wire::OutputGap& g) {
  const int i = StreamIndex(g.stream(), config_.pty);
  // (After a reconnect the supervisor resumes from our acknowledged offset,
  // which may be behind what we already hold.)
  if (i < 0 || g.from() < acked_[i] || g.from() > received_[i] || g.to() < g.from()) {
    return absl::DataLossError("output gap that does not start where our output ends");
  }
  if (g.to() <= received_[i]) return absl::OkStatus();  // nothing we lack
  if (eof_[i]) return absl::DataLossError("output gap after the stream's EOF");
  // What we lack of it: bytes the ring dropped while nobody was attached
  // (lost, and said so), the rest acknowledged by an earlier attachment.
  // An older supervisor does not tell: all of it counts as dropped.
  const std::uint64_t lacking = g.to() - received_[i];
  const std::uint64_t dropped = g.has_dropped() ? std::min(g.dropped(), lacking) : lacking;
  dropped_[i] += dropped;
  read_earlier_[i] += lacking - dropped;
  if (queue_.empty() && carry_[i].empty()) consumed_[i] = released_[i] = g.to();
  received_[i] = acked_[i] = std::max(acked_[i], g.to());
  if (dropped > 0) gap_ = true;
  return absl::OkStatus();
}

// The next chunk of queued output (bytes mode), at most kMaxChunkBytes.
OutputChunk OutputReceiver::TakeBytes() {
  OutputChunk c;
  OutputChunk& front = queue_.front();
  if (front.bytes.size() > kMaxChunkBytes) {
    // Deliver at most kMaxChunkBytes; the rest stays first in line.
    c = OutputChunk{front.stream, front.offset, front.bytes.substr(0, kMaxChunkBytes)};
    front.bytes.erase(0, kMaxChunkBytes);
    front.offset += kMaxChunkBytes;
  } else {
    c = std::move(front);
    queue_.pop_front();
  }
  queued_bytes_ -= c.bytes.size();
  consumed_[c.stream == StreamId::kStderr ? 1 : 0] = c.offset + c.bytes.size();  // (a gap jumps)
  return c;
}

// Text mode: decodes what stream i holds back; empty when it must wait for
// more bytes (an incomplete character that is not the stream's end).
std::optional<OutputChunk> OutputReceiver::DecodeCarry(int i, bool final) {
  Utf8Prefix d = DecodeUtf8Prefix(carry_[i], kMaxChunkBytes, final);
  if (d.used == 0) return std::nullopt;
  OutputChunk c{StreamOf(i), carry_offset_[i], std::move(d.text)};
  carry_[i].erase(0, d.used);
  carry_offset_[i] += d.used;
  return c;
}

bool OutputReceiver::NothingQueued(int i) const {
  for (const OutputChunk& c : queue_) {
    if ((c.stream == StreamId::kStderr) == (i == 1)) return false;
  }
  return true;
}

ReadStep OutputReceiver::Take() {
  ReleaseTaken();
  while (true) {
    if (config_.text) {
      // What a stream holds back goes first: a chunk's undecoded rest, or at
      // the stream's end an incomplete character (as U+FFFD).
      for (int i = 0; i < 2; ++i) {
        if (carry_[i].empty()) continue;
        const bool final = (eof_[i] || !error_.ok()) && NothingQueued(i);
        if (std::optional<OutputChunk> c = DecodeCarry(i, final)) return ReadStep{ReadStep::kChunk, std::move(*c)};
      }
    }
    if (!queue_.empty()) {
      if (!config_.text) return ReadStep{ReadStep::kChunk, TakeBytes()};
      const int i = queue_.front().stream == StreamId::kStderr ? 1 : 0;
      OutputChunk raw = TakeBytes();
      if (carry_[i].empty()) carry_offset_[i] = raw.offset;
      carry_[i] += raw.bytes;
      if (std::optional<OutputChunk> c = DecodeCarry(i, false)) return ReadStep{ReadStep::kChunk, std::move(*c)};
      continue;  // only part of a character so far
    }
    if (!error_.ok()) return ReadStep{ReadStep::kStopped, {}, error_};
    if (ended()) return ReadStep{ReadStep::kEnd};
    return ReadStep{ReadStep::kNeedMore};
  }
}

bool OutputReceiver::TakeReady() const {
  if (!error_.ok() || (ended() && queue_.empty() && carry_[0].empty() && carry_[1].empty())) return true;
  if (!config_.text) return !queue_.empty();
  for (int i = 0; i < 2; ++i) {
    // What stream i holds back, then what it has queued (at most the
    // window: the queue is bounded by it).
    std::string bytes = carry_[i];
    for (const OutputChunk& c : queue_) {
      if ((c.stream == StreamId::kStderr) == (i == 1)) bytes += c.bytes;
    }
    if (bytes.empty()) continue;
    if (eof_[i] || DecodeUtf8Prefix(bytes, kMaxChunkBytes, false).used > 0) return true;
  }
  return false;
}

void OutputReceiver::Discard() {
  queue_.clear();
  queued_bytes_ = 0;
  carry_[0].clear();
  carry_[1].clear();
  eof_[0] = eof_[1] = true;
}

}  // namespace tether::core
