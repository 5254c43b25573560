// Fuzz target: encode -> decode round trip of Envelopes built from the input.
//
// Input layout: byte 0 picks the body types and whether to repeat the data
// into a large (compressible) chunk, byte 1 the number of envelopes (1..4),
// bytes 2..3 seed the chunk sizes; the rest is the data that goes into the
// envelopes' bytes fields (and their numbers).
//
// Everything here is built by us, so every mismatch is our bug and aborts:
// the stream must decode (kNone and kAuto, in random chunks) to exactly the
// envelopes encoded, with the version stamped, and kAuto must never make a
// frame larger than kNone.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "protocol/envelope.h"
#include "protocol/frame.h"
#include "tether/protocol/version.h"

namespace {

using tether::protocol::AppendEnvelope;
using tether::protocol::Compression;
using tether::protocol::EncodeEnvelope;
using tether::protocol::EnvelopeDecoder;
using tether::protocol::kMaxPayloadBytes;
namespace wire = tether::protocol::wire;

constexpr char kFuzzTarget[] = "roundtrip_fuzzer";
using tether::fuzz::Splitter;

// Data bytes per envelope: the 64 KiB output chunk limit, and repeated up to
// 32 KiB (for the compression path) in bodies with one bytes field. A Launch
// splits its data into argv/env entries at NULs (about 2x the bytes on the
// wire, and one allocation each), so it takes at most kMaxLaunchBytes. Every
// envelope stays well under kMaxPayloadBytes (AppendFrame CHECKs it).
constexpr std::size_t kMaxDataBytes = 64 * 1024;
constexpr std::size_t kRepeatBytes = 32 * 1024;
constexpr std::size_t kMaxLaunchBytes = 4096;
static_assert(kRepeatBytes + 3 * 4096 + 2 * kMaxLaunchBytes < kMaxPayloadBytes);

// Numbers drawn from the data, cyclically.
class Numbers {
 public:
  explicit Numbers(std::string_view data) : data_(data) {}
  std::uint64_t U64() {
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | Byte();
    return v;
  }
  std::uint32_t U32() { return static_cast<std::uint32_t>(U64()); }
  std::int32_t I32() { return static_cast<std::int32_t>(U32()); }
  bool Bool() { return (Byte() & 1) != 0; }

 private:
  std::uint8_t Byte() {
    if (data_.empty()) return 0;
    return static_cast<std::uint8_t>(data_[next_++ % data_.size()]);
  }
  std::string_view data_;
  std::size_t next_ = 0;
};

// Proto3 `string` fields must be valid UTF-8 or the receiver drops the whole
// envelope. That is a known defect (see envelope_test.cc, "carries non-UTF-8
// bytes in Error.message"); until those fields are `bytes`, keep them ASCII.
std::string Ascii(std::string_view data) {
  std::string s(data.substr(0, 4096));
  for (char& c : s) c = static_cast<char>(c & 0x7f);
  return s;
}

std::vector<std::string> SplitOnNul(std::string_view data) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= data.size(); ++i) {
    if (i == data.size() || data[i] == '\0') {
      out.emplace_back(data.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

// `data` for the bodies that carry one bytes field; `small` for the others.
wire::Envelope Build(int kind, std::string_view data, std::string_view small, Numbers& num) {
  wire::Envelope e;
  if (num.Bool()) e.set_generation(num.U64());
  if (num.Bool()) e.set_request_id(num.U64());
  if (num.Bool()) e.set_version(num.U32());  // AppendEnvelope must overwrite it
  switch (kind % 10) {
    case 0:
      e.mutable_stdin_data()->set_offset(num.U64());
      e.mutable_stdin_data()->set_data(std::string(data));
      break;
    case 1: {
      wire::Output* o = e.mutable_output();
      o->set_stream(static_cast<wire::Stream>(num.U32() % 4));
      o->set_offset(num.U64());
      o->set_data(std::string(data));
      o->set_eof(num.Bool());
      break;
    }
    case 2: {
      wire::Hello* h = e.mutable_hello();
      h->set_min_version(num.U32());
      h->set_max_version(num.U32());
      h->set_secret(std::string(data));
      h->set_stdout_offset(num.U64());
      h->set_stderr_offset(num.U64());
      h->set_pty_offset(num.U64());
      h->set_window_bytes(num.U64());
      break;
    }
    case 3: {
      wire::Launch* l = e.mutable_launch();
      std::vector<std::string> parts = SplitOnNul(small.substr(0, kMaxLaunchBytes));
      l->set_launch_id(parts[0]);
      for (std::size_t i = 1; i < parts.size(); ++i) {
        if (i % 3 == 0) {
          wire::EnvVar* v = l->add_env();
          v->set_name(parts[i]);
          v->set_value(parts[i - 1]);
        } else {
          l->add_argv(parts[i]);
        }
      }
      l->set_cwd(std::string(small.substr(0, 64)));
      l->set_stdin_mode(static_cast<wire::StdinMode>(num.U32() % 2));
      if (num.Bool()) {
        l->mutable_pty()->set_cols(num.U32());
        l->mutable_pty()->set_rows(num.U32());
      }
      l->set_ring_bytes(num.U64());
      l->set_linger_ms(num.U32());
      l->set_inherit_env(num.Bool());
      break;
    }
    case 4: {
      wire::Error* err = e.mutable_error();
      err->set_code(static_cast<wire::ErrorCode>(num.U32() % 13));
      err->set_message(Ascii(small));
      err->set_request_id(num.U64());
      err->set_fatal(num.Bool());
      break;
    }
    case 5: {
      wire::Exit* x = e.mutable_exit();
      if (num.Bool()) {
        x->set_code(num.I32());
      } else {
        x->set_signal(num.I32());
      }
      x->set_core_dumped(num.Bool());
      x->mutable_rusage()->set_user_us(num.U64());
      x->mutable_rusage()->set_max_rss_kib(num.U64());
      x->set_message(Ascii(small));
      break;
    }
    case 6: {
      wire::Welcome* w = e.mutable_welcome();
      w->set_version(num.U32());
      w->set_supervisor_version(Ascii(small.substr(0, 32)));
      w->set_generation(num.U64());
      w->mutable_state()->set_phase(static_cast<wire::ProcessState::Phase>(num.U32() % 5));
      w->mutable_state()->set_pid(num.I32());
      w->mutable_state()->set_stdin_acked(num.U64());
      w->set_stdin_window_bytes(num.U64());
      break;
    }
    case 7:
      e.mutable_output_gap()->set_stream(static_cast<wire::Stream>(num.U32() % 4));
      e.mutable_output_gap()->set_from(num.U64());
      e.mutable_output_gap()->set_to(num.U64());
      break;
    case 8:
      e.mutable_ack()->set_stdout_offset(num.U64());
      e.mutable_ack()->set_stderr_offset(num.U64());
      e.mutable_ack()->set_window_bytes(num.U64());
      e.mutable_ack()->set_exit(num.Bool());
      break;
    default:
      // Bodies with no or one field: the smallest envelopes.
      switch (num.U32() % 6) {
        case 0: e.mutable_ping()->set_nonce(num.U64()); break;
        case 1: e.mutable_pong()->set_nonce(num.U64()); break;
        case 2: e.mutable_detach(); break;
        case 3: e.mutable_status_request(); break;
        case 4: e.mutable_signal()->set_signal(num.I32()); break;
        default: e.mutable_stdin_eof()->set_offset(num.U64()); break;
      }
      break;
  }
  return e;
}

// Decodes `stream` in pseudo-random chunks (0..2*avg bytes) and returns the
// envelopes' serialized bytes.
std::vector<std::string> Decode(std::string_view stream, std::uint32_t seed, std::size_t avg) {
  EnvelopeDecoder dec;
  std::vector<std::string> out;
  std::uint32_t x = seed | 1;
  std::size_t pos = 0;
  while (pos < stream.size()) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    std::size_t n = x % (2 * avg + 1);
    if (n > stream.size() - pos) n = stream.size() - pos;
    std::string_view in = stream.substr(pos, n);
    pos += n;
    while (true) {
      wire::Envelope env;
      absl::StatusOr<bool> r = dec.Next(&in, &env);
      if (!r.ok()) {
        std::fprintf(stderr, "roundtrip_fuzzer: %s\n", r.status().ToString().c_str());
        tether::fuzz::Fail(kFuzzTarget, "our own stream failed to decode");
      }
      if (!*r) break;
      out.push_back(env.SerializeAsString());
    }
    FUZZ_CHECK(in.empty());
  }
  FUZZ_CHECK(dec.idle());
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  if (size < 4) return 0;
  std::string_view input(reinterpret_cast<const char*>(bytes), size);
  const auto mode = static_cast<unsigned char>(input[0]);
  const int count = 1 + static_cast<unsigned char>(input[1]) % 4;
  const std::uint32_t seed = (std::uint32_t{static_cast<unsigned char>(input[2])} << 8) |
                             static_cast<unsigned char>(input[3]);
  const std::string_view small = input.substr(4, kMaxDataBytes);
  std::string data(small);
  if ((mode & 0x80) != 0 && !data.empty()) {
    std::string big;
    while (big.size() + data.size() <= kRepeatBytes) big += data;
    data = std::move(big);
  }

  Numbers num(small);
  std::vector<wire::Envelope> envs;
  std::vector<std::string> want;
  for (int i = 0; i < count; ++i) {
    envs.push_back(Build((mode & 0x7f) + i, data, small, num));
    wire::Envelope stamped = envs.back();
    stamped.set_version(tether::kProtocolVersion);
    want.push_back(stamped.SerializeAsString());
  }

  std::string raw;
  std::string packed;
  for (const wire::Envelope& e : envs) {
    const std::string one_raw = EncodeEnvelope(e, Compression::kNone);
    const std::string one_packed = EncodeEnvelope(e, Compression::kAuto);
    FUZZ_CHECK(one_packed.size() <= one_raw.size());
    raw += one_raw;
    packed += one_packed;
  }
  // AppendEnvelope appends the same bytes.
  std::string appended = "x";
  AppendEnvelope(envs[0], Compression::kAuto, &appended);
  FUZZ_CHECK(appended.substr(1) == packed.substr(0, appended.size() - 1));
  FUZZ_CHECK(packed.size() <= raw.size());

  const std::size_t avg = 1 + seed % 97;
  FUZZ_CHECK(Decode(raw, seed, avg) == want);
  FUZZ_CHECK(Decode(packed, seed * 2654435761u, avg) == want);
  FUZZ_CHECK(Decode(packed, seed, packed.size()) == want);
  return 0;
}
