#include "host/codec/k8s_channel.h"

#include <doctest.h>

#include <string>

namespace tether::codec {
namespace {

using namespace std::string_literals;

TEST_CASE("stdin is the 0x00 channel byte and the bytes unchanged") {
  CHECK(EncodeK8sStdin("hi") == "\x00hi"s);
  CHECK(EncodeK8sStdin("") == "\x00"s);
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  const std::string m = EncodeK8sStdin(all);
  REQUIRE(m.size() == 257);
  CHECK(m[0] == '\0');
  CHECK(m.substr(1) == all);
}

TEST_CASE("stdin EOF is the v5 close message [0xFF, 0x00]") {
  CHECK(EncodeK8sCloseStdin() == "\xff\x00"s);
}

TEST_CASE("server messages decode into their channel and payload") {
  const std::string out = "\x01hello"s;
  absl::StatusOr<K8sMessage> m = DecodeK8sMessage(out);
  REQUIRE(m.ok());
  CHECK(m->channel == K8sChannel::kStdout);
  CHECK(m->payload == "hello");
  CHECK(m->payload.data() == out.data() + 1);  // a view, not a copy

  const std::string err = "\x02oops"s;  // (the payload is a view: the message must outlive it)
  m = DecodeK8sMessage(err);
  REQUIRE(m.ok());
  CHECK(m->channel == K8sChannel::kStderr);
  CHECK(m->payload == "oops");

  const std::string status = "\x03{\"status\":\"Success\"}"s;
  m = DecodeK8sMessage(status);
  REQUIRE(m.ok());
  CHECK(m->channel == K8sChannel::kStatus);
  CHECK(m->payload == "{\"status\":\"Success\"}");
}

TEST_CASE("a channel byte alone is an empty payload (the channel-open message)") {
  for (char c : {'\x00', '\x01', '\x02', '\x03'}) {
    absl::StatusOr<K8sMessage> m = DecodeK8sMessage(std::string(1, c));
    REQUIRE(m.ok());
    CHECK(static_cast<char>(m->channel) == c);
    CHECK(m->payload.empty());
  }
}

TEST_CASE("stdout payloads carry every byte value, NUL and 0xFF included") {
  std::string msg = "\x01"s;
  for (int i = 0; i < 256; ++i) msg.push_back(static_cast<char>(i));
  absl::StatusOr<K8sMessage> m = DecodeK8sMessage(msg);
  REQUIRE(m.ok());
  CHECK(m->payload.size() == 256);
  CHECK(static_cast<unsigned char>(m->payload[255]) == 255);
}

TEST_CASE("an empty message is refused with a clear error") {
  absl::StatusOr<K8sMessage> m = DecodeK8sMessage("");
  REQUIRE(!m.ok());
  CHECK(absl::IsInvalidArgument(m.status()));
  CHECK(m.status().message().find("empty message") != std::string_view::npos);
}

TEST_CASE("a channel the protocol does not define is refused, naming it") {
  for (int c : {5, 6, 42, 128, 254}) {
    absl::StatusOr<K8sMessage> m = DecodeK8sMessage(std::string(1, static_cast<char>(c)) + "x");
    REQUIRE(!m.ok());
    CHECK(absl::IsInvalidArgument(m.status()));
    CHECK(m.status().message().find("unknown channel " + std::to_string(c)) != std::string_view::npos);
  }
}

TEST_CASE("the client-only channels decode too (the caller decides what a server may send)") {
  const std::string resize = "\x04{}"s, close = "\xff\x01"s;
  absl::StatusOr<K8sMessage> m = DecodeK8sMessage(resize);
  REQUIRE(m.ok());
  CHECK(m->channel == K8sChannel::kResize);
  m = DecodeK8sMessage(close);
  REQUIRE(m.ok());
  CHECK(m->channel == K8sChannel::kClose);
  CHECK(m->payload == "\x01"s);
}

TEST_CASE("a status message above kMaxK8sStatusBytes is refused; stdout of any size is not") {
  std::string big = "\x03"s + std::string(kMaxK8sStatusBytes + 1, ' ');
  absl::StatusOr<K8sMessage> m = DecodeK8sMessage(big);
  REQUIRE(!m.ok());
  CHECK(absl::IsResourceExhausted(m.status()));
  big[0] = '\x01';
  CHECK(DecodeK8sMessage(big).ok());
  const std::string at_limit = "\x03"s + std::string(kMaxK8sStatusBytes, ' ');
  CHECK(DecodeK8sMessage(at_limit).ok());
}

}  // namespace
}  // namespace tether::codec
