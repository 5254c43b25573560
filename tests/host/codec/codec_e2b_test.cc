#include "host/codec/connect_envelope.h"

#include <doctest.h>

#include <string>
#include <string_view>
#include <vector>

namespace {

using tether::codec::ConnectEnvelope;
using tether::codec::ConnectEnvelopeDecoder;
using tether::codec::EncodeConnectEnvelope;
using tether::codec::kMaxConnectMessageBytes;

std::string Raw(std::initializer_list<int> bytes) {
  std::string s;
  for (int b : bytes) s.push_back(static_cast<char>(b));
  return s;
}

// Feeds `stream` in pieces of `piece` bytes; collects envelopes until the
// end or the first error.
struct Fed {
  std::vector<ConnectEnvelope> envelopes;
  absl::Status status;
};
Fed Feed(std::string_view stream, std::size_t piece, ConnectEnvelopeDecoder& dec) {
  Fed f;
  for (std::size_t off = 0; off < stream.size(); off += piece) {
    std::string_view in = stream.substr(off, piece);
    while (true) {
      absl::StatusOr<std::optional<ConnectEnvelope>> e = dec.Decode(&in);
      if (!e.ok()) {
        f.status = e.status();
        return f;
      }
      if (!*e) {
        CHECK(in.empty());
        break;
      }
      f.envelopes.push_back(**e);
    }
  }
  return f;
}

}  // namespace

TEST_CASE("encodes the flags byte, a big-endian length and the message") {
  CHECK(EncodeConnectEnvelope("{}") == Raw({0, 0, 0, 0, 2, '{', '}'}));
  CHECK(EncodeConnectEnvelope("{}", true) == Raw({2, 0, 0, 0, 2, '{', '}'}));
  CHECK(EncodeConnectEnvelope("") == Raw({0, 0, 0, 0, 0}));
  const std::string big(0x010203, 'x');
  CHECK(EncodeConnectEnvelope(big).substr(0, 5) == Raw({0, 0, 1, 2, 3}));
}

TEST_CASE("decodes the bytes envd sends, split at every point") {
  const std::string start = R"({"event":{"start":{"pid":14080}}})";
  const std::string stream = EncodeConnectEnvelope(start) + EncodeConnectEnvelope("") +
                             EncodeConnectEnvelope(R"({"event":{"keepalive":{}}})") +
                             EncodeConnectEnvelope("{}", true);
  CHECK(stream.substr(0, 5) == Raw({0, 0, 0, 0, 0x21}));
  for (std::size_t piece = 1; piece <= stream.size(); ++piece) {
    ConnectEnvelopeDecoder dec;
    Fed f = Feed(stream, piece, dec);
    REQUIRE(f.status.ok());
    REQUIRE(f.envelopes.size() == 4);
    CHECK(f.envelopes[0].message == start);
    CHECK_FALSE(f.envelopes[0].end_stream);
    CHECK(f.envelopes[1].message.empty());
    CHECK(f.envelopes[3].end_stream);
    CHECK(f.envelopes[3].message == "{}");
    CHECK(dec.at_boundary());
    CHECK(dec.buffered() == 0);
  }
}

TEST_CASE("reports need-more with the input used up and keeps a partial envelope") {
  ConnectEnvelopeDecoder dec;
  const std::string e = EncodeConnectEnvelope("hello");
  std::string_view in = std::string_view(e).substr(0, 7);
  absl::StatusOr<std::optional<ConnectEnvelope>> r = dec.Decode(&in);
  REQUIRE(r.ok());
  CHECK_FALSE(r->has_value());
  CHECK(in.empty());
  CHECK_FALSE(dec.at_boundary());
  CHECK(dec.buffered() == 7);
  in = std::string_view(e).substr(7);
  r = dec.Decode(&in);
  REQUIRE(r.ok());
  REQUIRE(r->has_value());
  CHECK((*r)->message == "hello");
}

TEST_CASE("refuses a compressed envelope with a clear error") {
  ConnectEnvelopeDecoder dec;
  const std::string s = Raw({1, 0, 0, 0, 2}) + "{}";
  std::string_view in = s;
  absl::StatusOr<std::optional<ConnectEnvelope>> r = dec.Decode(&in);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(r.status().message()).find("compressed") != std::string::npos);
  // Compressed end-of-stream (0x03) too.
  ConnectEnvelopeDecoder dec2;
  const std::string s2 = Raw({3, 0, 0, 0, 0});
  std::string_view in2 = s2;
  CHECK(dec2.Decode(&in2).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("refuses unknown flags") {
  for (int flags : {0x04, 0x08, 0x80, 0xff}) {
    ConnectEnvelopeDecoder dec;
    const std::string s = Raw({flags, 0, 0, 0, 0});
    std::string_view in = s;
    absl::StatusOr<std::optional<ConnectEnvelope>> r = dec.Decode(&in);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(r.status().message()).find("flags") != std::string::npos);
  }
}

TEST_CASE("refuses a length above the limit before allocating it") {
  ConnectEnvelopeDecoder dec;
  const std::string s = Raw({0, 0xff, 0xff, 0xff, 0xff});
  std::string_view in = s;
  absl::StatusOr<std::optional<ConnectEnvelope>> r = dec.Decode(&in);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(dec.buffered() <= 5);

  ConnectEnvelopeDecoder small(4);
  const std::string ok = EncodeConnectEnvelope("abcd") + EncodeConnectEnvelope("abcde");
  Fed f = Feed(ok, ok.size(), small);
  CHECK(f.envelopes.size() == 1);
  CHECK(f.status.code() == absl::StatusCode::kResourceExhausted);
  CHECK(kMaxConnectMessageBytes == 16u << 20);
}

TEST_CASE("an error is sticky and consumes nothing more") {
  ConnectEnvelopeDecoder dec;
  const std::string s = Raw({0x40, 0, 0, 0, 0}) + EncodeConnectEnvelope("{}");
  std::string_view in = s;
  CHECK_FALSE(dec.Decode(&in).ok());
  const std::size_t left = in.size();
  CHECK_FALSE(dec.Decode(&in).ok());
  CHECK(in.size() == left);
}
