#include "protocol/exchange_format.h"

#include "absl/strings/str_cat.h"
#include "protocol/armor.h"
#include "protocol/frame.h"
#include "protocol/status_macros.h"

namespace tether::protocol {
namespace {

void PutU64(std::uint64_t v, std::string* out) {
  for (int i = 7; i >= 0; --i) out->push_back(static_cast<char>(v >> (8 * i)));
}
void PutU32(std::uint32_t v, std::string* out) {
  for (int i = 3; i >= 0; --i) out->push_back(static_cast<char>(v >> (8 * i)));
}
std::uint64_t GetBE(std::string_view p, std::size_t bytes) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < bytes; ++i) v = v << 8 | static_cast<unsigned char>(p[i]);
  return v;
}

// Moves bytes from *in into *buf until it holds `want` bytes; true then.
bool Fill(std::string_view* in, std::string* buf, std::size_t want) {
  const std::size_t take = std::min(want - std::min(want, buf->size()), in->size());
  buf->append(in->data(), take);
  in->remove_prefix(take);
  return buf->size() >= want;
}

}  // namespace

absl::StatusOr<std::string> EncodeExchangeReply(const ExchangeReply& reply) {
  if (reply.data.size() > kMaxExchangeReplyDataBytes) {
    return absl::ResourceExhaustedError(absl::StrCat("exchange reply: ", reply.data.size(),
                                                     " data bytes; the limit is ", kMaxExchangeReplyDataBytes));
  }
  if ((reply.flags & ~kExchangeKnownFlags) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("exchange reply: unknown flags ", reply.flags));
  }
  std::string out;
  out.reserve(kExchangeReplyHeaderBytes + reply.data.size());
  out.push_back(static_cast<char>(kExchangeFormatVersion));
  PutU64(reply.in_received, &out);
  PutU64(reply.from, &out);
  out.push_back(static_cast<char>(reply.flags));
  out += reply.data;
  return out;
}

absl::StatusOr<ExchangeReply> DecodeExchangeReply(std::string_view payload) {
  if (payload.size() < kExchangeReplyHeaderBytes) {
    return absl::DataLossError(absl::StrCat("exchange reply: ", payload.size(), " bytes, shorter than its ",
                                            kExchangeReplyHeaderBytes, "-byte header"));
  }
  const auto version = static_cast<std::uint8_t>(payload[0]);
  if (version != kExchangeFormatVersion) {
    return absl::InvalidArgumentError(absl::StrCat("exchange reply: unsupported format version ", version,
                                                   " (this build speaks ", kExchangeFormatVersion, ")"));
  }
  ExchangeReply r;
  r.in_received = GetBE(payload.substr(1), 8);
  r.from = GetBE(payload.substr(9), 8);
  r.flags = static_cast<std::uint8_t>(payload[17]);
  if ((r.flags & ~kExchangeKnownFlags) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("exchange reply: unknown flags ", r.flags));
  }
  const std::string_view data = payload.substr(kExchangeReplyHeaderBytes);
  if (data.size() > kMaxExchangeReplyDataBytes) {
    return absl::ResourceExhaustedError(absl::StrCat("exchange reply: ", data.size(), " data bytes; the limit is ",
                                                     kMaxExchangeReplyDataBytes));
  }
  r.data.assign(data);
  return r;
}

std::string ArmorExchangeReply(std::string_view payload) {
  return ArmorLine(EncodeFrame(payload), ArmorDirection::kToHost);
}

absl::StatusOr<ExchangeReply> ParseExchangeOutput(std::string_view output) {
  ArmorDecoder dec(ArmorDirection::kToHost);
  std::string frame;
  absl::StatusOr<DecodeResult> got = dec.Next(&output, &frame);
  if (got.ok() && *got == DecodeResult::kNeedMore) {
    // A last line without its newline (a channel that drops it) still counts.
    std::string_view nl = "\n";
    got = dec.Next(&nl, &frame);
  }
  if (!got.ok()) return absl::UnavailableError(absl::StrCat("exchange: ", got.status().message()));
  if (*got != DecodeResult::kFrame) return absl::UnavailableError("exchange: the output holds no reply line");
  ASSIGN_OR_RETURN(std::string payload, DecodeWholeFrame(frame));
  return DecodeExchangeReply(payload);
}

std::string EncodeRelayRequest(const RelayRequest& request) {
  std::string out;
  PutU64(request.close ? 0 : request.in_offset, &out);
  PutU64(request.close ? 0 : request.out_offset, &out);
  if (request.close) {
    PutU32(kRelayCloseLength, &out);
    return out;
  }
  TETHER_CHECK(request.data.size() <= kMaxExchangePollBytes);
  PutU32(static_cast<std::uint32_t>(request.data.size()), &out);
  out += request.data;
  return out;
}

absl::StatusOr<bool> RelayRequestDecoder::Next(std::string_view* in, RelayRequest* request) {
  if (!failed_.ok()) return failed_;
  if (!Fill(in, &buf_, kRelayRequestHeaderBytes)) return false;
  const auto len = static_cast<std::uint32_t>(GetBE(std::string_view(buf_).substr(16), 4));
  if (len == kRelayCloseLength) {
    *request = RelayRequest{};
    request->close = true;
    buf_.clear();
    return true;
  }
  if (len > kMaxExchangePollBytes) {
    failed_ = absl::ResourceExhaustedError(
        absl::StrCat("relay request: ", len, " bytes; the limit is ", kMaxExchangePollBytes));
    return failed_;
  }
  if (!Fill(in, &buf_, kRelayRequestHeaderBytes + len)) return false;
  request->close = false;
  request->in_offset = GetBE(buf_, 8);
  request->out_offset = GetBE(std::string_view(buf_).substr(8), 8);
  request->data.assign(buf_, kRelayRequestHeaderBytes, len);
  buf_.clear();
  return true;
}

std::string EncodeRelayReply(std::string_view payload) {
  std::string out;
  out.reserve(8 + payload.size());
  PutU64(payload.size(), &out);
  out += payload;
  return out;
}

absl::StatusOr<bool> RelayReplyDecoder::Next(std::string_view* in, std::string* payload) {
  if (!failed_.ok()) return failed_;
  if (!Fill(in, &buf_, 8)) return false;
  const std::uint64_t len = GetBE(buf_, 8);
  if (len > kMaxExchangeReplyBytes) {
    failed_ = absl::ResourceExhaustedError(
        absl::StrCat("relay reply: ", len, " bytes; the limit is ", kMaxExchangeReplyBytes));
    return failed_;
  }
  if (!Fill(in, &buf_, 8 + static_cast<std::size_t>(len))) return false;
  payload->assign(buf_, 8, std::string::npos);
  buf_.clear();
  return true;
}

}  // namespace tether::protocol
