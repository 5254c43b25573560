// The exchange relay (supervisor/exchange.h) through the real native
// supervisor: `launch --exchange`, `exchange` polls, and peers that misbehave
// on the relay's socket.
#include "supervisor/exchange.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <stop_token>
#include <thread>
#include <vector>

#include <doctest.h>

#include "tests/build_paths.h"

#include "protocol/envelope.h"
#include "protocol/exchange_format.h"
#include "supervisor/proc.h"
#include "tests/supervisor/test_util.h"
#include "tether/protocol/version.h"

extern char** environ;

namespace tether::supervisor {
namespace {

using namespace std::chrono_literals;
using testing::Contains;
using testing::TempDir;

struct Ran {
  int status = -1;  // exit status, -1 when it did not exit normally in time
  std::string out;
};

// The supervisor under test: the native build's, or $TETHER_TEST_SUPERVISOR.
const char* SupervisorPath() {
  const char* p = std::getenv("TETHER_TEST_SUPERVISOR");
  return p != nullptr && *p != '\0' ? p : ::tether::testing::kNativeSupervisorPath;
}

// Runs the supervisor with `args`; stdout captured, stderr inherited.
Ran RunSupervisor(const std::vector<std::string>& args) {
  int out[2];
  REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  std::vector<std::string> argv_s = {SupervisorPath()};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(out[1]);
  REQUIRE(rc == 0);
  Ran r;
  r.out = testing::ReadToEof(out[0]).value_or("<no EOF>");
  ::close(out[0]);
  const std::optional<int> st = testing::WaitPid(pid);
  if (st && WIFEXITED(*st)) r.status = WEXITSTATUS(*st);
  return r;
}

// A running `cat` (or `argv`) behind a relay with id "r1", started by
// `launch --exchange`; it ends a lease (1 s by default) after its relay is
// gone. Polls without input send the daemon no request, so the relay's
// attachment lapses a lease after the launch and the daemon ends a lease
// after that (end_with_host): a test whose polls must find it running
// takes a longer lease.
class ExchangeLaunch {
 public:
  explicit ExchangeLaunch(std::vector<std::string> argv = {"/bin/cat"}, unsigned lease_ms = 1000) {
    REQUIRE(::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);  // the daemon and relay end up ours to reap
    ::signal(SIGPIPE, SIG_IGN);
    wire::Envelope launch;
    wire::Launch& l = *launch.mutable_launch();
    l.set_launch_id("x1");
    l.set_secret(testing::RandomBytes(32, 7));
    for (const std::string& a : argv) l.add_argv(a);
    l.set_stdin_mode(wire::STDIN_PIPE);
    l.set_state_dir(state_dir);
    l.set_lease_ms(lease_ms);
    l.set_linger_ms(100);
    l.set_end_with_host(true);
    wire::Envelope hello;
    hello.mutable_hello()->set_secret(l.secret());
    hello.mutable_hello()->set_min_version(kProtocolVersion);
    hello.mutable_hello()->set_max_version(kProtocolVersion);
    {
      std::ofstream f(init, std::ios::binary);
      f << protocol::EncodeEnvelope(launch) << protocol::EncodeEnvelope(hello);
    }
    REQUIRE(::chmod(init.c_str(), 0600) == 0);
    const Ran r = RunSupervisor({"launch", "--exchange", "r1", "@" + init});
    REQUIRE_MESSAGE(r.status == 0, r.out);
    REQUIRE(Contains(r.out, "tether-relay-ok"));
  }
  ~ExchangeLaunch() {
    RunSupervisor({"exchange", state_dir, "r1", "close"});
    CHECK(testing::ReapAllChildren());  // the relay now, the daemon and its child a lease later
  }

  Ran Poll(std::uint64_t in, std::uint64_t out) {
    return RunSupervisor({"exchange", state_dir, "r1", std::to_string(in), std::to_string(out)});
  }

  // A raw connection to the relay's socket.
  int Connect() const {
    const std::string path = state_dir + ".x-r1/sock";
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    REQUIRE(path.size() < sizeof a.sun_path);
    std::memcpy(a.sun_path, path.data(), path.size());
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    return fd;
  }

  TempDir tmp;
  const std::string state_dir = tmp / "run/x1";
  const std::string init = tmp / "x1.init";
};

// Sockets held by the processes this test started: the daemon and the
// relay are ours (we are their subreaper), so a connection the relay
// accepted shows as one more.
int SocketsOfOurChildren() {
  int n = 0;
  for (pid_t child : ChildrenOf(::getpid())) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(child) + "/fd", ec)) {
      std::error_code rec;
      if (std::filesystem::read_symlink(e.path(), rec).string().rfind("socket:", 0) == 0) ++n;
    }
  }
  return n;
}

// The hazard: the relay read each poll's request with blocking reads of up
// to 2 s per read, so one connection that stalled or trickled its request (a
// poll command cut or stopped by the provider, any process of the sandbox's
// user) froze the relay: no poll answered, the daemon's socket unread. The
// `exchange` command gives up after 2 s without an answer, so the host saw
// every poll fail and, after 50, declared the channel gone.
TEST_CASE("the relay answers polls while other connections stall or trickle their requests") {
  // (A 5 s lease: with 1 s, the daemon ended about 2 s after the launch,
  // and under ASan at ctest -j4 the third poll came after that.)
  ExchangeLaunch x({"/bin/cat"}, 5000);
  const int sockets = SocketsOfOurChildren();
  const int silent = x.Connect();
  const int trickle = x.Connect();
  // (A jthread: stopped and joined even when a REQUIRE below fails.)
  std::jthread trickler([&](std::stop_token stop) {
    // One byte of a request header every 300 ms: each within any per-read timeout.
    for (int i = 0; i < 20 && !stop.stop_requested(); ++i) {
      (void)!::send(trickle, "\0", 1, MSG_NOSIGNAL);
      std::this_thread::sleep_for(300ms);
    }
  });
  // Both accepted before the polls come (waited for, not slept on).
  REQUIRE(testing::Eventually([&] { return SocketsOfOurChildren() >= sockets + 2; }, 30000ms));
  for (int i = 0; i < 3; ++i) {
    const Ran r = x.Poll(0, 0);
    CAPTURE(i);
    REQUIRE_MESSAGE(r.status == 0, r.out);
    absl::StatusOr<protocol::ExchangeReply> reply = protocol::ParseExchangeOutput(r.out);
    REQUIRE_MESSAGE(reply.ok(), reply.status().ToString());
    CHECK(reply->from == 0);
    CHECK((reply->flags & protocol::kExchangeDaemonEnded) == 0);
  }
  trickler.request_stop();
  trickler.join();
  // The staller is dropped once kRelayPeerTimeoutMs has passed: EOF, no reply.
  CHECK(testing::ReadToEof(silent, 5s).value_or("<open>").empty());
  ::close(silent);
  ::close(trickle);
}

// The host repeats a close until it sees the line: a close cut on its way
// (the hostile channel's one-shot cuts) held the attachment for a lease, and
// a reopen got BUSY for 30 s.
TEST_CASE("a close prints its line once the relay is ending, again when repeated, never when unknown") {
  ExchangeLaunch x;
  const std::string line = std::string(protocol::kRelayClosedLine);
  Ran first = RunSupervisor({"exchange", x.state_dir, "r1", "close"});
  CHECK(first.status == 0);
  CHECK(Contains(first.out, line));
  // The relay is gone (its directory with it) ...
  REQUIRE(testing::Eventually([&] { return !std::filesystem::exists(x.state_dir + ".x-r1"); }));
  CHECK(x.Poll(0, 0).status == 1);
  // ... and a repeated close (the first one's line lost) says so too.
  Ran again = RunSupervisor({"exchange", x.state_dir, "r1", "close"});
  CHECK(again.status == 0);
  CHECK(Contains(again.out, line));

  // A "relay" that never takes the request: no line, exit 1 (the host asks again).
  TempDir other;
  const std::string dir = other / "s.x-r2";
  REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
  const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const std::string path = dir + "/sock";
  REQUIRE(path.size() < sizeof a.sun_path);
  std::memcpy(a.sun_path, path.data(), path.size());
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(listener, 4) == 0);  // connections wait in the backlog, never read
  Ran stuck = RunSupervisor({"exchange", other / "s", "r2", "close"});
  CHECK(stuck.status == 1);
  CHECK(!Contains(stuck.out, line));
  ::close(listener);
}

TEST_CASE("the relay drops a connection whose request is over the limit, without reading it") {
  ExchangeLaunch x;
  const int fd = x.Connect();
  protocol::RelayRequest req;
  std::string head = protocol::EncodeRelayRequest(req).substr(0, protocol::kRelayRequestHeaderBytes - 4);
  head += std::string("\x7f\xff\xff\xff", 4);
  REQUIRE(::send(fd, head.data(), head.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(head.size()));
  CHECK(testing::ReadToEof(fd, 5s).value_or("<open>").empty());
  ::close(fd);
  CHECK(x.Poll(0, 0).status == 0);  // and goes on serving
}

TEST_CASE("output larger than one reply comes in slices of at most kMaxExchangeReplyDataBytes") {
  constexpr std::size_t kBytes = 600 * 1024;
  ExchangeLaunch x({"/usr/bin/head", "-c", std::to_string(kBytes), "/dev/zero"});
  // Once the relay holds more than a reply's worth, a poll gets exactly the cap.
  protocol::ExchangeReply first;
  REQUIRE(testing::Eventually([&] {
    absl::StatusOr<protocol::ExchangeReply> r = protocol::ParseExchangeOutput(x.Poll(0, 0).out);
    if (r.ok()) first = *r;
    return r.ok() && first.data.size() == protocol::kMaxExchangeReplyDataBytes;
  }));
  std::string stream;
  protocol::EnvelopeDecoder dec;
  std::size_t output = 0;
  bool welcomed = false;
  while (output < kBytes) {
    const Ran ran = x.Poll(0, stream.size());
    REQUIRE(ran.status == 0);
    absl::StatusOr<protocol::ExchangeReply> r = protocol::ParseExchangeOutput(ran.out);
    REQUIRE(r.ok());
    CHECK(r->from == stream.size());
    CHECK(r->data.size() <= protocol::kMaxExchangeReplyDataBytes);
    stream += r->data;
    std::string_view in = r->data;
    wire::Envelope env;
    while (true) {
      absl::StatusOr<bool> got = dec.Next(&in, &env);
      REQUIRE(got.ok());
      if (!*got) break;
      if (env.has_welcome()) welcomed = true;
      if (env.has_output()) output += env.output().data().size();
    }
  }
  CHECK(welcomed);
  CHECK(output == kBytes);
}

}  // namespace
}  // namespace tether::supervisor
