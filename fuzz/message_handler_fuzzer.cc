// Fuzz target: arbitrary frame sequences from a "supervisor" into the real
// host Session and Process state machine (through the lying transport of
// tests/host/faults/lying_supervisor.h): after a valid Welcome, the input's frames
// arrive, then the channel ends.
//
// Input layout: records of [flags u8][length u16 big-endian][payload]. Flag
// 1: the payload is parsed as an Envelope and stamped with the attachment's
// generation (so it reaches the handlers, not the generation fence); flag 2:
// zstd-compressed when that helps. An unparsable payload is sent raw.
//
// Built only without libFuzzer (clang 14 cannot instrument Asio coroutines,
// see ../CMakeLists.txt): replay_main runs its corpus as a test, and with
// -max_total_time=S mutates the corpus for S seconds under the sanitizers.
//
// Invariants (abort = our bug): nothing throws; output arrives in order by
// offset and never beyond what the frames carried; unread output stays
// within the window; Wait returns an exit only if the frames held one, and
// every call returns (the channel ends, so nothing may wait forever).
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_util.h"
#include "tether/process.h"
#include "tests/host/faults/lying_supervisor.h"

namespace {

constexpr char kFuzzTarget[] = "message_handler_fuzzer";
namespace asio = boost::asio;
namespace wire = tether::wire;

struct Seen {
  std::string frames;
  bool has_exit = false;
  std::uint64_t output_bytes = 0;
};

Seen Frames(std::string_view in) {
  Seen s;
  while (in.size() >= 3) {
    const std::uint8_t flags = static_cast<std::uint8_t>(in[0]);
    const std::size_t len = (static_cast<unsigned char>(in[1]) << 8) | static_cast<unsigned char>(in[2]);
    in.remove_prefix(3);
    const std::string_view payload = in.substr(0, std::min(len, in.size()));
    in.remove_prefix(payload.size());
    wire::Envelope env;
    if ((flags & 1) && env.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
      env.set_generation(1);
      s.has_exit = s.has_exit || env.has_exit();
      if (env.has_output()) s.output_bytes += env.output().data().size();
      tether::protocol::AppendEnvelope(
          env, flags & 2 ? tether::protocol::Compression::kAuto : tether::protocol::Compression::kNone, &s.frames);
    } else {
      if (env.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
        s.has_exit = s.has_exit || env.has_exit();
        if (env.has_output()) s.output_bytes += env.output().data().size();
      }
      tether::protocol::AppendFrame(payload, tether::protocol::Compression::kNone, &s.frames);
    }
  }
  return s;
}

asio::awaitable<void> Drive(tether::Transport& t, const Seen& seen) {
  tether::StartOptions o;
  o.argv.push_back("cat");
  o.stdin_pipe = true;
  o.output_mode = tether::OutputMode::kStream;
  o.output_format = tether::OutputFormat::kBytes;
  o.setup_timeout_ms = 5000;
  auto p = co_await tether::Process::Start(t, std::move(o));
  if (!p.ok()) co_return;
  (void)co_await (*p)->Write("x");
  std::uint64_t next[2] = {0, 0}, got = 0;
  while (true) {
    FUZZ_CHECK((*p)->unread_bytes() <= tether::kDefaultOutputWindowBytes);
    auto c = co_await (*p)->Read();
    if (!c.ok() || !*c) break;
    const int i = (*c)->stream == tether::StreamId::kStderr ? 1 : 0;
    FUZZ_CHECK((*c)->offset >= next[i]);
    FUZZ_CHECK((*c)->offset == next[i] || (*p)->output_gap());
    next[i] = (*c)->offset + (*c)->bytes.size();
    got += (*c)->bytes.size();
    FUZZ_CHECK(got <= seen.output_bytes);
  }
  auto e = co_await (*p)->Wait();
  FUZZ_CHECK(!e.ok() || seen.has_exit);
  (void)co_await (*p)->Status();
  (void)co_await (*p)->Terminate(0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tether::fuzz::QuietProtobufLogs();
  const Seen seen = Frames(std::string_view(reinterpret_cast<const char*>(data), size));
  asio::io_context io;
  auto t_owner = std::make_shared<tether::testing::LyingTransport>(
      io.get_executor(),
      [&](std::uint64_t id) { return tether::testing::FrameOf(tether::testing::WelcomeFor(id)) + seen.frames; },
      tether::testing::LyingTransport::kEnd);
  tether::testing::LyingTransport& t = *t_owner;
  bool done = false;
  asio::co_spawn(io, Drive(t, seen), [&](std::exception_ptr e) {
    FUZZ_CHECK(!e);
    done = true;
  });
  io.run();
  FUZZ_CHECK(done);
  return 0;
}
