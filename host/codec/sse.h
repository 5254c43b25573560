// Server-sent events (WHATWG HTML, "server-sent events"), sans-I/O: the
// text/event-stream decoder Runloop's output streams are read with. Bytes
// may arrive split anywhere; lines end with LF, CRLF or CR; "data:" lines
// accumulate, "event:" names the event, a blank line dispatches it;
// comments and other fields are skipped. Nothing grows past
// kMaxSseEventBytes: a line or an event's data above it is an error before
// it is buffered.
//
//   codec::SseDecoder sse;
//   std::vector<codec::SseEvent> events;
//   if (absl::Status st = sse.Feed(bytes, events); !st.ok()) return st;
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace tether::codec {

// One SSE line or event's data, in bytes: Runloop's chunks are small; this
// bounds a hostile stream before it is buffered.
inline constexpr std::size_t kMaxSseEventBytes = 4u << 20;

// One server-sent event.
struct SseEvent {
  std::string event;  // "" for the default "message"
  std::string data;   // the data lines joined with '\n'
};

class SseDecoder {
 public:
  explicit SseDecoder(std::size_t max_bytes = kMaxSseEventBytes) : max_(max_bytes) {}
  // Appends every event completed by `bytes` to `out` (at most one per
  // byte fed). kResourceExhausted when a line or an event's data exceeds
  // `max_bytes`; the decoder is then unusable (kFailedPrecondition).
  absl::Status Feed(std::string_view bytes, std::vector<SseEvent>& out);
  // True when bytes of an undispatched event are pending (a stream that
  // ends now was cut mid-event).
  bool partial() const { return !line_.empty() || !data_.empty() || !event_.empty() || have_data_; }
  // Bytes held for the line and the event under way.
  std::size_t buffered() const { return line_.size() + data_.size() + event_.size(); }

 private:
  absl::Status Line(std::string_view line, std::vector<SseEvent>& out);
  std::size_t max_;
  std::string line_, data_, event_;
  bool have_data_ = false;
  bool after_cr_ = false;
  bool failed_ = false;
};

}  // namespace tether::codec
