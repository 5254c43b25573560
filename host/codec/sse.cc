#include "host/codec/sse.h"

#include "absl/strings/str_cat.h"

namespace tether::codec {

absl::Status SseDecoder::Feed(std::string_view bytes, std::vector<SseEvent>& out) {
  if (failed_) return absl::FailedPreconditionError("SSE stream: the decoder failed before");
  for (std::size_t i = 0; i < bytes.size();) {
    const char c = bytes[i];
    if (after_cr_) {
      after_cr_ = false;
      if (c == '\n') {  // the LF of a CRLF
        ++i;
        continue;
      }
    }
    if (c == '\r' || c == '\n') {
      after_cr_ = c == '\r';
      absl::Status st = Line(line_, out);
      line_.clear();
      if (!st.ok()) {
        failed_ = true;
        return st;
      }
      ++i;
      continue;
    }
    const std::size_t end = bytes.find_first_of("\r\n", i);
    const std::size_t n = (end == std::string_view::npos ? bytes.size() : end) - i;
    if (line_.size() + n > max_) {
      failed_ = true;
      return absl::ResourceExhaustedError(
          absl::StrCat("SSE stream: a line above ", max_, " bytes (kMaxSseEventBytes)"));
    }
    line_.append(bytes.substr(i, n));
    i += n;
  }
  return absl::OkStatus();
}

absl::Status SseDecoder::Line(std::string_view line, std::vector<SseEvent>& out) {
  if (line.empty()) {
    if (have_data_ || !event_.empty()) {
      SseEvent e;
      e.event = std::move(event_);
      e.data = std::move(data_);
      out.push_back(std::move(e));
    }
    event_.clear();
    data_.clear();
    have_data_ = false;
    return absl::OkStatus();
  }
  if (line[0] == ':') return absl::OkStatus();  // a comment (keepalive)
  const std::size_t colon = line.find(':');
  const std::string_view field = line.substr(0, colon);
  std::string_view value = colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
  if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
  if (field == "data") {
    if (data_.size() + value.size() + 1 > max_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("SSE stream: an event above ", max_, " bytes (kMaxSseEventBytes)"));
    }
    if (have_data_) data_.push_back('\n');
    data_.append(value);
    have_data_ = true;
  } else if (field == "event") {
    event_.assign(value);
  }
  return absl::OkStatus();
}

}  // namespace tether::codec
