// A start whose launch answer is lost sends the same Launch again
// (PROTOCOL.md 4.1: resend Hello, launch id idempotence) and runs its
// command exactly once, whatever stage the loss came at. Each case cuts
// the first launch's channel at one stage, through the real supervisor
// over the local sandbox, and checks the child's own record of its starts.
#include <doctest.h>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/host/process/process_fixture.h"

namespace tether {
namespace {

using namespace testing;

// Where the first launch's channel is lost.
enum class LossAt {
  kRefused,       // the native call fails before anything runs (nothing dispatched)
  kAfterLaunch,   // the launch happened (the child ran), the channel is cut before any answer
  kAfterWelcome,  // the supervisor sent its Welcome (the first attachment was granted); it is lost
  kLostAnswer,    // one-shot: the launch call ran to its end and its answer was lost (a 5xx after effect)
};

// A transport that loses the channels of its first `cuts` launches at
// `stage` (text mode, or exchange for kLostAnswer); `flag` is the file the
// child appends to when it starts.
class LaunchCutter final : public internal::ForwardingTransport {
 public:
  LaunchCutter(Transport& inner, LossAt stage, int cuts, std::string flag)
      : ForwardingTransport(inner), stage_(stage), cuts_(cuts), flag_(std::move(flag)) {}
  ChannelCapabilities capabilities() const override {
    return CapabilitiesOf(stage_ == LossAt::kLostAnswer ? TunnelMode::kExchange : TunnelMode::kText);
  }
  awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(std::vector<std::string> argv) override {
    const bool launch = stage_ == LossAt::kLostAnswer ? (argv.size() > 1 && argv[1] == "launch")
                                                   : (argv.size() == 4 && argv[3] == "tether-start");
    if (launch && launches_ >= cuts_ && !tombstone_root.empty()) PlaceTombstones();
    if (launch && launches_ >= cuts_ && !kill_daemons_root.empty()) KillDaemons();
    if (!launch || launches_++ >= cuts_) co_return co_await inner().Exec(std::move(argv));
    if (stage_ == LossAt::kRefused) co_return absl::UnavailableError("emulated: the exec call failed");
    auto ch = co_await inner().Exec(std::move(argv));
    if (stage_ == LossAt::kLostAnswer) {
      // The one-shot command runs to its end; its answer never comes back.
      if (!ch.ok()) co_return ch.status();
      (*ch)->CloseWrite();
      char buf[4096];
      while (true) {
        absl::StatusOr<std::size_t> n = co_await (*ch)->ReadSome({buf, sizeof buf});
        if (!n.ok() || *n == 0) break;
      }
      starts_seen_->push_back(Starts(flag_));
      co_return OutcomeUnknownError("emulated: the answer was lost after the call ran");
    }
    if (!ch.ok()) co_return ch.status();
    co_return std::unique_ptr<Channel>(new CutChannel(*std::move(ch), stage_, flag_, starts_seen_));
  }
  int launches() const { return launches_; }
  // When set (the sandbox's state root): before the first launch that is
  // not cut, every launch's record there is replaced by its tombstone, a
  // cancellation marker, as when the first copy's daemon ended before a
  // resent copy arrived (PROTOCOL.md 4.1).
  std::string tombstone_root;
  // When set (the sandbox's state root): before the first launch that is
  // not cut, every launch's daemon there is killed (SIGKILL, the pid from
  // its mark), its directory left as it was: what an OOM kill leaves.
  std::string kill_daemons_root;
  int daemons_killed = 0;
  // The number of child starts the flag showed when each cut was made.
  // (After the Welcome the child may not have written its line yet.)
  const std::vector<int>& starts_seen() const { return *starts_seen_; }

 private:
  class CutChannel final : public ForwardingChannel {
   public:
    CutChannel(std::unique_ptr<Channel> inner, LossAt stage, std::string flag, std::shared_ptr<std::vector<int>> seen)
        : ForwardingChannel(std::move(inner)), stage_(stage), flag_(std::move(flag)), seen_(std::move(seen)) {}
    awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf) override {
      if (lost_) co_return absl::UnavailableError("emulated: the channel was cut");
      if (stage_ == LossAt::kAfterLaunch) {
        // The child has recorded its start, so the launch happened; nothing
        // it said reaches the host. (Its line, not just the file: `>>`
        // makes the file before echo writes, and a start given up after
        // this cut ends the child at once, cancel_watch.h; a cut at the
        // file alone could leave no line, as under ASan at ctest -j4.)
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (Starts(flag_) == 0) {
          if (std::chrono::steady_clock::now() >= until) co_return absl::InternalError("no child");
          co_await Sleep(std::chrono::milliseconds(5));
        }
        co_return Lose();
      }
      absl::StatusOr<std::size_t> n = co_await inner_->ReadSome(buf);
      if (stage_ == LossAt::kAfterWelcome && n.ok() && *n > 0) co_return Lose();  // the Welcome's first bytes
      co_return n;
    }

   private:
    absl::Status Lose() {
      if (!lost_) seen_->push_back(Starts(flag_));
      lost_ = true;
      Cut();
      return absl::UnavailableError("emulated: the channel was cut");
    }
    LossAt stage_;
    bool lost_ = false;
    std::string flag_;
    std::shared_ptr<std::vector<int>> seen_;
  };

 public:
  void PlaceTombstones() {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(tombstone_root, ec)) {
      if (e.is_directory(ec)) std::ofstream(e.path().string() + ".cancel") << "";
    }
  }
  void KillDaemons() {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(kill_daemons_root, ec)) {
      std::ifstream mark(e.path().string() + "/daemon");
      pid_t pid = 0;
      if (!(mark >> pid) || pid <= 1) continue;
      if (::kill(pid, SIGKILL) == 0) ++daemons_killed;
      // (Gone before the next copy looks: its lock is freed with it.)
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (::kill(pid, 0) == 0 && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    }
  }
  static int Starts(const std::string& flag) {
    std::ifstream f(flag);
    int n = 0;
    for (std::string line; std::getline(f, line);) n += line == "started";
    return n;
  }

 private:
  LossAt stage_;
  int cuts_;
  std::string flag_;
  int launches_ = 0;
  std::shared_ptr<std::vector<int>> starts_seen_ = std::make_shared<std::vector<int>>();
};

// Starts `echo started >> flag; printf 'hi\0\377'` through a LaunchCutter
// and checks: the start succeeds after `cuts` lost launches, the output is
// exact, the exit is 0, and the child started exactly once.
void StartsOnce(LossAt stage, int cuts) {
  Sandbox sb;
  const std::string flag = sb.root() + "/starts";
  sb.Run([&](Transport& t) -> awaitable<void> {
    co_await WarmUp(t);
    auto cutter = std::make_shared<LaunchCutter>(t, stage, cuts, flag);
    StartOptions o = Opts();
    o.argv = V("sh", "-c", "echo started >> '" + flag + "'; printf 'hi\\000\\377'");
    absl::StatusOr<std::unique_ptr<Process>> p = co_await Process::Start(*cutter, o);
    REQUIRE_MESSAGE(p.ok(), p.status());
    CHECK(cutter->launches() == cuts + 1);
    Output out = co_await ReadAll(**p);
    CHECK(out.status.ok());
    CHECK(out.out == std::string("hi\0\377", 4));
    absl::StatusOr<ExitStatus> e = co_await (*p)->Wait();
    REQUIRE(e.ok());
    CHECK(e->code == 0);
    CHECK(LaunchCutter::Starts(flag) == 1);
    REQUIRE(cutter->starts_seen().size() == static_cast<std::size_t>(stage == LossAt::kRefused ? 0 : cuts));
    if (stage == LossAt::kAfterLaunch) {
      // Each cut came after the child's start: the resend attached to it.
      for (int seen : cutter->starts_seen()) CHECK(seen == 1);
    }
  });
  CHECK(LaunchCutter::Starts(flag) == 1);
}

TEST_CASE("a start whose launch answer is lost at each stage is sent again and runs its command once") {
  SUBCASE("the exec call failed") { StartsOnce(LossAt::kRefused, 1); }
  SUBCASE("cut after the launch, before any answer") { StartsOnce(LossAt::kAfterLaunch, 1); }
  SUBCASE("cut after the Welcome was sent (the first attachment was granted)") { StartsOnce(LossAt::kAfterWelcome, 1); }
  SUBCASE("three cuts in a row after the Welcome") { StartsOnce(LossAt::kAfterWelcome, 3); }
  SUBCASE("a one-shot launch that ran and lost its answer (exchange)") { StartsOnce(LossAt::kLostAnswer, 1); }
}

TEST_CASE("a start whose launch answers are lost more often than it may resend is OUTCOME_UNKNOWN, once") {
  // Five launches lost after the child started: four resends, then the
  // marker. The child ran once (the first launch) and was never started again.
  Sandbox sb;
  const std::string flag = sb.root() + "/starts";
  sb.Run([&](Transport& t) -> awaitable<void> {
    co_await WarmUp(t);
    auto cutter = std::make_shared<LaunchCutter>(t, LossAt::kAfterWelcome, 100, flag);
    StartOptions o = Opts();
    o.argv = V("sh", "-c", "echo started >> '" + flag + "'");
    absl::StatusOr<std::unique_ptr<Process>> p = co_await Process::Start(*cutter, o);
    CAPTURE(p.status());
    CHECK(ErrorCodeOf(p.status()) == ErrorCode::kOutcomeUnknown);
    CHECK(cutter->launches() == 5);
    CHECK(LaunchCutter::Starts(flag) == 1);
  });
}

TEST_CASE("a resent launch that finds a tombstone for its record is OUTCOME_UNKNOWN: it may have run, once") {
  // The first copy ran the child and its answer was lost; when the resend
  // arrives, the record is gone and a cancellation marker stands in for it
  // (a daemon that ended first leaves one). The supervisor refuses the copy
  // (ERROR_CANCELLED, "nothing was started"); for the host that is not a
  // cancellation of its own but a launch whose fate it cannot learn.
  Sandbox sb;
  const std::string flag = sb.root() + "/starts";
  sb.Run([&](Transport& t) -> awaitable<void> {
    co_await WarmUp(t);
    auto cutter = std::make_shared<LaunchCutter>(t, LossAt::kAfterLaunch, 1, flag);
    cutter->tombstone_root = sb.root() + "/run";
    StartOptions o = Opts();
    o.argv = V("sh", "-c", "echo started >> '" + flag + "'; sleep 30");
    absl::StatusOr<std::unique_ptr<Process>> p = co_await Process::Start(*cutter, o);
    CAPTURE(p.status());
    CHECK(ErrorCodeOf(p.status()) == ErrorCode::kOutcomeUnknown);
    CHECK(std::string(p.status().message()).find("launch cancelled") != std::string::npos);
    CHECK(cutter->launches() == 2);
    CHECK(LaunchCutter::Starts(flag) == 1);
  });
  CHECK(sb.LeftoverStateDirs() == 0);  // the first copy's daemon saw the marker too, and ended its child
}

TEST_CASE("a resent launch whose daemon was killed meanwhile is OUTCOME_UNKNOWN: it may have run, once") {
  // The first copy ran the child and its answer was lost; its daemon is
  // then killed (SIGKILL), the child left running. The resent copy finds
  // the directory, no daemon, and the daemon's mark: it starts nothing
  // (ERROR_NOT_FOUND, at once, not after waiting for a daemon), and for the
  // host the start's fate is unknown.
  Sandbox sb;
  const std::string flag = sb.root() + "/starts";
  const std::string pid_file = sb.root() + "/child.pid";
  sb.Run([&](Transport& t) -> awaitable<void> {
    co_await WarmUp(t);
    auto cutter = std::make_shared<LaunchCutter>(t, LossAt::kAfterLaunch, 1, flag);
    cutter->kill_daemons_root = sb.root() + "/run";
    StartOptions o = Opts();
    o.argv = V("sh", "-c", "echo $$ > '" + pid_file + "'; echo started >> '" + flag + "'; exec sleep 30");
    absl::StatusOr<std::unique_ptr<Process>> p = co_await Process::Start(*cutter, o);
    CAPTURE(p.status());
    CHECK(cutter->daemons_killed == 1);
    CHECK(ErrorCodeOf(p.status()) == ErrorCode::kOutcomeUnknown);
    CHECK(std::string(p.status().message()).find("gone without a record") != std::string::npos);
    CHECK(cutter->launches() == 2);
    CHECK(LaunchCutter::Starts(flag) == 1);
  });
  std::ifstream f(pid_file);
  pid_t child = 0;
  if (f >> child && child > 1) ::kill(child, SIGKILL);
}

TEST_CASE("no resend after the window: a launch lost with a short lease is OUTCOME_UNKNOWN, not sent again") {
  // lease_ms 150: the resend window is lease / 2 = 75 ms, less than the
  // first resend's 100 ms pause, so the first loss is final.
  Sandbox sb;
  const std::string flag = sb.root() + "/starts";
  sb.Run([&](Transport& t) -> awaitable<void> {
    co_await WarmUp(t);
    auto cutter = std::make_shared<LaunchCutter>(t, LossAt::kAfterLaunch, 1, flag);
    StartOptions o = Opts();
    o.argv = V("sh", "-c", "echo started >> '" + flag + "'");
    o.lease_ms = 150;
    absl::StatusOr<std::unique_ptr<Process>> p = co_await Process::Start(*cutter, o);
    CAPTURE(p.status());
    CHECK(ErrorCodeOf(p.status()) == ErrorCode::kOutcomeUnknown);
    CHECK(cutter->launches() == 1);
    CHECK(LaunchCutter::Starts(flag) == 1);
  });
}

}  // namespace
}  // namespace tether
