#include "tether/process.h"

#include <doctest.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tether/errors.h"
#include "protocol/envelope.h"
#include "tests/host/process/process_fixture.h"

namespace tether {
namespace {

using namespace tether::testing;

// A transport whose channels can be cut; after the first cut the next
// `silent` channels it opens (the reattaches) accept every write and never
// deliver a byte nor end: a native channel that opened and then went
// silent. Close() and cancellation end their reads, as the Channel
// contract demands; Release() ends them too (for a host that never does).
// After the cut every Exec also waits `exec_delay` first (a slow native
// exec: no session exists meanwhile).
class SilentReattachTransport final : public internal::ForwardingTransport {
 public:
  SilentReattachTransport(Transport& inner, int silent,
                          std::chrono::milliseconds exec_delay = std::chrono::milliseconds(0))
      : ForwardingTransport(inner), silent_left_(silent), exec_delay_(exec_delay) {}
  awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(std::vector<std::string> argv) override {
    if (cut_) ++execs_after_cut_;
    if (cut_ && exec_delay_.count() > 0) co_await Sleep(exec_delay_);
    if (cut_) ++execs_done_after_cut_;
    if (cut_ && silent_left_ > 0) {
      --silent_left_;
      ++silent_opened_;
      auto ch = std::make_unique<SilentChannel>(executor());
      silent_.push_back(ch->gate());
      co_return std::unique_ptr<Channel>(std::move(ch));
    }
    auto ch = co_await inner().Exec(std::move(argv));
    if (!ch.ok()) co_return ch.status();
    auto cuttable = std::make_unique<WatchedChannel>(*std::move(ch), cut_ ? ended_after_cut_ : nullptr);
    last_ = cuttable.get();
    co_return std::unique_ptr<Channel>(std::move(cuttable));
  }
  // Cuts the current channel: the host starts reattaching.
  void Cut() {
    cut_ = true;
    last_->Cut();
  }
  // Ends every silent channel's pending read.
  void Release() {
    for (const auto& gate : silent_) gate->cancel();
  }
  int silent_opened() const { return silent_opened_; }
  // Execs begun, and returned, since the cut (the reattaches); how many
  // channels opened since the cut have ended (closed by the host, or read
  // to their end).
  int execs_after_cut() const { return execs_after_cut_; }
  int execs_done_after_cut() const { return execs_done_after_cut_; }
  int ended_after_cut() const { return *ended_after_cut_; }

 private:
  class SilentChannel final : public Channel {
   public:
    explicit SilentChannel(asio::any_io_executor ex)
        : gate_(std::make_shared<asio::steady_timer>(ex, asio::steady_timer::time_point::max())) {}
    ~SilentChannel() override { gate_->cancel(); }
    std::shared_ptr<asio::steady_timer> gate() const { return gate_; }
    awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char>) override {
      if (!closed_) {
        auto gate = gate_;
        co_await gate->async_wait(asio::as_tuple(asio::use_awaitable));
      }
      co_return absl::UnavailableError("silent channel closed");
    }
    awaitable<absl::Status> Write(std::string_view) override {
      if (closed_) co_return absl::UnavailableError("silent channel closed");
      co_return absl::OkStatus();  // accepted, and never answered
    }
    void CloseWrite() override {}
    void Close() override {
      closed_ = true;
      gate_->cancel();
    }
    std::string Diagnostics() const override { return {}; }

   private:
    std::shared_ptr<asio::steady_timer> gate_;
    bool closed_ = false;
  };

  bool cut_ = false;
  // A channel that counts its end once into `ended` (when not null).
  class WatchedChannel final : public ForwardingChannel {
   public:
    WatchedChannel(std::unique_ptr<Channel> inner, std::shared_ptr<int> ended)
        : ForwardingChannel(std::move(inner)), ended_(std::move(ended)) {}
    awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf) override {
      absl::StatusOr<std::size_t> n = co_await inner_->ReadSome(buf);
      if (!n.ok() || *n == 0) End();
      co_return n;
    }
    void Close() override {
      End();
      inner_->Close();
    }

   private:
    void End() {
      if (ended_ && !counted_) ++*ended_;
      counted_ = true;
    }
    std::shared_ptr<int> ended_;
    bool counted_ = false;
  };
  std::shared_ptr<int> ended_after_cut_ = std::make_shared<int>(0);
  int execs_after_cut_ = 0;
  int execs_done_after_cut_ = 0;
  int silent_left_;
  std::chrono::milliseconds exec_delay_;
  int silent_opened_ = 0;
  ForwardingChannel* last_ = nullptr;
  std::vector<std::shared_ptr<asio::steady_timer>> silent_;
};

// Found while fixing a Kubernetes read hang: a reattach whose channel opened
// and then stayed silent waited for the Welcome forever (reconnect_timeout
// was checked only between attempts), and the handle hung with no error.
// Starts `cat` with piped stdin through `t`, checks it echoes "one\n",
// and detaches: the reference to reopen it by.
awaitable<std::string> StartCatEchoDetach(Transport& t) {
  StartOptions o = Opts();
  o.argv = V("cat");
  o.stdin_pipe = true;
  auto p = co_await Process::Start(t, o);
  REQUIRE(p.ok());
  CHECK((co_await (*p)->Write("one\n")).ok());
  std::string seen;
  while (seen.size() < 4) {
    auto c = co_await (*p)->Read();
    REQUIRE(c.ok());
    REQUIRE(*c);
    seen += (*c)->bytes;
  }
  CHECK(seen == "one\n");
  absl::StatusOr<std::string> ref = (*p)->Reference();
  REQUIRE(ref.ok());
  CHECK((co_await (*p)->Detach()).ok());
  co_return *ref;
}

// On a reopened StartCatEchoDetach process: "two\n" in, EOF, exactly
// "two\n" out after the first 4 bytes, exit 0.
awaitable<void> EchoTwoToExit(Process& q) {
  CHECK((co_await q.Write("two\n")).ok());
  CHECK((co_await q.CloseStdin()).ok());
  Output rest = co_await ReadAll(q, 4);
  CHECK(rest.status.ok());
  CHECK(rest.out == "two\n");
  auto e = co_await q.Wait();
  REQUIRE(e.ok());
  CHECK(e->code == 0);
}

// A transport whose next `Arm(n)` attach channels (the start script's
// shell, which a reattach also runs) deliver the Hello and lose the
// Welcome: the supervisor attached, the host never hears of it, and the far
// end of the channel lives on (as a provider's exec whose host side broke
// can) until the transport goes.
class WelcomeLoser final : public internal::ForwardingTransport {
 public:
  explicit WelcomeLoser(Transport& inner) : ForwardingTransport(inner) {}
  ~WelcomeLoser() override {
    for (const std::shared_ptr<Channel>& c : kept_) c->Close();
  }
  void Arm(int loses) { loses_ = loses; }
  int lost() const { return lost_; }
  awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(std::vector<std::string> argv) override {
    const bool attach = argv.size() == 4 && argv[3] == "tether-start";
    auto ch = co_await inner().Exec(std::move(argv));
    if (!ch.ok() || !attach || loses_ == 0) co_return ch;
    --loses_;
    kept_.push_back(std::shared_ptr<Channel>(*std::move(ch)));
    co_return std::unique_ptr<Channel>(new Loser(kept_.back(), &lost_));
  }

 private:
  class Loser final : public Channel {
   public:
    Loser(std::shared_ptr<Channel> inner, int* lost) : inner_(std::move(inner)), lost_count_(lost) {}
    awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf) override {
      if (lost_) co_return absl::UnavailableError("emulated: the channel broke");
      absl::StatusOr<std::size_t> n = co_await inner_->ReadSome(buf);
      if (n.ok() && *n > 0) {  // the Welcome's first bytes
        lost_ = true;
        ++*lost_count_;
        co_return absl::UnavailableError("emulated: the Welcome was lost");
      }
      co_return n;
    }
    awaitable<absl::Status> Write(std::string_view bytes) override {
      if (lost_) co_return absl::UnavailableError("emulated: the channel broke");
      co_return co_await inner_->Write(bytes);
    }
    void CloseWrite() override {
      if (!lost_) inner_->CloseWrite();
    }
    void Close() override {
      if (!lost_) inner_->Close();  // once lost, the far end lives on
    }
    std::string Diagnostics() const override { return inner_->Diagnostics(); }

   private:
    std::shared_ptr<Channel> inner_;
    int* lost_count_;
    bool lost_ = false;
  };

  int loses_ = 0;
  int lost_ = 0;
  std::vector<std::shared_ptr<Channel>> kept_;
};

// Found under fault injection (conformance.daytona-faults,
// reopen.after_detach): a reopen whose first Welcome was lost (an input
// POST answered 503 after it took effect) tried once more, and then got
// BUSY from its own first attempt, which still held the process for a
// lease. Every Hello of a handle carries the handle's id, and the
// supervisor lets it take the process from an attachment of the same id.
TEST_CASE("a reopen whose Welcomes are lost attaches on a later try, its own earlier attempts displaced") {
  for (const int loses : {1, 3}) {
    CAPTURE(loses);
    Sandbox sb;
    sb.Run([loses](Transport& t) -> awaitable<void> {
      auto loser_owner = std::make_shared<WelcomeLoser>(t);
      WelcomeLoser& loser = *loser_owner;
      const std::string ref = co_await StartCatEchoDetach(loser);
      loser.Arm(loses);
      auto q = co_await Process::Reopen(loser, ref);
      REQUIRE_MESSAGE(q.ok(), q.status());
      CHECK(loser.lost() == loses);  // each fault fired: the supervisor got each Hello
      co_await EchoTwoToExit(**q);
    });
  }
}

// The Detach frames among the whole frames of `written` (what a host wrote
// on one channel, from the first frame that decodes).
int DetachesIn(std::string_view written) {
  protocol::EnvelopeDecoder dec;
  wire::Envelope env;
  int n = 0;
  while (true) {
    absl::StatusOr<bool> got = dec.Next(&written, &env);
    if (!got.ok() || !*got) break;
    if (env.has_detach()) ++n;
  }
  return n;
}

// A transport whose channels lose the first write that carries a Detach:
// the write fails as a call whose answer was lost would (the Detach never
// arrived), and the channel's far end lives on until the transport goes,
// holding the attachment on the supervisor's side. Close() and
// cancellation still end a read under way, as the Channel contract says.
class DetachLoser final : public internal::ForwardingTransport {
 public:
  explicit DetachLoser(Transport& inner) : ForwardingTransport(inner) {}
  ~DetachLoser() override {
    for (const std::shared_ptr<Channel>& c : kept_) c->Close();
  }
  int lost() const { return lost_; }
  awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(std::vector<std::string> argv) override {
    auto ch = co_await inner().Exec(std::move(argv));
    if (!ch.ok()) co_return ch.status();
    kept_.push_back(std::shared_ptr<Channel>(*std::move(ch)));
    co_return std::unique_ptr<Channel>(new Loser(kept_.back(), &lost_, executor()));
  }

 private:
  class Loser final : public Channel {
   public:
    Loser(std::shared_ptr<Channel> inner, int* lost, asio::any_io_executor ex)
        : inner_(std::move(inner)), lost_count_(lost), gone_(ex, std::chrono::steady_clock::time_point::max()) {}
    awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf) override {
      using namespace asio::experimental::awaitable_operators;
      if (lost_ || closed_) co_return absl::UnavailableError("emulated: the channel broke");
      auto r = co_await (inner_->ReadSome(buf) || gone_.async_wait(asio::as_tuple(asio::use_awaitable)));
      if (r.index() == 0 && !lost_ && !closed_) co_return std::get<0>(std::move(r));
      co_return absl::UnavailableError("emulated: the channel broke");
    }
    awaitable<absl::Status> Write(std::string_view bytes) override {
      if (lost_ || closed_) co_return absl::UnavailableError("emulated: the channel broke");
      if (*lost_count_ == 0 && CarriesDetach(bytes)) {
        lost_ = true;
        ++*lost_count_;
        gone_.cancel();
        co_return OutcomeUnknownError("emulated: the answer to the write that carried the Detach was lost");
      }
      co_return co_await inner_->Write(bytes);
    }
    void CloseWrite() override {
      if (!lost_) inner_->CloseWrite();
    }
    void Close() override {
      closed_ = true;
      gone_.cancel();
      if (!lost_) inner_->Close();  // once lost, the far end lives on
    }
    std::string Diagnostics() const override { return inner_->Diagnostics(); }

   private:
    // Whether the frames written here (after the attach's text, if any)
    // hold a Detach: every whole frame from the first that decodes.
    bool CarriesDetach(std::string_view bytes) {
      seen_.append(bytes);
      if (DetachesIn(seen_) > 0) return true;
      if (seen_.size() > (1u << 20)) seen_.clear();
      return false;
    }

    std::shared_ptr<Channel> inner_;
    int* lost_count_;
    asio::steady_timer gone_;
    std::string seen_;
    bool lost_ = false;
    bool closed_ = false;
  };

  int lost_ = 0;
  std::vector<std::shared_ptr<Channel>> kept_;
};

// Found under fault injection (conformance.daytona-faults,
// reopen.after_detach): the answer to the input POST that carried a Detach
// was lost, the channel was given up, and the supervisor held the process
// for the detached handle until it saw that channel end: the reopen got
// BUSY. A Detach whose channel fails instead of being ended by the
// supervisor is made again on a new attachment of the same handle.
TEST_CASE("a detach whose channel failed is made again, so that another handle's reopen is not BUSY") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    auto loser_owner = std::make_shared<DetachLoser>(t);
    DetachLoser& loser = *loser_owner;
    const std::string ref = co_await StartCatEchoDetach(loser);
    CHECK(loser.lost() == 1);  // the fault fired
    auto q = co_await Process::Reopen(t, ref);
    REQUIRE_MESSAGE(q.ok(), q.status());
    co_await EchoTwoToExit(**q);
  });
}

// Counts the Detach frames written on its channels, and the channels the
// host closed itself. With hold_eof, the end of a channel (EOF or an error)
// reaches the reader only once Release() is called: a far end whose close
// takes a while to arrive, as over a network (locally the supervisor's
// close after an acknowledged exit came first, and a test without this
// could not fail).
class DetachCounter final : public internal::ForwardingTransport {
 public:
  DetachCounter(Transport& inner, bool hold_eof) : ForwardingTransport(inner), hold_eof_(hold_eof) {}
  int detaches() const { return *count_; }
  int held_closed() const { return *held_closed_; }  // Close() of a channel whose end is held
  void set_hold_eof(bool hold) { hold_eof_ = hold; }  // for channels opened from now on
  void Release() {
    for (const std::shared_ptr<asio::steady_timer>& g : gates_) g->cancel();
  }
  awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(std::vector<std::string> argv) override {
    auto ch = co_await inner().Exec(std::move(argv));
    if (!ch.ok()) co_return ch.status();
    std::shared_ptr<asio::steady_timer> gate;
    if (hold_eof_) {
      gate = std::make_shared<asio::steady_timer>(executor(), std::chrono::steady_clock::time_point::max());
      gates_.push_back(gate);
    }
    co_return std::unique_ptr<Channel>(new Counting(*std::move(ch), count_, gate, held_closed_));
  }

 private:
  class Counting final : public Channel {
   public:
    Counting(std::unique_ptr<Channel> inner, std::shared_ptr<int> count, std::shared_ptr<asio::steady_timer> gate,
             std::shared_ptr<int> held_closed)
        : inner_(std::move(inner)), count_(std::move(count)), gate_(std::move(gate)), held_closed_(std::move(held_closed)) {}
    awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf) override {
      absl::StatusOr<std::size_t> n = co_await inner_->ReadSome(buf);
      if (gate_ && (!n.ok() || *n == 0)) co_await gate_->async_wait(asio::as_tuple(asio::use_awaitable));
      co_return n;
    }
    awaitable<absl::Status> Write(std::string_view bytes) override {
      // Whole frames from the first that decodes (the attach's text first).
      seen_.append(bytes);
      const int n = DetachesIn(seen_);
      *count_ += n - counted_;
      counted_ = n;
      co_return co_await inner_->Write(bytes);
    }
    void CloseWrite() override { inner_->CloseWrite(); }
    void Close() override {
      if (gate_ && !closed_) ++*held_closed_;
      closed_ = true;
      if (gate_) gate_->cancel();
      inner_->Close();
    }
    std::string Diagnostics() const override { return inner_->Diagnostics(); }

   private:
    std::unique_ptr<Channel> inner_;
    std::shared_ptr<int> count_;
    std::shared_ptr<asio::steady_timer> gate_;
    std::shared_ptr<int> held_closed_;
    std::string seen_;
    int counted_ = 0;
    bool closed_ = false;
  };
  bool hold_eof_;
  std::shared_ptr<int> count_ = std::make_shared<int>(0);
  std::shared_ptr<int> held_closed_ = std::make_shared<int>(0);
  std::vector<std::shared_ptr<asio::steady_timer>> gates_;
};

// Found with @tether/node's start benchmark: seed 000's examples detach in
// `finally`, after wait(). That Detach, after the acknowledged exit, waited
// for the supervisor to end the channel, up to 5 s, and closed it itself
// when that took long: through E2B the next start needed a new connection.
TEST_CASE("a detach after the exit was acknowledged neither waits for nor closes the channel") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    auto counter_owner = std::make_shared<DetachCounter>(t, /*hold_eof=*/true);
    DetachCounter& counter = *counter_owner;
    StartOptions o = Opts();
    o.argv = V("echo", "hi");
    auto p = co_await Process::Start(counter, o);
    REQUIRE_MESSAGE(p.ok(), p.status());
    Output r = co_await ReadAll(**p);
    CHECK(r.out == "hi\n");
    auto e = co_await (*p)->Wait();
    REQUIRE(e.ok());
    CHECK((co_await (*p)->Detach()).ok());
    CHECK(counter.held_closed() == 0);  // not closed by the host: the supervisor ends it
    CHECK(!(co_await (*p)->Read()).value().has_value());  // still ends the output
    // The counter sees a Detach that is due: a running process's (its
    // channel's end not held: held, the Detach looks lost and is made again).
    counter.set_hold_eof(false);
    o.argv = V("sleep", "30");
    auto q = co_await Process::Start(counter, o);
    REQUIRE_MESSAGE(q.ok(), q.status());
    absl::StatusOr<std::string> ref = (*q)->Reference();
    REQUIRE(ref.ok());
    CHECK((co_await (*q)->Detach()).ok());
    // (Counted at the end: a Detach is sent asynchronously.)
    auto again = co_await Process::Reopen(t, *ref);
    REQUIRE_MESSAGE(again.ok(), again.status());
    CHECK((co_await (*again)->Terminate(0)).ok());
    CHECK((co_await (*again)->Wait()).ok());
    CHECK(counter.detaches() == 1);  // the running process's only
    counter.Release();
  });
}

TEST_CASE("a reattach on a channel that stays silent ends with UNAVAILABLE once reconnect_timeout passes") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    using namespace asio::experimental::awaitable_operators;
    auto silent_owner = std::make_shared<SilentReattachTransport>(t, 1000);
    SilentReattachTransport& silent = *silent_owner;
    StartOptions o = Opts();
    o.argv = V("sh", "-c", "echo ready; while :; do sleep 0.05; done");
    o.reconnect = true;
    o.reconnect_timeout_ms = 1500;
    auto p = co_await Process::Start(silent, o);
    REQUIRE_MESSAGE(p.ok(), p.status());
    absl::StatusOr<std::string> ref = (*p)->Reference();
    REQUIRE(ref.ok());
    auto first = co_await (*p)->Read();
    REQUIRE(first.ok());
    REQUIRE(*first);
    CHECK((*first)->bytes == "ready\n");
    silent.Cut();
    // A deadline the product promises (reconnect_timeout_ms), so a bound:
    // without one the Read never ended. After the timeout only local steps
    // run; 10 s of margin holds on 2 loaded cores under ASan.
    const auto t0 = std::chrono::steady_clock::now();
    auto raced = co_await ((*p)->Read() || Sleep(std::chrono::milliseconds(o.reconnect_timeout_ms + 10000)));
    const auto took = std::chrono::steady_clock::now() - t0;
    CAPTURE(std::chrono::duration_cast<std::chrono::milliseconds>(took).count());
    CHECK_MESSAGE(raced.index() == 0, "the Read did not end after reconnect_timeout_ms");
    if (raced.index() == 0) {
      const absl::StatusOr<std::optional<OutputChunk>>& r = std::get<0>(raced);
      CAPTURE(r.status());
      CHECK(ErrorCodeOf(r.status()) == ErrorCode::kUnavailable);
      CHECK(std::string(r.status().message()).find("reconnect_timeout") != std::string::npos);
      CHECK(silent.silent_opened() >= 2);  // each silent attempt was given up, and another made
    }
    // (Without the bound, this is what ends the hung attempt.)
    silent.Release();
    auto e = co_await (*p)->Wait();
    CHECK(ErrorCodeOf(e.status()) == ErrorCode::kUnavailable);
    // The process runs on: a reopen through a good channel ends it.
    auto q = co_await Process::Reopen(t, *ref);
    REQUIRE_MESSAGE(q.ok(), q.status());
    CHECK((co_await (*q)->Terminate(100)).ok());
    Output rest = co_await ReadAll(**q);
    CHECK(rest.status.ok());
    auto qe = co_await (*q)->Wait();
    REQUIRE(qe.ok());
    CHECK(qe->signal == SIGTERM);
  });
  CHECK(sb.LeftoverStateDirs() == 0);
}

// Found by conformance.boxd-faults, whose `tether conformance` never exited:
// a handle dropped while its reattach was on its way (after a cut) kept the
// attachment that reattach then won, with keepalives nobody read, so the
// process stayed BUSY to every other handle and the program's loop never
// ran out of work. A dropped handle ends its attachment, even one won late.
TEST_CASE("a reattach that wins after its handle was dropped releases the attachment at once") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    // No silent channel: every reattach is real, but each Exec after the
    // cut waits 500 ms first, time for the handle to be dropped.
    auto slow_owner = std::make_shared<SilentReattachTransport>(t, 0, std::chrono::milliseconds(500));
    SilentReattachTransport& slow = *slow_owner;
    StartOptions o = Opts();
    o.argv = V("sh", "-c", "echo ready; sleep 30");
    o.reconnect = true;
    auto p = co_await Process::Start(slow, o);
    REQUIRE_MESSAGE(p.ok(), p.status());
    absl::StatusOr<std::string> ref = (*p)->Reference();
    REQUIRE(ref.ok());
    auto first = co_await (*p)->Read();
    REQUIRE(first.ok());
    REQUIRE(*first);
    slow.Cut();
    // The reattach is under way (in its Exec's delay) when the handle goes.
    for (int i = 0; i < 1000 && slow.execs_after_cut() == 0; ++i) co_await Sleep(std::chrono::milliseconds(10));
    REQUIRE_MESSAGE(slow.execs_after_cut() == 1, "the cut started no reattach within 10 s");
    REQUIRE(slow.execs_done_after_cut() == 0);
    p->reset();
    // The late reattach attaches (nobody else holds the process), then
    // must let go: its channel ends. Before the fix it stayed open, the
    // dropped handle's keepalives renewing the attachment, and another
    // handle got BUSY for a lease (30 s) and more.
    for (int i = 0; i < 1000 && slow.ended_after_cut() == 0; ++i) co_await Sleep(std::chrono::milliseconds(10));
    REQUIRE(slow.execs_done_after_cut() == 1);
    REQUIRE_MESSAGE(slow.ended_after_cut() == 1, "the late reattach's channel was still open after 10 s");
    // Another handle then attaches without BUSY (the loop waits out a BUSY
    // answered before the release reached the supervisor).
    absl::StatusOr<std::unique_ptr<Process>> q = absl::UnknownError("not tried");
    for (int i = 0; i < 20; ++i) {
      q = co_await Process::Reopen(t, *ref);
      if (ErrorCodeOf(q.status()) != ErrorCode::kBusy) break;
      co_await Sleep(std::chrono::milliseconds(250));
    }
    REQUIRE_MESSAGE(q.ok(), q.status());
    CHECK((co_await (*q)->Terminate(0)).ok());
    (void)co_await ReadAll(**q);
    auto e = co_await (*q)->Wait();
    CHECK(e.ok());
  });
  CHECK(sb.LeftoverStateDirs() == 0);
}

TEST_CASE("after a silent reattach is given up, a later attempt on a good channel continues with nothing lost") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    auto silent_owner = std::make_shared<SilentReattachTransport>(t, 1);
    SilentReattachTransport& silent = *silent_owner;
    StartOptions o = Opts();
    // About 3 s of numbered lines, across the cut and the silent attempt.
    o.argv = V("sh", "-c", "i=0; while [ $i -lt 300 ]; do i=$((i+1)); echo $i; sleep 0.01; done");
    o.reconnect = true;
    // The first attempt gets a third of it (5 s): the silent one is given
    // up and the next, on a good channel, has the 10 s left (an exec and an
    // ASan supervisor's start on 2 loaded cores fit in that).
    o.reconnect_timeout_ms = 15000;
    auto p = co_await Process::Start(silent, o);
    REQUIRE_MESSAGE(p.ok(), p.status());
    absl::StatusOr<std::string> ref = (*p)->Reference();
    REQUIRE(ref.ok());
    auto first = co_await (*p)->Read();
    REQUIRE(first.ok());
    REQUIRE(*first);
    const std::string head = (*first)->bytes;
    silent.Cut();
    using namespace asio::experimental::awaitable_operators;
    auto raced =
        co_await (ReadAll(**p, head.size()) || Sleep(std::chrono::milliseconds(o.reconnect_timeout_ms + 10000)));
    CHECK_MESSAGE(raced.index() == 0, "the output did not continue after a silent reattach");
    Output rest;
    if (raced.index() == 0) {
      rest = std::get<0>(std::move(raced));
    } else {
      silent.Release();  // (without the bound, what ends the hung attempt)
      rest = co_await ReadAll(**p, head.size());
    }
    CAPTURE(rest.status);
    CHECK(rest.status.ok());
    CHECK(head + rest.out == Seq(300));
    auto e = co_await (*p)->Wait();
    CHECK_MESSAGE(e.ok(), e.status());
    if (e.ok()) {
      CHECK(e->code == 0);
    } else {
      // (Without the bound the handle failed: a reopen takes the exit, so
      // that the supervisor does not linger.)
      auto q = co_await Process::Reopen(t, *ref);
      CHECK(q.ok());
      if (q.ok()) {
        (void)co_await ReadAll(**q);
        (void)co_await (*q)->Wait();
      }
    }
    CHECK(silent.silent_opened() == 1);
    CHECK((*p)->reconnects() >= 1);
  });
  CHECK(sb.LeftoverStateDirs() == 0);
}

// Found while chasing a hang of chaos.runloop in CI: the keepalive ended
// when it found the session closed, which it is while a reattach is under
// way, so after a reattach that outlasted one ping interval no ping was
// ever sent again, and the supervisor freed the quiet attachment a lease
// later (another reattach, or a failure without reconnect).
TEST_CASE("the keepalive goes on after a reattach that outlasted a ping: a quiet process keeps its attachment") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    // The reattach's exec takes 1.2 s: at least two pings fall due while
    // no session exists (the old one closed, the new one not made yet).
    auto slow_owner = std::make_shared<SilentReattachTransport>(t, 0, std::chrono::milliseconds(1200));
    SilentReattachTransport& slow = *slow_owner;
    StartOptions o = Opts();
    o.argv = V("sh", "-c", "echo ready; sleep 5; echo done");
    o.reconnect = true;
    o.lease_ms = 1500;  // a ping every 500 ms
    auto p = co_await Process::Start(slow, o);
    REQUIRE_MESSAGE(p.ok(), p.status());
    auto first = co_await (*p)->Read();
    REQUIRE(first.ok());
    REQUIRE(*first);
    CHECK((*first)->bytes == "ready\n");
    slow.Cut();
    // Quiet for about 4 s after the reattach: more than two leases.
    Output rest = co_await ReadAll(**p, (*first)->bytes.size());
    CAPTURE(rest.status);
    CHECK(rest.status.ok());
    CHECK(rest.out == "done\n");
    auto e = co_await (*p)->Wait();
    REQUIRE_MESSAGE(e.ok(), e.status());
    CHECK(e->code == 0);
    CHECK((*p)->reconnects() == 1);  // without pings: the lease freed it again, and again
  });
  CHECK(sb.LeftoverStateDirs() == 0);
}

// A transport whose current channel can be muted: it stays open, takes
// every write, and delivers nothing more until closed (a half-open TCP
// connection, a provider stream stuck without an error). Channels opened
// later are not muted.
class MutingTransport final : public internal::ForwardingTransport {
 public:
  explicit MutingTransport(Transport& inner) : ForwardingTransport(inner) {}
  awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(std::vector<std::string> argv) override {
    auto ch = co_await inner().Exec(std::move(argv));
    if (!ch.ok()) co_return ch.status();
    ++opened_;
    auto muting = std::make_unique<MutingChannel>(*std::move(ch), executor());
    last_ = muting.get();
    co_return std::unique_ptr<Channel>(std::move(muting));
  }
  void MuteCurrent() { last_->Mute(); }
  int opened() const { return opened_; }

 private:
  class MutingChannel final : public ForwardingChannel {
   public:
    MutingChannel(std::unique_ptr<Channel> inner, asio::any_io_executor ex)
        : ForwardingChannel(std::move(inner)),
          gate_(std::make_shared<asio::steady_timer>(ex, asio::steady_timer::time_point::max())) {}
    ~MutingChannel() override { gate_->cancel(); }
    awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf) override {
      if (muted_) {
        auto gate = gate_;
        if (!closed_) co_await gate->async_wait(asio::as_tuple(asio::use_awaitable));
        co_return absl::UnavailableError("muted channel closed");
      }
      co_return co_await inner_->ReadSome(buf);
    }
    void Close() override {
      closed_ = true;
      gate_->cancel();
      inner_->Close();
    }
    void Mute() { muted_ = true; }

   private:
    std::shared_ptr<asio::steady_timer> gate_;
    bool muted_ = false;
    bool closed_ = false;
  };

  int opened_ = 0;
  MutingChannel* last_ = nullptr;
};

TEST_CASE("an attachment that goes silent is given up and reattached, with nothing lost") {
  // Before, the handle waited on a silent channel forever: nothing on the
  // host noticed that not even the Pongs came back.
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    using namespace asio::experimental::awaitable_operators;
    auto muting_owner = std::make_shared<MutingTransport>(t);
    MutingTransport& muting = *muting_owner;
    StartOptions o = Opts();
    // About 6 s of numbered lines, most of them after the mute.
    o.argv = V("sh", "-c", "echo 0; read go; i=0; while [ $i -lt 300 ]; do i=$((i+1)); echo $i; sleep 0.02; done");
    o.stdin_pipe = true;
    o.reconnect = true;
    o.lease_ms = 1500;  // a ping every 500 ms: given up after 3 unanswered and kSilentFloor (5 s)
    auto p = co_await Process::Start(muting, o);
    REQUIRE_MESSAGE(p.ok(), p.status());
    auto first = co_await (*p)->Read();
    REQUIRE(first.ok());
    REQUIRE(*first);
    CHECK((*first)->bytes == "0\n");
    muting.MuteCurrent();
    CHECK((co_await (*p)->Write("go\n")).ok());  // writes still pass: only the way back is silent
    // Bound: the silence floor (5 s) plus a ping interval, a reattach and the
    // rest of the output; 25 s of margin for 2 loaded cores under ASan.
    auto raced = co_await (ReadAll(**p, 2) || Sleep(std::chrono::seconds(30)));
    CHECK_MESSAGE(raced.index() == 0, "the output did not continue: the silent attachment was never given up");
    if (raced.index() != 0) co_return;
    Output rest = std::get<0>(std::move(raced));
    CAPTURE(rest.status);
    CHECK(rest.status.ok());
    CHECK("0\n" + rest.out == "0\n" + Seq(300));
    auto e = co_await (*p)->Wait();
    REQUIRE_MESSAGE(e.ok(), e.status());
    CHECK(e->code == 0);
    CHECK((*p)->reconnects() == 1);
    CHECK(muting.opened() == 2);
  });
  CHECK(sb.LeftoverStateDirs() == 0);
}

TEST_CASE("without reconnect, an attachment that goes silent fails the handle with UNAVAILABLE, saying so") {
  Sandbox sb;
  sb.Run([](Transport& t) -> awaitable<void> {
    using namespace asio::experimental::awaitable_operators;
    auto muting_owner = std::make_shared<MutingTransport>(t);
    MutingTransport& muting = *muting_owner;
    StartOptions o = Opts();
    o.argv = V("sh", "-c", "echo ready; exec sleep 60");
    o.lease_ms = 1500;
    auto p = co_await Process::Start(muting, o);
    REQUIRE_MESSAGE(p.ok(), p.status());
    absl::StatusOr<std::string> ref = (*p)->Reference();
    REQUIRE(ref.ok());
    auto first = co_await (*p)->Read();
    REQUIRE(first.ok());
    REQUIRE(*first);
    muting.MuteCurrent();
    const auto t0 = std::chrono::steady_clock::now();
    auto raced = co_await ((*p)->Read() || Sleep(std::chrono::seconds(30)));
    const auto took = std::chrono::steady_clock::now() - t0;
    CAPTURE(std::chrono::duration_cast<std::chrono::milliseconds>(took).count());
    CHECK_MESSAGE(raced.index() == 0, "the Read did not end on a silent attachment");
    if (raced.index() == 0) {
      const absl::StatusOr<std::optional<OutputChunk>>& r = std::get<0>(raced);
      CAPTURE(r.status());
      CHECK(ErrorCodeOf(r.status()) == ErrorCode::kUnavailable);
      CHECK(std::string(r.status().message()).find("went silent") != std::string::npos);
      CHECK(took >= std::chrono::seconds(5));  // kSilentFloor: never sooner
    }
    // The process runs on: a reopen through a good channel ends it, once
    // the supervisor has freed the silent attachment (BUSY until then: at
    // most a lease without requests).
    auto q = co_await Process::Reopen(t, *ref);
    for (int i = 0; i < 100 && ErrorCodeOf(q.status()) == ErrorCode::kBusy; ++i) {
      co_await Sleep(std::chrono::milliseconds(100));
      q = co_await Process::Reopen(t, *ref);
    }
    REQUIRE_MESSAGE(q.ok(), q.status());
    CHECK((co_await (*q)->Terminate(100)).ok());
    (void)co_await ReadAll(**q);
    auto qe = co_await (*q)->Wait();
    REQUIRE(qe.ok());
    CHECK(qe->signal == SIGTERM);
  });
  CHECK(sb.LeftoverStateDirs() == 0);
}

}  // namespace
}  // namespace tether
