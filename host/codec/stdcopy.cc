#include "host/codec/stdcopy.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace tether::codec {

absl::Status StdcopyDecoder::ParseHeader() {
  const unsigned stream = header_[0];
  if (stream > static_cast<unsigned>(StdStream::kSystemError)) {
    return absl::InvalidArgumentError(
        absl::StrCat("stdcopy: stream byte ", stream, " is not 0, 1, 2 or 3 (is the exec running with a tty?)"));
  }
  if (header_[1] != 0 || header_[2] != 0 || header_[3] != 0) {
    return absl::InvalidArgumentError(absl::StrCat("stdcopy: header padding is not zero (", unsigned{header_[1]}, " ",
                                                   unsigned{header_[2]}, " ", unsigned{header_[3]}, ")"));
  }
  const std::size_t len = std::size_t{header_[4]} << 24 | std::size_t{header_[5]} << 16 |
                          std::size_t{header_[6]} << 8 | std::size_t{header_[7]};
  if (len > max_frame_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("stdcopy: a frame of ", len, " bytes is above the limit of ", max_frame_));
  }
  stream_ = static_cast<StdStream>(stream);
  remaining_ = len;
  return absl::OkStatus();
}

absl::StatusOr<std::optional<StdcopyPiece>> StdcopyDecoder::Next(std::string_view* in) {
  if (!failed_.ok()) return failed_;
  while (!in->empty()) {
    if (remaining_ > 0) {
      const std::size_t n = std::min(remaining_, in->size());
      StdcopyPiece piece{stream_, in->substr(0, n)};
      in->remove_prefix(n);
      remaining_ -= n;
      return std::optional<StdcopyPiece>(piece);
    }
    const std::size_t n = std::min(kStdcopyHeaderBytes - header_fill_, in->size());
    for (std::size_t i = 0; i < n; ++i) header_[header_fill_ + i] = static_cast<unsigned char>((*in)[i]);
    header_fill_ += n;
    in->remove_prefix(n);
    if (header_fill_ < kStdcopyHeaderBytes) break;
    header_fill_ = 0;
    if (absl::Status st = ParseHeader(); !st.ok()) {
      failed_ = st;
      return st;
    }
    // (A zero-length frame carries nothing: go on to the next header.)
  }
  return std::optional<StdcopyPiece>();
}

std::string EncodeStdcopyFrame(StdStream stream, std::string_view payload) {
  if (payload.size() > 0xffffffffu) std::abort();  // our own caller's bug
  std::string out(kStdcopyHeaderBytes, '\0');
  out[0] = static_cast<char>(stream);
  const std::uint32_t len = static_cast<std::uint32_t>(payload.size());
  out[4] = static_cast<char>(len >> 24);
  out[5] = static_cast<char>(len >> 16);
  out[6] = static_cast<char>(len >> 8);
  out[7] = static_cast<char>(len);
  out.append(payload);
  return out;
}

}  // namespace tether::codec
