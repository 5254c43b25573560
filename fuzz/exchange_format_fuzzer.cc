// Fuzz target: the exchange wire format (protocol/exchange_format.h).
//
// Input: byte 0 picks the entry point, byte 1 is a chunk-size seed, the rest
// is the data:
//   0  ParseExchangeOutput over the data as a poll's output (text)
//   1  DecodeExchangeReply over the data as a payload
//   2  RelayRequestDecoder over the data split in chunks
//   3  RelayReplyDecoder over the data split in chunks
// Nothing may crash; decoded replies and requests must respect their caps and
// survive an encode/decode round trip unchanged.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "protocol/exchange_format.h"

namespace {

constexpr char kFuzzTarget[] = "exchange_format";

using namespace tether::protocol;

void CheckReply(const ExchangeReply& r) {
  FUZZ_CHECK(r.data.size() <= kMaxExchangeReplyDataBytes);
  FUZZ_CHECK((r.flags & ~kExchangeKnownFlags) == 0);
  absl::StatusOr<std::string> enc = EncodeExchangeReply(r);
  FUZZ_CHECK(enc.ok());
  absl::StatusOr<ExchangeReply> back = DecodeExchangeReply(*enc);
  FUZZ_CHECK(back.ok() && *back == r);
  absl::StatusOr<ExchangeReply> armored = ParseExchangeOutput(ArmorExchangeReply(*enc));
  FUZZ_CHECK(armored.ok() && *armored == r);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tether::fuzz::QuietProtobufLogs();
  if (size < 2) return 0;
  const unsigned mode = data[0] % 4;
  const std::string_view sizes(reinterpret_cast<const char*>(data) + 1, 1);
  std::string_view body(reinterpret_cast<const char*>(data) + 2, size - 2);
  switch (mode) {
    case 0: {
      absl::StatusOr<ExchangeReply> r = ParseExchangeOutput(body);
      if (r.ok()) CheckReply(*r);
      break;
    }
    case 1: {
      absl::StatusOr<ExchangeReply> r = DecodeExchangeReply(body);
      if (r.ok()) CheckReply(*r);
      if (r.ok()) FUZZ_CHECK(body.size() == kExchangeReplyHeaderBytes + r->data.size());
      break;
    }
    case 2: {
      tether::fuzz::Splitter split{sizes};
      RelayRequestDecoder dec;
      while (!body.empty()) {
        std::string_view chunk = body.substr(0, split.Size(body.size()));
        body.remove_prefix(chunk.size());
        while (true) {
          RelayRequest req;
          absl::StatusOr<bool> got = dec.Next(&chunk, &req);
          if (!got.ok()) return 0;
          if (!*got) {
            FUZZ_CHECK(chunk.empty());
            FUZZ_CHECK(dec.buffered() <= kRelayRequestHeaderBytes + kMaxExchangePollBytes);
            break;
          }
          FUZZ_CHECK(req.data.size() <= kMaxExchangePollBytes);
          if (!req.close) {
            RelayRequestDecoder again;
            std::string_view enc_view;
            const std::string enc = EncodeRelayRequest(req);
            enc_view = enc;
            RelayRequest back;
            absl::StatusOr<bool> ok = again.Next(&enc_view, &back);
            FUZZ_CHECK(ok.ok() && *ok && back == req && enc_view.empty());
          }
        }
      }
      break;
    }
    default: {
      tether::fuzz::Splitter split{sizes};
      RelayReplyDecoder dec;
      while (!body.empty()) {
        std::string_view chunk = body.substr(0, split.Size(body.size()));
        body.remove_prefix(chunk.size());
        while (true) {
          std::string payload;
          absl::StatusOr<bool> got = dec.Next(&chunk, &payload);
          if (!got.ok()) return 0;
          if (!*got) {
            FUZZ_CHECK(chunk.empty());
            break;
          }
          FUZZ_CHECK(payload.size() <= kMaxExchangeReplyBytes);
        }
      }
    }
  }
  return 0;
}
