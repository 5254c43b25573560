#include "protocol/envelope.h"

#include <google/protobuf/stubs/logging.h>

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <doctest.h>

#include "tests/protocol/test_util.h"
#include "tether/protocol/version.h"

namespace tether::protocol {
namespace {

using testing::AllByteValues;
using testing::CompressibleBytes;
using testing::Contains;
using testing::RandomBytes;

// One envelope of every body type, with non-default values in most fields.
std::vector<wire::Envelope> OneOfEachBody() {
  std::vector<std::function<void(wire::Envelope*)>> fill = {
      [](wire::Envelope* e) {
        wire::Launch* l = e->mutable_launch();
        l->set_launch_id("launch-1");
        l->set_secret(RandomBytes(32, 1));
        l->add_argv("/bin/sh");
        l->add_argv("-c");
        l->add_argv(std::string("printf '\\0'\0x", 13));
        l->set_cwd("/tmp");
        wire::EnvVar* v = l->add_env();
        v->set_name("LANG");
        v->set_value(std::string("C\xff\0", 3));
        l->set_inherit_env(true);
        l->set_stdin_mode(wire::STDIN_PIPE);
        l->mutable_pty()->set_cols(120);
        l->mutable_pty()->set_rows(40);
        l->set_ring_bytes(1 << 20);
        l->set_linger_ms(5000);
        l->set_resolve_relative(true);
        l->set_state_dir("/run/tether/abc");
      },
      [](wire::Envelope* e) {
        wire::Hello* h = e->mutable_hello();
        h->set_min_version(1);
        h->set_max_version(3);
        h->set_secret(AllByteValues());
        h->set_stdout_offset(1ull << 40);
        h->set_stderr_offset(7);
        h->set_pty_offset(0);
        h->set_window_bytes(256 * 1024);
      },
      [](wire::Envelope* e) {
        wire::Welcome* w = e->mutable_welcome();
        w->set_version(1);
        w->set_supervisor_version("0.1.0");
        w->set_generation(42);
        wire::ProcessState* s = w->mutable_state();
        s->set_phase(wire::ProcessState::PHASE_EXITED);
        s->set_pid(1234);
        s->set_pgid(1234);
        s->set_stdin_acked(99);
        s->set_stdin_closed(true);
        s->mutable_exit()->set_code(3);
        w->set_stdin_window_bytes(65536);
        w->set_max_frame_bytes(kMaxFrameBytes);
      },
      [](wire::Envelope* e) {
        e->mutable_stdin_data()->set_offset(12345);
        e->mutable_stdin_data()->set_data(AllByteValues() + std::string(3, '\0'));
      },
      [](wire::Envelope* e) { e->mutable_stdin_eof()->set_offset(12601); },
      [](wire::Envelope* e) {
        wire::Output* o = e->mutable_output();
        o->set_stream(wire::STREAM_STDERR);
        o->set_offset(1ull << 33);
        o->set_data(std::string("line\r\n\0\xff\xfe", 10));
        o->set_eof(true);
      },
      [](wire::Envelope* e) {
        e->mutable_output_gap()->set_stream(wire::STREAM_STDOUT);
        e->mutable_output_gap()->set_from(100);
        e->mutable_output_gap()->set_to(5000);
      },
      [](wire::Envelope* e) {
        wire::Exit* x = e->mutable_exit();
        x->set_code(0);  // an explicit 0 is still "code", not "unset"
        x->mutable_rusage()->set_user_us(10);
        x->mutable_rusage()->set_system_us(20);
        x->mutable_rusage()->set_max_rss_kib(30);
      },
      [](wire::Envelope* e) {
        e->mutable_ack()->set_stdout_offset(1);
        e->mutable_ack()->set_stderr_offset(2);
        e->mutable_ack()->set_pty_offset(3);
        e->mutable_ack()->set_window_bytes(4);
        e->mutable_ack()->set_exit(true);
      },
      [](wire::Envelope* e) {
        e->mutable_stdin_ack()->set_offset(77);
        e->mutable_stdin_ack()->set_eof(true);
      },
      [](wire::Envelope* e) { e->mutable_signal()->set_signal(15); },
      [](wire::Envelope* e) { e->mutable_terminate()->set_grace_ms(2000); },
      [](wire::Envelope* e) {
        e->mutable_resize()->mutable_size()->set_cols(80);
        e->mutable_resize()->mutable_size()->set_rows(24);
      },
      [](wire::Envelope* e) { e->mutable_status_request(); },
      [](wire::Envelope* e) {
        e->mutable_status()->set_phase(wire::ProcessState::PHASE_RUNNING);
        e->mutable_status()->set_pid(77);
      },
      [](wire::Envelope* e) { e->mutable_detach(); },
      [](wire::Envelope* e) { e->mutable_ping()->set_nonce(0xFFFFFFFFFFFFFFFFull); },
      [](wire::Envelope* e) { e->mutable_pong()->set_nonce(1); },
      [](wire::Envelope* e) {
        wire::Error* err = e->mutable_error();
        err->set_code(wire::ERROR_STALE_GENERATION);
        err->set_message("generation 3 was replaced by 4 — refusing");
        err->set_request_id(9);
        err->set_fatal(true);
      },
  };
  std::vector<wire::Envelope> out;
  std::uint64_t id = 1;
  for (const auto& f : fill) {
    wire::Envelope e;
    e.set_version(kProtocolVersion);
    e.set_generation(id % 3);
    e.set_request_id(id++);
    f(&e);
    out.push_back(std::move(e));
  }
  return out;
}

// Envelopes are compared by their serialized bytes (LITE_RUNTIME has no
// MessageDifferencer); serialization is deterministic within one build.
std::string Bytes(const wire::Envelope& e) { return e.SerializeAsString(); }

wire::Envelope RoundTrip(const wire::Envelope& in, Compression c) {
  const std::string frame = EncodeEnvelope(in, c);
  EnvelopeDecoder dec;
  std::string_view view = frame;
  wire::Envelope out;
  absl::StatusOr<bool> got = dec.Next(&view, &out);
  REQUIRE_MESSAGE(got.ok(), got.status().ToString());
  REQUIRE(*got);
  CHECK(view.empty());
  CHECK(dec.idle());
  return out;
}

// A frame around an Envelope serialized exactly as given (no stamping).
std::string RawEnvelopeFrame(const wire::Envelope& e) { return EncodeFrame(e.SerializeAsString()); }

absl::Status NextError(std::string_view bytes) {
  EnvelopeDecoder dec;
  wire::Envelope env;
  while (true) {
    absl::StatusOr<bool> got = dec.Next(&bytes, &env);
    if (!got.ok()) return got.status();
    if (!*got) return absl::OkStatus();
  }
}

TEST_CASE("round-trips an envelope of every body type, raw and with kAuto") {
  const std::vector<wire::Envelope> all = OneOfEachBody();
  REQUIRE(all.size() == 19);
  std::vector<std::string> names;
  for (const wire::Envelope& e : all) {
    CAPTURE(BodyName(e));
    names.emplace_back(BodyName(e));
    CHECK(Bytes(RoundTrip(e, Compression::kNone)) == Bytes(e));
    CHECK(Bytes(RoundTrip(e, Compression::kAuto)) == Bytes(e));
    const absl::StatusOr<wire::Envelope> parsed = ParseEnvelope(e.SerializeAsString());
    REQUIRE(parsed.ok());
    CHECK(Bytes(*parsed) == Bytes(e));
  }
  CHECK(names == std::vector<std::string>{"launch", "hello", "welcome", "stdin", "stdin_eof", "output",
                                          "output_gap", "exit", "ack", "stdin_ack", "signal",
                                          "terminate", "resize", "status_request", "status", "detach",
                                          "ping", "pong", "error"});
}

TEST_CASE("carries stdin with all 256 byte values and NUL exactly") {
  wire::Envelope e;
  const std::string data = std::string(1, '\0') + AllByteValues() + std::string(1, '\0');
  e.mutable_stdin_data()->set_data(data);
  e.mutable_stdin_data()->set_offset(0);
  for (Compression c : {Compression::kNone, Compression::kAuto}) {
    const wire::Envelope out = RoundTrip(e, c);
    REQUIRE(out.has_stdin_data());
    CHECK(out.stdin_data().data() == data);
    CHECK(out.stdin_data().data().size() == 258);
  }
}

TEST_CASE("round-trips a 64 KiB output chunk, compressed when that helps") {
  wire::Envelope e;
  e.mutable_output()->set_stream(wire::STREAM_STDOUT);
  e.mutable_output()->set_data(CompressibleBytes(64 * 1024));
  const std::string frame = EncodeEnvelope(e, Compression::kAuto);
  CHECK((static_cast<unsigned char>(frame[3]) & kFlagZstd) != 0);
  CHECK(RoundTrip(e, Compression::kAuto).output().data() == e.output().data());

  e.mutable_output()->set_data(RandomBytes(64 * 1024, 2));
  CHECK((static_cast<unsigned char>(EncodeEnvelope(e, Compression::kAuto)[3]) & kFlagZstd) == 0);
  CHECK(RoundTrip(e, Compression::kAuto).output().data() == e.output().data());
}

TEST_CASE("distinguishes exit by code from exit by signal") {
  wire::Envelope by_code;
  by_code.mutable_exit()->set_code(0);
  wire::Envelope by_signal;
  by_signal.mutable_exit()->set_signal(9);
  by_signal.mutable_exit()->set_core_dumped(true);
  const wire::Envelope code = RoundTrip(by_code, Compression::kNone);
  REQUIRE(code.has_exit());
  CHECK(code.exit().how_case() == wire::Exit::kCode);
  CHECK(code.exit().code() == 0);
  const wire::Envelope sig = RoundTrip(by_signal, Compression::kNone);
  CHECK(sig.exit().how_case() == wire::Exit::kSignal);
  CHECK(sig.exit().signal() == 9);
  CHECK(sig.exit().core_dumped());
}

TEST_CASE("round-trips an error with its code, message and request id") {
  wire::Envelope e;
  e.set_request_id(5);
  e.mutable_error()->set_code(wire::ERROR_LAUNCH_FAILED);
  e.mutable_error()->set_message("exec /nonexistent: No such file or directory");
  e.mutable_error()->set_request_id(5);
  const wire::Envelope out = RoundTrip(e, Compression::kAuto);
  CHECK(out.error().code() == wire::ERROR_LAUNCH_FAILED);
  CHECK(out.error().message() == e.error().message());
  CHECK(out.error().request_id() == 5);
  CHECK(BodyName(out) == "error");
}

TEST_CASE("stamps the protocol version when the caller left it 0") {
  wire::Envelope e;
  e.mutable_ping()->set_nonce(1);
  REQUIRE(e.version() == 0);
  const wire::Envelope out = RoundTrip(e, Compression::kNone);
  CHECK(out.version() == kProtocolVersion);
  CHECK(e.version() == 0);  // the caller's message is untouched
  // The version a caller set by mistake is replaced too.
  e.set_version(kProtocolVersion + 5);
  CHECK(RoundTrip(e, Compression::kNone).version() == kProtocolVersion);
}

TEST_CASE("rejects an envelope of another protocol version") {
  wire::Envelope e;
  e.mutable_ping()->set_nonce(1);
  e.set_version(kProtocolVersion + 1);
  absl::Status st = NextError(RawEnvelopeFrame(e));
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK_MESSAGE(Contains(st.message(), "protocol version 2 (this build speaks 1)"), st.ToString());
  e.set_version(0);  // a peer that never set it
  st = ParseEnvelope(e.SerializeAsString()).status();
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(st.message(), "protocol version 0"));
}

TEST_CASE("rejects an envelope without a body") {
  wire::Envelope e;
  e.set_version(kProtocolVersion);
  e.set_request_id(3);
  const absl::Status st = NextError(RawEnvelopeFrame(e));
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK_MESSAGE(Contains(st.message(), "no body"), st.ToString());
  CHECK(BodyName(e) == "none");
}

TEST_CASE("rejects an empty payload") {
  const absl::Status st = NextError(EncodeFrame(""));
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(st.message(), "protocol version 0"));
}

TEST_CASE("rejects a body type this build does not know") {
  // version = 1, then field 99 (length-delimited, 2 bytes): a future body.
  const std::string payload("\x08\x01\x9a\x06\x02hi", 7);
  const absl::Status st = ParseEnvelope(payload).status();
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK_MESSAGE(Contains(st.message(), "body type this build does not know"), st.ToString());
}

TEST_CASE("rejects garbage bytes that are not an Envelope") {
  for (const std::string& junk :
       {std::string("\xff\xff\xff\xff", 4), std::string("\x0a\x05" "ab", 4) /* truncated field */,
        std::string("\x08", 1) /* tag without value */, std::string("\x0f", 1) /* wire type 7 */,
        RandomBytes(64, 3)}) {
    const absl::Status st = NextError(EncodeFrame(junk));
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    CHECK_MESSAGE(Contains(st.message(), "not a valid Envelope"), st.ToString());
  }
}

TEST_CASE("ParseEnvelope reports the payload size in its error") {
  const absl::Status st = ParseEnvelope(std::string("\xff\xff\xff", 3)).status();
  CHECK(Contains(st.message(), "3 payload bytes"));
}

TEST_CASE("decodes a stream of envelopes fed one byte at a time") {
  const std::vector<wire::Envelope> all = OneOfEachBody();
  std::string stream;
  for (std::size_t i = 0; i < all.size(); ++i) {
    AppendEnvelope(all[i], i % 2 ? Compression::kAuto : Compression::kNone, &stream);
  }
  EnvelopeDecoder dec;
  std::vector<std::string> got;
  for (std::size_t i = 0; i < stream.size(); ++i) {
    std::string_view in = std::string_view(stream).substr(i, 1);
    wire::Envelope env;
    while (true) {
      absl::StatusOr<bool> r = dec.Next(&in, &env);
      REQUIRE(r.ok());
      if (!*r) break;
      got.push_back(Bytes(env));
    }
    CHECK(in.empty());
  }
  CHECK(dec.idle());
  REQUIRE(got.size() == all.size());
  for (std::size_t i = 0; i < all.size(); ++i) CHECK(got[i] == Bytes(all[i]));
}

TEST_CASE("EnvelopeDecoder is not idle in the middle of a frame") {
  wire::Envelope e;
  e.mutable_ping()->set_nonce(7);
  const std::string frame = EncodeEnvelope(e);
  EnvelopeDecoder dec;
  std::string_view in = std::string_view(frame).substr(0, frame.size() - 1);
  wire::Envelope env;
  CHECK_FALSE(dec.Next(&in, &env).value());
  CHECK_FALSE(dec.idle());
}

TEST_CASE("EnvelopeDecoder stays failed after a bad envelope or a bad frame") {
  wire::Envelope good;
  good.mutable_ping()->set_nonce(1);
  const std::string good_frame = EncodeEnvelope(good);
  for (const std::string& bad : {EncodeFrame("\xff"), testing::FrameHeader(0, 0x10)}) {
    EnvelopeDecoder dec;
    std::string stream = good_frame + bad + good_frame;
    std::string_view in = stream;
    wire::Envelope env;
    REQUIRE(dec.Next(&in, &env).value());
    CHECK(env.ping().nonce() == 1);
    const absl::StatusOr<bool> first = dec.Next(&in, &env);
    REQUIRE_FALSE(first.ok());
    const std::size_t left = in.size();
    const absl::StatusOr<bool> again = dec.Next(&in, &env);
    REQUIRE_FALSE(again.ok());
    CHECK(again.status() == first.status());
    CHECK(in.size() == left);
  }
}

// Error.message, Exit.message and Welcome.supervisor_version are `bytes`, not
// proto3 `string`: an error quoting a non-UTF-8 path must not make the peer
// drop the whole envelope.
TEST_CASE("carries non-UTF-8 bytes in Error.message") {
  google::protobuf::LogSilencer quiet;  // protobuf logs each UTF-8 violation
  wire::Envelope e;
  e.mutable_error()->set_message(std::string("exec /tmp/caf\xe9: No such file or directory"));
  const std::string frame = EncodeEnvelope(e);
  EnvelopeDecoder dec;
  std::string_view in = frame;
  wire::Envelope out;
  const absl::StatusOr<bool> got = dec.Next(&in, &out);
  REQUIRE_MESSAGE(got.ok(), got.status().ToString());
  CHECK(out.error().message() == e.error().message());
}

}  // namespace
}  // namespace tether::protocol

namespace tether::protocol {

TEST_CASE("an Output prefix plus its data is byte-identical to the serialized Envelope") {
  const std::uint64_t values[] = {0, 1, 127, 128, 16383, 16384, (1ull << 32) + 5, ~0ull};
  const std::size_t lens[] = {1, 127, 128, 16384, 65536};
  for (std::uint64_t gen : values) {
    for (std::uint64_t off : values) {
      for (std::size_t len : lens) {
        for (wire::Stream s : {wire::STREAM_STDOUT, wire::STREAM_STDERR, wire::STREAM_PTY}) {
          const std::string data(len, '\xa5');
          wire::Envelope env;
          env.set_generation(gen);
          env.mutable_output()->set_stream(s);
          env.mutable_output()->set_offset(off);
          env.mutable_output()->set_data(data);
          char prefix[kMaxOutputPrefixBytes];
          const std::size_t n = EncodeOutputPrefix(gen, s, off, len, prefix);
          REQUIRE(n <= kMaxOutputPrefixBytes);
          CHECK(std::string(prefix, n) + data == EncodeEnvelope(env));
        }
      }
    }
  }
}

TEST_CASE("a whole frame in the input decodes as a view without a copy; split frames still decode") {
  wire::Envelope a, b;
  a.mutable_ping();
  b.mutable_output()->set_data(std::string(1000, 'x'));
  const std::string bytes = EncodeEnvelope(a) + EncodeEnvelope(b);
  FrameDecoder dec;
  std::string storage;
  std::string_view payload;
  std::string_view in = bytes;
  REQUIRE(*dec.DecodeView(&in, &payload, &storage) == DecodeResult::kFrame);
  CHECK(payload.data() >= bytes.data());
  CHECK(payload.data() < bytes.data() + bytes.size());  // points into the input
  REQUIRE(*dec.DecodeView(&in, &payload, &storage) == DecodeResult::kFrame);
  CHECK(ParseEnvelope(payload)->output().data() == std::string(1000, 'x'));
  CHECK(in.empty());
  // Byte by byte: assembled in storage.
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    std::string_view one(bytes.data() + i, 1);
    absl::StatusOr<DecodeResult> r = dec.DecodeView(&one, &payload, &storage);
    REQUIRE(r.ok());
    if (*r == DecodeResult::kFrame) CHECK(ParseEnvelope(payload).ok());
  }
  // A bad header is refused on the fast path too.
  std::string bad = EncodeEnvelope(a);
  bad[0] = 'X';
  FrameDecoder dec2;
  std::string_view bin = bad;
  CHECK(!dec2.DecodeView(&bin, &payload, &storage).ok());
}

}  // namespace tether::protocol
