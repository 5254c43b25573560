// The exchange tunnel's wire format (PROTOCOL.md section 10), sans-I/O.
//
// Host <-> supervisor: a poll is a command line (command_line.h,
// ExchangePollCommand); its answer is one armored line (armor.h, marker
// "~T1<") holding a frame (flags 0) whose payload is an ExchangeReply:
//
//   offset size  field
//   0      1     format version (kExchangeFormatVersion)
//   1      8     in_received: host bytes the relay accepted, big-endian
//   9      8     from: the daemon-stream offset of data[0], big-endian
//   17     1     flags (kExchangeDaemonEnded | kExchangeNoRelay)
//   18     n     data, n <= kMaxExchangeReplyDataBytes
//
// `exchange` <-> its relay (a Unix socket, inside the sandbox): one
// RelayRequest, answered by a u64 big-endian length and a reply payload.
//
//   std::string line = ArmorExchangeReply(*EncodeExchangeReply(reply));
//   absl::StatusOr<ExchangeReply> r = ParseExchangeOutput(command_output);
//   if (absl::IsUnavailable(r.status())) { /* lost or damaged: poll again */ }
//
// Pinned byte for byte by tests/protocol/exchange_format_test.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tether::protocol {

inline constexpr std::uint8_t kExchangeFormatVersion = 1;
// Host bytes one poll may carry (decoded); the parser and the relay refuse more.
inline constexpr std::size_t kMaxExchangePollBytes = 1 << 20;
inline constexpr std::size_t kExchangeReplyHeaderBytes = 18;
// Daemon bytes per reply: a relay holding more sends this much and the host
// asks again from the new offset.
inline constexpr std::size_t kMaxExchangeReplyDataBytes = 256 * 1024;
inline constexpr std::size_t kMaxExchangeReplyBytes = kExchangeReplyHeaderBytes + kMaxExchangeReplyDataBytes;

// Reply flags.
inline constexpr std::uint8_t kExchangeDaemonEnded = 1;  // the daemon closed the attachment
inline constexpr std::uint8_t kExchangeNoRelay = 2;      // no relay with this id (start one)
inline constexpr std::uint8_t kExchangeKnownFlags = kExchangeDaemonEnded | kExchangeNoRelay;

struct ExchangeReply {
  std::uint64_t in_received = 0;
  std::uint64_t from = 0;
  std::uint8_t flags = 0;
  std::string data;
  bool operator==(const ExchangeReply&) const = default;
};

// The payload. kResourceExhausted when data is over kMaxExchangeReplyDataBytes
// (never truncated), kInvalidArgument for unknown flags.
absl::StatusOr<std::string> EncodeExchangeReply(const ExchangeReply& reply);
// kDataLoss when shorter than the header, kInvalidArgument for another
// version or unknown flags, kResourceExhausted for data over the cap.
absl::StatusOr<ExchangeReply> DecodeExchangeReply(std::string_view payload);

// The armored line (ending in '\n') that `exchange` prints for `payload`.
std::string ArmorExchangeReply(std::string_view payload);
// The reply in a poll command's output: the first armored frame line for
// the host, under the stream rule (ArmorDecoder::Next). kUnavailable when
// the output holds no intact line (lost or damaged on the way: poll again);
// otherwise the frame's or DecodeExchangeReply's error.
absl::StatusOr<ExchangeReply> ParseExchangeOutput(std::string_view output);

// What `exchange STATE_DIR RELAY_ID close` prints once the relay is ending
// (it read the close request) or gone; the host repeats a close without it.
inline constexpr char kRelayClosedLine[] = "tether-relay-closed";

// --- exchange <-> relay, inside the sandbox -------------------------------

inline constexpr std::size_t kRelayRequestHeaderBytes = 20;
inline constexpr std::uint32_t kRelayCloseLength = 0xFFFFFFFF;  // len of a close request

// in_offset u64, out_offset u64, len u32 (kRelayCloseLength: close, no
// data), then len <= kMaxExchangePollBytes bytes; all big-endian.
struct RelayRequest {
  bool close = false;
  std::uint64_t in_offset = 0;
  std::uint64_t out_offset = 0;
  std::string data;
  bool operator==(const RelayRequest&) const = default;
};

// CHECKs data.size() <= kMaxExchangePollBytes (command_line.h bounds it).
std::string EncodeRelayRequest(const RelayRequest& request);

// One request from a byte stream split anywhere; the length is checked
// before the data is buffered. Stays failed after an error.
class RelayRequestDecoder {
 public:
  // true with *request filled; false when *in is consumed (need more);
  // kResourceExhausted for a length over kMaxExchangePollBytes.
  absl::StatusOr<bool> Next(std::string_view* in, RelayRequest* request);
  std::size_t buffered() const { return buf_.size(); }

 private:
  std::string buf_;
  absl::Status failed_;
};

// u64 big-endian length, then the payload.
std::string EncodeRelayReply(std::string_view payload);

// The relay's answer; the length is checked against kMaxExchangeReplyBytes
// before anything is buffered. Stays failed after an error.
class RelayReplyDecoder {
 public:
  // true with *payload filled; false when *in is consumed (need more).
  absl::StatusOr<bool> Next(std::string_view* in, std::string* payload);

 private:
  std::string buf_;
  absl::Status failed_;
};

}  // namespace tether::protocol
