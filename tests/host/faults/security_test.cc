// Security: the per-launch secret stays private, state is private, and a
// compromised sandbox (a lying supervisor, lying_supervisor.h) cannot make
// the host allocate beyond its limits, crash or hang. The supervisor-side
// checks (another uid, a wrong secret, a symlink or pre-created state path,
// credential-shaped environment names) are in tests/supervisor.
#include "tests/host/faults/lying_supervisor.h"

#include <sys/stat.h>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <new>

#include "absl/strings/escaping.h"
#include "tether/errors.h"
#include "host/process/reference.h"
#include "protocol/armor.h"
#include "tests/host/process/process_fixture.h"
#include "tests/host/proc_util.h"
#include "tether/supervisor_binary.h"

// The largest single allocation while armed: what a hostile peer could make
// the host allocate at once.
namespace {
std::atomic<bool> g_armed{false};
std::atomic<std::size_t> g_largest{0};
void* Track(std::size_t n) {
  if (g_armed.load(std::memory_order_relaxed)) {
    std::size_t cur = g_largest.load(std::memory_order_relaxed);
    while (n > cur && !g_largest.compare_exchange_weak(cur, n)) {
    }
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
}  // namespace
void* operator new(std::size_t n) { return Track(n); }
void* operator new[](std::size_t n) { return Track(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace tether::testing {
namespace {

namespace fs = std::filesystem;

bool FileContainsAny(const fs::path& p, const std::vector<std::string>& needles) {
  std::FILE* f = std::fopen(p.c_str(), "rb");
  if (f == nullptr) return false;
  std::string s;
  char buf[65536];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  std::fclose(f);
  for (const std::string& k : needles) {
    if (s.find(k) != std::string::npos) return true;
  }
  return false;
}

TEST_CASE("the secret is in no /proc/*/cmdline or environ and in no file of the sandbox") {
  Sandbox sb;
  sb.Run([&](Transport& t) -> awaitable<void> {
    auto p = co_await Start(t, V("cat"), true);
    REQUIRE(p.ok());
    absl::StatusOr<std::string> ref = (*p)->Reference();
    REQUIRE(ref.ok());
    absl::StatusOr<ProcessReference> r = ParseReference(
        *ref, std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count());
    REQUIRE(r.ok());
    const std::string& secret = r->secret;
    REQUIRE(secret.size() >= 16);
    // Every encoding the code base uses for bytes.
    std::vector<std::string> needles;
    needles.push_back(secret);
    needles.push_back(absl::BytesToHexString(std::string(secret)));
    needles.push_back(absl::Base64Escape(std::string(secret)));
    needles.push_back(protocol::Base85Encode(secret));
    int scanned = 0;
    for (pid_t pid : AllPids()) {
      for (const char* what : {"cmdline", "environ"}) {
        const std::string s = ReadProc(pid, what);
        ++scanned;
        for (const std::string& k : needles) {
          CHECK_MESSAGE(s.find(k) == std::string::npos, "secret in /proc/", pid, "/", what);
        }
      }
    }
    CHECK(scanned > 4);
    std::error_code ec;
    int files = 0;
    for (const auto& e : fs::recursive_directory_iterator(sb.root(), ec)) {
      if (!e.is_regular_file()) continue;
      ++files;
      CHECK_MESSAGE(!FileContainsAny(e.path(), needles), "secret in ", e.path().string());
    }
    CHECK(files >= 1);  // the installed supervisor, at least
    CHECK((co_await (*p)->CloseStdin()).ok());
    CHECK((co_await (*p)->Wait()).ok());
  });
}

TEST_CASE("the state directory is 0700 and its socket 0600, both ours, end to end") {
  Sandbox sb;
  sb.Run([&](Transport& t) -> awaitable<void> {
    auto p = co_await Start(t, V("cat"), true);
    REQUIRE(p.ok());
    int dirs = 0;
    for (const auto& e : fs::directory_iterator(sb.root() + "/run")) {
      struct stat st;
      if (::lstat(e.path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
      ++dirs;
      CHECK((st.st_mode & 07777) == 0700);
      CHECK(st.st_uid == ::geteuid());
      int sockets = 0;
      for (const auto& f : fs::directory_iterator(e.path())) {
        struct stat fst;
        REQUIRE(::lstat(f.path().c_str(), &fst) == 0);
        if (S_ISSOCK(fst.st_mode)) {
          ++sockets;
          CHECK((fst.st_mode & 07777) == 0600);
          CHECK(fst.st_uid == ::geteuid());
        }
        CHECK((fst.st_mode & 0077) == 0);  // nothing in it is open to others
      }
      CHECK(sockets == 1);
    }
    CHECK(dirs == 1);
    struct stat run;
    REQUIRE(::lstat((sb.root() + "/run").c_str(), &run) == 0);
    CHECK((run.st_mode & 07777) == 0700);
    CHECK((co_await (*p)->CloseStdin()).ok());
    CHECK((co_await (*p)->Wait()).ok());
  });
}

TEST_CASE("a symlink planted at the sandbox's state location is refused, and nothing is created behind it") {
  Sandbox sb;
  const std::string elsewhere = sb.root() + "/elsewhere";
  REQUIRE(::mkdir(elsewhere.c_str(), 0700) == 0);
  REQUIRE(::symlink(elsewhere.c_str(), (sb.root() + "/run").c_str()) == 0);
  sb.Run([&](Transport& t) -> awaitable<void> {
    auto p = co_await Start(t, V("true"));
    CHECK_FALSE(p.ok());
  });
  CHECK(fs::is_empty(elsewhere));
}

// Runs a process against a lying supervisor: reads until an error, then
// waits. Returns the read error; never an exit status the script did not
// send.
struct LieResult {
  absl::Status start, read, wait;
  std::string output;
  std::size_t largest_alloc = 0;
  std::size_t max_unread = 0;
};

awaitable<void> LieBody(Transport& t, LieResult* r, unsigned setup_timeout_ms) {
  StartOptions o = Opts();
  o.argv = V("cat");
  o.stdin_pipe = true;
  o.setup_timeout_ms = setup_timeout_ms;
  auto p = co_await Process::Start(t, std::move(o));
  r->start = p.status();
  if (!p.ok()) co_return;
  (void)co_await (*p)->Write("input");
  while (true) {
    r->max_unread = std::max(r->max_unread, (*p)->unread_bytes());
    absl::StatusOr<std::optional<OutputChunk>> c = co_await (*p)->Read();
    if (!c.ok()) {
      r->read = c.status();
      break;
    }
    if (!*c) break;
    r->output += (*c)->bytes;
  }
  absl::StatusOr<ExitStatus> e = co_await (*p)->Wait();
  r->wait = e.status();
}

LieResult Lie(LyingTransport::Script script, LyingTransport::After after, std::string endless = {},
              unsigned setup_timeout_ms = 10000) {
  LieResult r;
  asio::io_context io;
  // The supervisor images (a start script names them by hash) are loaded
  // once per process, before anything is armed: they are not the lie's.
  asio::co_spawn(
      io,
      []() -> awaitable<void> {
        (void)co_await LoadSupervisor("x86_64");
        (void)co_await LoadSupervisor("aarch64");
      },
      asio::detached);
  io.run();
  io.restart();
  // The lie itself is made unarmed: only the host's allocations count.
  auto t_owner = std::make_shared<LyingTransport>(
      io.get_executor(),
      [script = std::move(script)](std::uint64_t id) {
        g_armed = false;
        std::string bytes = script(id);
        g_armed = true;
        return bytes;
      },
      after, std::move(endless));
  LyingTransport& t = *t_owner;
  g_largest = 0;
  g_armed = true;
  asio::co_spawn(io, LieBody(t, &r, setup_timeout_ms), [](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  });
  io.run();
  g_armed = false;
  r.largest_alloc = g_largest;
  return r;
}

// A frame header claiming `len` payload bytes, and nothing after it.
std::string Header(std::uint32_t len, std::uint8_t flags = 0) {
  std::string h = {'T', '\xE7', 1, static_cast<char>(flags)};
  for (int s = 24; s >= 0; s -= 8) h.push_back(static_cast<char>((len >> s) & 0xff));
  return h;
}

// Generous: frames are at most 1 MiB on the wire and 1 MiB decoded.
constexpr std::size_t kAllocBound = protocol::kMaxFrameBytes + protocol::kMaxPayloadBytes;

void ExpectRefused(const LieResult& r, const char* what) {
  INFO(what);
  REQUIRE(r.start.ok());
  CHECK_FALSE(r.read.ok());
  const ErrorCode c = ErrorCodeOf(r.read);
  CHECK_MESSAGE((c == ErrorCode::kProtocol || c == ErrorCode::kUnavailable), r.read.ToString());
  CHECK(ErrorCodeOf(r.wait) == ErrorCode::kUnavailable);  // never a made-up exit
  CHECK(r.largest_alloc <= kAllocBound);
  CHECK(r.max_unread <= kDefaultOutputWindowBytes);
}

TEST_CASE("a lying supervisor: an oversize frame length is refused before anything is allocated") {
  const LieResult r = Lie([](std::uint64_t id) { return FrameOf(WelcomeFor(id)) + Header(0xFFFFFFFFu); },
                          LyingTransport::kEnd);
  ExpectRefused(r, "oversize length");
  CHECK(r.largest_alloc < 512 * 1024);  // not even the limit: the header is refused at once
}

TEST_CASE("a lying supervisor: a zstd frame declaring a huge decompressed size is refused") {
  // A zstd frame header (single segment, 8-byte content size) declaring
  // 2^32 bytes of content, and no blocks.
  const std::string fcs8 = {'\x28', '\xB5', '\x2F', '\xFD', '\xE0', 0, 0, 0, 0, 1, 0, 0, 0};
  const LieResult r = Lie(
      [&](std::uint64_t id) {
        return FrameOf(WelcomeFor(id)) + Header(static_cast<std::uint32_t>(fcs8.size()), protocol::kFlagZstd) + fcs8;
      },
      LyingTransport::kEnd);
  ExpectRefused(r, "huge zstd size");
  CHECK(r.largest_alloc < 512 * 1024);
}

TEST_CASE("a lying supervisor: a frame that promises 1 MiB and stalls holds no call past its deadline") {
  // Setup stalls: Start gives up at its deadline with OUTCOME_UNKNOWN.
  LieResult r = Lie([](std::uint64_t) { return Header(1 << 20); }, LyingTransport::kStall, {}, 300);
  CHECK(ErrorCodeOf(r.start) == ErrorCode::kOutcomeUnknown);
  r = Lie([](std::uint64_t) { return std::string(); }, LyingTransport::kStall, {}, 300);
  CHECK(ErrorCodeOf(r.start) == ErrorCode::kOutcomeUnknown);
}

TEST_CASE("a lying supervisor: endless output beyond the granted window is refused, bounded") {
  // Each frame alone exceeds the 64 KiB window (which is shared by both
  // streams: frames within it are credit the host granted as it read).
  std::string flood;
  for (int i = 0; i < 64; ++i) flood += FrameOf(OutputAt(static_cast<std::uint64_t>(i) * 70000, std::string(70000, 'x')));
  const LieResult r = Lie([&](std::uint64_t id) { return FrameOf(WelcomeFor(id)) + flood; }, LyingTransport::kEnd);
  ExpectRefused(r, "beyond the window");
  CHECK(r.output.size() <= kDefaultOutputWindowBytes);
}

TEST_CASE("a lying supervisor: endless valid frames never starve the host, and an abort ends the wait") {
  wire::Envelope pong;
  pong.set_generation(1);
  pong.mutable_pong()->set_nonce(1);
  std::string endless;
  for (int i = 0; i < 100; ++i) endless += FrameOf(pong);
  asio::io_context io;
  auto t_owner = std::make_shared<LyingTransport>(io.get_executor(), [](std::uint64_t id) { return FrameOf(WelcomeFor(id)); },
                   LyingTransport::kEndless, endless);
  LyingTransport& t = *t_owner;
  bool aborted = false;
  g_largest = 0;
  g_armed = true;
  asio::co_spawn(io, [&]() -> awaitable<void> {
    using namespace asio::experimental::awaitable_operators;
    StartOptions o = Opts();
    o.argv = V("cat");
    auto p = co_await Process::Start(t, std::move(o));
    REQUIRE(p.ok());
    asio::steady_timer timer(co_await asio::this_coro::executor, std::chrono::milliseconds(200));
    auto r = co_await ((*p)->Wait() || timer.async_wait(asio::as_tuple(asio::use_awaitable)));
    aborted = r.index() == 1 || (std::get<0>(r).status().ok() == false &&
                                 ErrorCodeOf(std::get<0>(r).status()) == ErrorCode::kWaitAborted);
  }, [](std::exception_ptr e) { if (e) std::rethrow_exception(e); });
  io.run();
  g_armed = false;
  CHECK(aborted);
  CHECK(g_largest <= kAllocBound);
}

TEST_CASE("a lying supervisor: bogus offsets, early exits and stray generations are protocol errors") {
  struct Case {
    const char* name;
    std::function<std::string()> lie;
  };
  wire::Envelope exit_early;
  exit_early.set_generation(1);
  exit_early.mutable_exit()->set_code(0);
  wire::Envelope ack_beyond;
  ack_beyond.set_generation(1);
  ack_beyond.mutable_stdin_ack()->set_offset(1 << 30);
  wire::Envelope gap_ahead;
  gap_ahead.set_generation(1);
  gap_ahead.mutable_output_gap()->set_stream(wire::STREAM_STDOUT);
  gap_ahead.mutable_output_gap()->set_from(100);
  gap_ahead.mutable_output_gap()->set_to(50);
  wire::Envelope hello_back;
  hello_back.set_generation(1);
  hello_back.mutable_hello();
  const Case cases[] = {
      {"output that skips bytes", [] { return FrameOf(OutputAt(1000, "late")); }},
      {"output at an offset near 2^64", [] { return FrameOf(OutputAt(~0ull - 2, "wrap")); }},
      {"output after EOF", [] { return FrameOf(OutputAt(0, "a", true)) + FrameOf(OutputAt(1, "b")); }},
      {"output on an unknown stream",
       [] { return FrameOf(OutputAt(0, "a", false, static_cast<wire::Stream>(9))); }},
      {"exit before the end of output", [&] { return FrameOf(exit_early); }},
      {"a stdin ack beyond what was sent", [&] { return FrameOf(ack_beyond); }},
      {"a gap that ends before it starts", [&] { return FrameOf(gap_ahead); }},
      {"a frame of a future generation", [] { return FrameOf(OutputAt(0, "x", false, wire::STREAM_STDOUT, 7)); }},
      {"a request the host never answers", [&] { return FrameOf(hello_back); }},
      {"garbage that is not a frame", [] { return std::string("HTTP/1.1 200 OK\r\n\r\n"); }},
      {"a frame that is not an envelope", [] { return protocol::EncodeFrame("\xff\xff\xff\xff garbage"); }},
  };
  for (const Case& c : cases) {
    const LieResult r = Lie([&](std::uint64_t id) { return FrameOf(WelcomeFor(id)) + c.lie(); }, LyingTransport::kStall);
    ExpectRefused(r, c.name);
    CHECK_MESSAGE(ErrorCodeOf(r.read) == ErrorCode::kProtocol, c.name, ": ", r.read.ToString());
  }
}

TEST_CASE("a lying supervisor: a welcome without a generation or with a tiny stdin window is refused") {
  LieResult r = Lie([](std::uint64_t id) { return FrameOf(WelcomeFor(id, 0)); }, LyingTransport::kStall);
  CHECK(ErrorCodeOf(r.start) == ErrorCode::kProtocol);
  r = Lie(
      [](std::uint64_t id) {
        wire::Envelope w = WelcomeFor(id);
        w.mutable_welcome()->set_stdin_window_bytes(10);
        return FrameOf(w);
      },
      LyingTransport::kStall);
  CHECK(ErrorCodeOf(r.start) == ErrorCode::kProtocol);
}

}  // namespace
}  // namespace tether::testing
