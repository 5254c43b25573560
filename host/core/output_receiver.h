// OutputReceiver: the host's side of output flow control, without I/O.
//
// It takes the supervisor's Output and OutputGap bodies and hands out chunks
// for Read(): offsets per stream, the shared credit window and the acks that
// return it, gaps (bytes evicted while nobody was attached), the finite
// mode's cap, the unread limit without backpressure, and the UTF-8 carry of
// text mode. It never sends: AckDue() says when an Ack is worth sending and
// MakeAck() builds it (and counts it as sent).
//
// Stream index 0 is stdout (or the terminal with a pty), 1 is stderr.
#pragma once

#include <cstdint>
#include <deque>
#include <limits>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "tether/process_types.h"
#include "tether/protocol/tether.pb.h"

namespace tether::core {

struct OutputConfig {
  bool pty = false;
  bool text = false;          // OutputFormat::kText
  bool backpressure = true;
  std::size_t window = kDefaultOutputWindowBytes;        // credit, both streams together
  std::size_t unread_limit = kDefaultOutputWindowBytes;  // without backpressure
  std::uint64_t finite_limit = 0;                        // 0: stream mode
  // The supervisor's ring per stream (StartOptions::ring_bytes; unknown on
  // a reopen: the default). Sent bytes stay in it until acknowledged, so a
  // ring smaller than the window blocks the supervisor first.
  std::size_t ring = 1 << 20;
};

// What Take() found.
struct ReadStep {
  enum Kind {
    kChunk,     // `chunk` is the next piece of output
    kEnd,       // both streams ended and everything was taken
    kStopped,   // observation stopped: `error` (OUTPUT_CAPACITY), after every chunk before it
    kNeedMore,  // nothing to hand out yet
  } kind = kNeedMore;
  OutputChunk chunk;
  absl::Status error;
};

class OutputReceiver {
 public:
  explicit OutputReceiver(OutputConfig config = {});

  // Reopen: output resumes at these offsets (what the reference's holder
  // had read). `output_left` is the finite cap still available, if any.
  void Resume(std::uint64_t stdout_offset, std::uint64_t stderr_offset);
  void SetOutputLeft(std::uint64_t left) {
    output_left_ = left;
    finite_ = true;
  }
  // A new attachment: the Hello asks the supervisor to resume at the
  // acknowledged offsets, and its window counts from there.
  std::uint64_t resume_offset(int i) const { return acked_[i]; }
  void Attached();

  // Supervisor -> host. Errors are protocol violations (kDataLoss).
  absl::Status OnOutput(wire::Output& o);
  absl::Status OnGap(const wire::OutputGap& g);

  // True when returning credit now is worthwhile: a quarter window (or
  // ring, if smaller) is unacknowledged (the supervisor still holds three
  // quarters while the ack travels), or both streams ended and were read.
  bool AckDue() const;
  // Something consumed is not acknowledged yet. The I/O shell sends it
  // with its next keepalive ping: a trickle of small frames then costs no
  // ack of its own (no second wake-up of the daemon per frame, no input
  // request per output frame on the text and exchange tunnels).
  bool AckPending() const;
  // The Ack that returns credit as it stands (marks it acknowledged).
  wire::Ack MakeAck(bool exit);

  // The next step for Read(). `final` streams: text mode flushes an
  // incomplete character as U+FFFD once its stream ended. A chunk counts as
  // consumed (acknowledged, so the supervisor frees it) only once the
  // consumer comes back for the next step: a reader killed while it writes
  // a chunk out finds it again on a reopen that resumes at what it wrote.
  ReadStep Take();
  // Whether Take() would return at once, a chunk, the end or the error,
  // rather than kNeedMore. In bytes mode: anything is queued. In text mode
  // a queued chunk may be only part of a character (the rest not yet
  // received), so it is not enough that something is queued.
  bool TakeReady() const;
  // The consumer is done with every chunk handed out (it waits for the exit).
  void ReleaseTaken();
  // Detach: drops everything unread; Take() then reports kEnd.
  void Discard();

  bool ended() const { return eof_[0] && eof_[1]; }
  bool all_taken() const { return queue_.empty() && carry_[0].empty() && carry_[1].empty(); }
  // Every byte reached the consumer, with no gap and nothing stopped.
  bool complete() const { return ended() && all_taken() && error_.ok() && !gap_; }
  // Bytes were lost: the supervisor dropped some while nobody was attached.
  bool gap() const { return gap_; }
  // Of what lay between our resume point and the supervisor's ring, per
  // stream: bytes its ring dropped (lost), and bytes an earlier attachment
  // had acknowledged (delivered, but not to us).
  std::uint64_t dropped(int i) const { return dropped_[i]; }
  std::uint64_t read_earlier(int i) const { return read_earlier_[i]; }
  std::size_t unread_bytes() const { return queued_bytes_; }
  std::uint64_t received(int i) const { return received_[i]; }
  std::size_t unread_chunks() const { return queue_.size(); }
  // Where a reference resumes: bytes handed out (not those held undecoded).
  std::uint64_t delivered(int i) const { return consumed_[i] - carry_[i].size(); }
  // Finite mode: the cap still available (a reference carries it).
  bool finite() const { return finite_; }
  std::uint64_t output_left() const { return output_left_; }
  const OutputConfig& config() const { return config_; }

 private:
  std::uint64_t AckPosition(int i) const;
  void Enqueue(int i, std::uint64_t offset, std::string data);
  void Stop(absl::Status why);
  OutputChunk TakeBytes();
  std::optional<OutputChunk> DecodeCarry(int i, bool final);
  bool NothingQueued(int i) const;
  StreamId StreamOf(int i) const;

  OutputConfig config_;
  std::deque<OutputChunk> queue_;
  std::size_t queued_bytes_ = 0;
  std::uint64_t received_[2] = {0, 0};
  // The highest offset per stream the supervisor sent on this attachment
  // (from the Hello's resume offsets on): what its window counts.
  std::uint64_t seen_[2] = {0, 0};
  std::uint64_t consumed_[2] = {0, 0};  // handed out by Take()
  std::uint64_t released_[2] = {0, 0};  // handed out before the consumer's last Take()
  std::uint64_t acked_[2] = {0, 0};
  std::uint64_t dropped_[2] = {0, 0};
  std::uint64_t read_earlier_[2] = {0, 0};
  bool eof_[2] = {false, false};
  std::uint64_t output_left_ = std::numeric_limits<std::uint64_t>::max();
  // Set once observation stops (OUTPUT_CAPACITY); later output is discarded
  // but still acknowledged, so the child never blocks on us.
  absl::Status error_;
  // Text mode: raw bytes taken from the queue but not yet decoded.
  std::string carry_[2];
  std::uint64_t carry_offset_[2] = {0, 0};
  bool gap_ = false;
  bool finite_ = false;
};

// Our index of a wire stream: 0 is stdout, or the terminal with a pty; -1
// for a stream this process does not have.
int StreamIndex(wire::Stream s, bool pty);

}  // namespace tether::core
