#include "protocol/exchange_format.h"

#include <string>
#include <vector>

#include <doctest.h>

#include "protocol/armor.h"
#include "protocol/frame.h"
#include "tests/protocol/test_util.h"

namespace tether::protocol {
namespace {

using testing::Contains;

std::string Hex(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

ExchangeReply Sample() {
  ExchangeReply r;
  r.in_received = 300;
  r.from = 7;
  r.flags = kExchangeDaemonEnded;
  r.data = "hi";
  return r;
}

// The vectors below were computed by an independent Python encoder (struct,
// base85 with the armor alphabet and a bitwise CRC-32C), not by this code.
TEST_CASE("golden: a reply payload, its frame and its armored line, byte for byte") {
  absl::StatusOr<std::string> payload = EncodeExchangeReply(Sample());
  REQUIRE(payload.ok());
  CHECK(Hex(*payload) == "01" "000000000000012c" "0000000000000007" "01" "6869");
  CHECK(Hex(EncodeFrame(*payload)) == "54e7010000000014" "01000000000000012c0000000000000007016869");
  CHECK(ArmorExchangeReply(*payload) == "~T1<RObNz0000K0RR9100001EC2ui000002LWhl|4cc697eb\n");
  CHECK(DecodeExchangeReply(*payload).value() == Sample());
  CHECK(ParseExchangeOutput("~T1<RObNz0000K0RR9100001EC2ui000002LWhl|4cc697eb\n").value() == Sample());
}

TEST_CASE("golden: the reply of `exchange` when no relay has the id") {
  ExchangeReply gone;
  gone.flags = kExchangeNoRelay;
  CHECK(ArmorExchangeReply(EncodeExchangeReply(gone).value()) == "~T1<RObNz0000I0RR9100000000000000000I|838670bf\n");
}

TEST_CASE("golden: a relay request and a relay reply on the relay's socket") {
  RelayRequest req;
  req.in_offset = 5;
  req.out_offset = 9;
  req.data = "abc";
  CHECK(Hex(EncodeRelayRequest(req)) == "0000000000000005" "0000000000000009" "00000003" "616263");
  RelayRequest close;
  close.close = true;
  CHECK(Hex(EncodeRelayRequest(close)) == "0000000000000000" "0000000000000000" "ffffffff");
  CHECK(Hex(EncodeRelayReply("xyz")) == "0000000000000003" "78797a");
}

TEST_CASE("a reply over kMaxExchangeReplyDataBytes is an error both ways, never truncated") {
  ExchangeReply big;
  big.data.assign(kMaxExchangeReplyDataBytes + 1, 'x');
  absl::StatusOr<std::string> enc = EncodeExchangeReply(big);
  CHECK(absl::IsResourceExhausted(enc.status()));
  CHECK(Contains(enc.status().message(), "262145 data bytes; the limit is 262144"));

  big.data.pop_back();  // exactly the cap: fine
  enc = EncodeExchangeReply(big);
  REQUIRE(enc.ok());
  CHECK(DecodeExchangeReply(*enc).value().data.size() == kMaxExchangeReplyDataBytes);

  std::string over = *enc + "x";  // a peer that sends one byte more
  absl::StatusOr<ExchangeReply> dec = DecodeExchangeReply(over);
  CHECK(absl::IsResourceExhausted(dec.status()));
  // ... also when it arrives armored.
  CHECK(absl::IsResourceExhausted(ParseExchangeOutput(ArmorExchangeReply(over)).status()));
}

TEST_CASE("refuses a short reply, another format version and unknown flags") {
  std::string p = EncodeExchangeReply(Sample()).value();
  CHECK(absl::IsDataLoss(DecodeExchangeReply(p.substr(0, kExchangeReplyHeaderBytes - 1)).status()));
  CHECK(absl::IsDataLoss(DecodeExchangeReply("").status()));
  CHECK(DecodeExchangeReply(p.substr(0, kExchangeReplyHeaderBytes)).ok());  // no data

  std::string v2 = p;
  v2[0] = 2;
  absl::StatusOr<ExchangeReply> r = DecodeExchangeReply(v2);
  CHECK(absl::IsInvalidArgument(r.status()));
  CHECK(Contains(r.status().message(), "unsupported format version 2"));
  // A reply of the unversioned format (in_received first) is refused, not misread.
  std::string v0 = p;
  v0[0] = 0;
  CHECK(absl::IsInvalidArgument(DecodeExchangeReply(v0).status()));

  std::string flags = p;
  flags[17] = 4;
  CHECK(absl::IsInvalidArgument(DecodeExchangeReply(flags).status()));
  ExchangeReply f = Sample();
  f.flags = 0x80;
  CHECK(absl::IsInvalidArgument(EncodeExchangeReply(f).status()));
}

TEST_CASE("ParseExchangeOutput takes the first intact line after noise, and says when to poll again") {
  const std::string line = ArmorExchangeReply(EncodeExchangeReply(Sample()).value());
  CHECK(ParseExchangeOutput("bash: warning\n[stdout] " + line + line).value() == Sample());
  // The channel dropped the last newline.
  CHECK(ParseExchangeOutput(line.substr(0, line.size() - 1)).value() == Sample());
  // Nothing, noise only, the host's own direction, or a damaged line: lost
  // on the way, kUnavailable (the host makes the same poll again).
  std::string damaged = line;
  damaged[10] ^= 1;
  const std::string echo = ArmorLine(EncodeFrame(EncodeExchangeReply(Sample()).value()), ArmorDirection::kToSupervisor);
  for (const std::string& out : {std::string(), std::string("noise\n"), echo, damaged, damaged + line,
                                 line.substr(0, 20)}) {
    CAPTURE(out);
    CHECK(absl::IsUnavailable(ParseExchangeOutput(out).status()));
  }
  // An intact line whose frame is bad: not a lost reply.
  const std::string bad_frame = ArmorLine(testing::FrameHeader(100) + "short", ArmorDirection::kToHost);
  CHECK(absl::IsInvalidArgument(ParseExchangeOutput(bad_frame).status()));
}

TEST_CASE("RelayRequestDecoder reads requests split at every byte, back to back") {
  RelayRequest a;
  a.in_offset = 1ULL << 40;
  a.out_offset = 77;
  a.data = std::string("\0\xff\n", 3);
  RelayRequest empty;
  RelayRequest close;
  close.close = true;
  const std::string stream = EncodeRelayRequest(a) + EncodeRelayRequest(empty) + EncodeRelayRequest(close);
  RelayRequestDecoder dec;
  std::vector<RelayRequest> got;
  for (char c : stream) {
    std::string_view in(&c, 1);
    RelayRequest r;
    absl::StatusOr<bool> ok = dec.Next(&in, &r);
    REQUIRE(ok.ok());
    CHECK(in.empty());
    if (*ok) got.push_back(r);
  }
  REQUIRE(got.size() == 3);
  CHECK(got[0] == a);
  CHECK(got[1] == empty);
  CHECK(got[2].close);
  CHECK(dec.buffered() == 0);
}

TEST_CASE("RelayRequestDecoder refuses a length over kMaxExchangePollBytes from the header alone") {
  RelayRequest r;
  std::string head = EncodeRelayRequest(r).substr(0, kRelayRequestHeaderBytes - 4);
  head += std::string("\x00\x10\x00\x01", 4);  // 1 MiB + 1
  head += "trailing";
  std::string_view in = head;
  RelayRequestDecoder dec;
  absl::StatusOr<bool> got = dec.Next(&in, &r);
  CHECK(absl::IsResourceExhausted(got.status()));
  CHECK(in == "trailing");  // the body was never buffered
  CHECK(dec.buffered() == kRelayRequestHeaderBytes);
  std::string_view more = "x";
  CHECK(absl::IsResourceExhausted(dec.Next(&more, &r).status()));  // stays failed
}

TEST_CASE("RelayReplyDecoder reads a reply split anywhere and refuses an oversize length before buffering") {
  const std::string payload = EncodeExchangeReply(Sample()).value();
  const std::string wire = EncodeRelayReply(payload);
  for (std::size_t split = 0; split <= wire.size(); ++split) {
    RelayReplyDecoder dec;
    std::string_view a = std::string_view(wire).substr(0, split), b = std::string_view(wire).substr(split);
    std::string got;
    absl::StatusOr<bool> r = dec.Next(&a, &got);
    REQUIRE(r.ok());
    if (!*r) r = dec.Next(&b, &got);
    REQUIRE(r.ok());
    CHECK(*r);
    CHECK(got == payload);
  }
  std::string huge = std::string("\x00\x00\x00\x00\x00\x04\x00\x13", 8);  // kMaxExchangeReplyBytes + 1
  std::string_view in = huge;
  RelayReplyDecoder dec;
  std::string got;
  CHECK(absl::IsResourceExhausted(dec.Next(&in, &got).status()));
  std::string ok_len = std::string("\x00\x00\x00\x00\x00\x04\x00\x12", 8);  // exactly the cap: waits for it
  in = ok_len;
  RelayReplyDecoder dec2;
  CHECK(dec2.Next(&in, &got).value() == false);
}

}  // namespace
}  // namespace tether::protocol
