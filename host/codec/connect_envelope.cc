#include "host/codec/connect_envelope.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tether::codec {

std::string EncodeConnectEnvelope(std::string_view message, bool end_stream) {
  const auto n = static_cast<std::uint32_t>(message.size());
  std::string out;
  out.reserve(kConnectHeaderBytes + message.size());
  out.push_back(static_cast<char>(end_stream ? kConnectFlagEndStream : 0));
  out.push_back(static_cast<char>(n >> 24));
  out.push_back(static_cast<char>(n >> 16));
  out.push_back(static_cast<char>(n >> 8));
  out.push_back(static_cast<char>(n));
  out.append(message);
  return out;
}

absl::StatusOr<std::optional<ConnectEnvelope>> ConnectEnvelopeDecoder::Decode(std::string_view* in) {
  if (!error_.ok()) return error_;
  while (header_len_ < kConnectHeaderBytes) {
    if (in->empty()) return std::nullopt;
    header_[header_len_++] = static_cast<unsigned char>(in->front());
    in->remove_prefix(1);
    if (header_len_ < kConnectHeaderBytes) continue;
    const unsigned flags = header_[0];
    const std::size_t len = std::size_t{header_[1]} << 24 | std::size_t{header_[2]} << 16 |
                            std::size_t{header_[3]} << 8 | std::size_t{header_[4]};
    if (flags & kConnectFlagCompressed) {
      error_ = absl::InvalidArgumentError(
          "Connect stream: a compressed envelope (flags 0x01), but no compression was asked for");
    } else if (flags != 0 && flags != kConnectFlagEndStream) {
      error_ = absl::InvalidArgumentError(absl::StrCat("Connect stream: unknown envelope flags 0x",
                                                       absl::Hex(flags, absl::kZeroPad2)));
    } else if (len > max_) {
      error_ = absl::ResourceExhaustedError(
          absl::StrCat("Connect stream: an envelope of ", len, " bytes, above the limit of ", max_));
    }
    if (!error_.ok()) return error_;
    need_ = len;
    body_.clear();
    body_.reserve(len);
  }
  const std::size_t take = std::min(need_, in->size());
  body_.append(in->data(), take);
  in->remove_prefix(take);
  need_ -= take;
  if (need_ > 0) return std::nullopt;
  ConnectEnvelope e;
  e.end_stream = header_[0] == kConnectFlagEndStream;
  e.message = std::move(body_);
  body_ = std::string();
  header_len_ = 0;
  return std::optional<ConnectEnvelope>(std::move(e));
}

}  // namespace tether::codec
