// Crashes: kill -9 the bridge, the supervisor daemon or the child at a random
// moment of a process that reads stdin and streams it back.
//
//   crash_test [--trials N] [--first S]      trial S..S+N-1 (victim = trial % 3)
//   crash_test --trial S                     replay one trial
//
// The host reports only what it can prove:
//   bridge  the handle reattaches (reconnect) and every byte arrives exactly
//           once with the true exit code;
//   child   the exit is the supervisor's record (SIGKILL), output is exactly
//           the bytes written, in order, a prefix of the input; a Reopen
//           from a reference taken before the kill reattaches too;
//   daemon  UNAVAILABLE from Wait (never an exit code), status unknown, and
//           a Reopen finds nothing (NOT_FOUND) instead of guessing.
// After every trial whose daemon survived, the exit acknowledged and the
// daemon gone, no private file or process is left. (A SIGKILLed daemon cannot
// remove its directory; those are counted and reported.)
// Every trial must kill: stdin stays open until the kill was tried, so the
// victim is still running then, and a victim that was not found or not
// killed fails the trial as a broken setup (it would otherwise pass as a
// plain run).
#include <stdlib.h>
#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tether/errors.h"
#include "host/transports/forwarding_transport.h"
#include "tether/local_transport.h"
#include "tether/process.h"
#include "tests/host/proc_util.h"

namespace {

namespace asio = boost::asio;
using asio::awaitable;
using tether::ErrorCode;
using tether::ErrorCodeOf;
using namespace tether::testing;

enum Victim { kBridge, kDaemon, kChild };
const char* const kVictimNames[] = {"bridge", "daemon", "child"};

struct Trial {
  std::uint64_t seed;
  Victim victim;
  std::string payload, out;
  std::string failure;
  bool killed = false;
  bool kill_tried = false;  // the Killer is done (killed or not)
  std::string kill_note;    // why the kill did not land
  absl::Status write_status, read_status;
};

void Broken(Trial& t, std::string what) {
  if (t.failure.empty()) t.failure = std::move(what);
}

std::string CodeName(const absl::Status& st) { return std::string(tether::ErrorCodeName(ErrorCodeOf(st))); }

awaitable<void> Sleep(std::chrono::milliseconds d) {
  asio::steady_timer t(co_await asio::this_coro::executor, d);
  co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
}

awaitable<void> Writer(tether::Process& p, Trial& t) {
  std::mt19937_64 rng(t.seed + 99);
  std::string_view data = t.payload;
  while (!data.empty()) {
    const std::size_t n = std::min<std::size_t>(data.size(), 1 + rng() % 4096);
    t.write_status = co_await p.Write(data.substr(0, n));
    if (!t.write_status.ok()) co_return;
    data.remove_prefix(n);
    co_await Sleep(std::chrono::milliseconds(1));  // a paced writer: the kill lands mid-stream
  }
  // The child (cat) runs until its stdin closes: keep it open until the
  // kill was tried, so there is always a victim to kill.
  while (!t.kill_tried) co_await Sleep(std::chrono::milliseconds(1));
  t.write_status = co_await p.CloseStdin();
}

awaitable<void> Reader(tether::Process& p, Trial& t) {
  while (true) {
    auto c = co_await p.Read();
    if (!c.ok()) {
      t.read_status = c.status();
      co_return;
    }
    if (!*c) co_return;
    if ((*c)->stream != tether::StreamId::kStdout) continue;
    if ((*c)->offset != t.out.size()) Broken(t, absl::StrCat("chunk at ", (*c)->offset, " after ", t.out.size()));
    t.out += (*c)->bytes;
    if (t.out.size() > t.payload.size() || t.payload.compare(0, t.out.size(), t.out) != 0) {
      Broken(t, absl::StrCat("wrong or duplicate bytes before offset ", t.out.size()));
    }
  }
}

// Kills the victim after a random moment; the bridge is the supervisor
// process that is our own child (the channel's command).
awaitable<void> Killer(tether::Process& p, Trial& t, const std::string& bin) {
  std::mt19937_64 rng(t.seed);
  co_await Sleep(std::chrono::milliseconds(rng() % 25));
  pid_t victim = 0;
  const std::vector<pid_t> supervisors = PidsRunningFrom(bin);
  if (t.victim == kChild) {
    victim = p.pid();
  } else if (t.victim == kDaemon) {
    victim = ParentOf(p.pid());
    if (std::find(supervisors.begin(), supervisors.end(), victim) == supervisors.end()) {
      t.kill_note = absl::StrCat("the child's parent ", victim, " is not a supervisor under ", bin);
      victim = 0;
    }
  } else {
    for (pid_t pid : supervisors) {
      if (ParentOf(pid) == ::getpid()) victim = pid;
    }
  }
  if (victim <= 1) {
    if (t.kill_note.empty()) t.kill_note = absl::StrCat("no ", kVictimNames[t.victim], " process found");
  } else if (::kill(victim, SIGKILL) != 0) {
    t.kill_note = absl::StrCat("kill(", victim, ", SIGKILL): ", std::strerror(errno));
  } else {
    t.killed = true;
  }
  t.kill_tried = true;
}

awaitable<void> RunTrial(tether::Transport& local, Trial& t, const std::string& bin, int* leftover_dirs) {
  using namespace asio::experimental::awaitable_operators;
  std::mt19937_64 rng(t.seed);
  t.payload.resize(1 + rng() % (64 * 1024));
  for (char& c : t.payload) c = static_cast<char>(rng());
  tether::StartOptions o;
  o.output_mode = tether::OutputMode::kStream;
  o.output_format = tether::OutputFormat::kBytes;
  o.argv.push_back("sh");
  o.argv.push_back("-c");
  o.argv.push_back("cat; exit 5");
  o.stdin_pipe = true;
  o.reconnect = t.victim == kBridge;
  o.linger_ms = 2000;
  o.env.emplace_back("TETHER_CRASH_TRIAL", absl::StrCat(::getpid(), "-", t.seed));
  auto started = co_await tether::Process::Start(local, std::move(o));
  if (!started.ok()) {
    Broken(t, "start: " + started.status().ToString());
    co_return;
  }
  std::unique_ptr<tether::Process> p = *std::move(started);
  // A reference to reopen by (taken while no input is in flight).
  const std::string ref = p->Reference().value_or("");
  co_await (Writer(*p, t) && Reader(*p, t) && Killer(*p, t, bin));
  auto exit = co_await p->Wait();
  switch (t.victim) {
    case kBridge:
      if (!t.write_status.ok() || !t.read_status.ok()) {
        Broken(t, absl::StrCat("bridge killed: write ", CodeName(t.write_status), ", read ", CodeName(t.read_status),
                               " (write: ", t.write_status.message(), "; read: ", t.read_status.message(), ")"));
      }
      if (!exit.ok() || exit->code != 5) Broken(t, "bridge killed: no true exit code");
      if (t.out != t.payload) Broken(t, "bridge killed: output is not every byte exactly once");
      break;
    case kChild:
      if (exit.ok()) {
        // The supervisor's record: SIGKILL (its stdin was open until the
        // kill, so it cannot have finished first).
        if (exit->signal != SIGKILL) Broken(t, "child killed: wrong exit");
      } else {
        Broken(t, "child killed: wait " + exit.status().ToString());
      }
      break;
    case kDaemon: {
      // The child's stdin was open until the kill, so no exit was recorded
      // before it: an exit code now is a guess.
      if (exit.ok() && t.killed) Broken(t, "daemon killed: an exit that was not observed");
      if (!exit.ok() && ErrorCodeOf(exit.status()) != ErrorCode::kUnavailable) {
        Broken(t, "daemon killed: wait " + exit.status().ToString());
      }
      if (!exit.ok()) {
        auto st = co_await p->Status();
        if (!st.ok() || st->state != tether::ProcessStatus::State::kUnknown) Broken(t, "daemon killed: status not unknown");
        if (!ref.empty()) {
          auto again = co_await tether::Process::Reopen(local, ref);
          if (again.ok() || ErrorCodeOf(again.status()) != ErrorCode::kNotFound) {
            Broken(t, "daemon killed: reopen did not report the process gone: " + again.status().ToString());
          }
        }
      }
      break;
    }
  }
  if (t.victim == kChild && !ref.empty() && exit.ok()) {
    // The record lingers until acknowledged; this handle acknowledged it, so
    // a reopen now finds nothing, or (racing the cleanup) the same exit.
    auto again = co_await tether::Process::Reopen(local, ref);
    if (again.ok()) {
      auto e2 = co_await (*again)->Wait();
      if (e2.ok() && (e2->signal != exit->signal || e2->code != exit->code)) Broken(t, "reopen: a different exit");
    } else if (ErrorCodeOf(again.status()) != ErrorCode::kNotFound &&
               ErrorCodeOf(again.status()) != ErrorCode::kBusy) {  // (our acknowledging attachment not yet freed)
      Broken(t, "reopen after exit: " + again.status().ToString());
    }
  }
  (void)leftover_dirs;
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t first = 1, count = 90;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::uint64_t v = std::strtoull(argv[i + 1], nullptr, 10);
    if (flag == "--trials") {
      count = v;
    } else if (flag == "--first") {
      first = v;
    } else if (flag == "--trial") {
      first = v, count = 1;
    } else {
      std::fprintf(stderr, "usage: crash_test [--trials N] [--first S] | --trial S\n");
      return 2;
    }
  }
  char tmpl[] = "/tmp/tether-crash-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return 2;
  const std::string root = tmpl, bin = root + "/bin", run = root + "/run";
  int failed = 0, killed[3] = {0, 0, 0}, not_killed = 0, stale_dirs = 0;
  std::uint64_t bytes = 0;
  for (std::uint64_t seed = first; seed < first + count; ++seed) {
    Trial t;
    t.seed = seed;
    t.victim = static_cast<Victim>(seed % 3);
    int leftover = 0;
    const std::string marker = absl::StrCat("TETHER_CRASH_TRIAL=", ::getpid(), "-", seed);
    {
      asio::io_context io;
      auto local = tether::MakeLocalTransport(io.get_executor(), tether::LocalOptions{root});
      if (!local.ok()) return 2;
      // The local provider connects to the daemon directly; a decorator
      // does not (it has only Exec), so its channels run through a bridge
      // process: every bridge trial, and every other daemon or child trial.
      auto bridged_owner = std::make_shared<tether::internal::ForwardingTransport>(**local);
      tether::internal::ForwardingTransport& bridged = *bridged_owner;
      const bool via_bridge = t.victim == kBridge || (seed / 3) % 2 == 1;
      tether::Transport& transport = via_bridge ? static_cast<tether::Transport&>(bridged) : **local;
      asio::co_spawn(io, RunTrial(transport, t, bin, &leftover), [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
      });
      io.run();
    }
    // After the exit and its acknowledgement the daemon removes its private
    // directory and ends; give it a moment, then nothing may remain.
    bool clean = false;
    for (int i = 0; i < 200 && !clean; ++i) {
      std::error_code ec;
      int dirs = 0;
      for (const auto& e : std::filesystem::directory_iterator(run, ec)) dirs += e.is_directory() ? 1 : 0;
      const int expected_stale = stale_dirs + (t.victim == kDaemon && t.killed ? 1 : 0);
      clean = PidsRunningFrom(bin).empty() && PidsWithEnv(marker).empty() && dirs <= expected_stale;
      if (!clean) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (t.victim == kDaemon && t.killed) {
      // Its directory stays (nobody is left to remove it); its child must not.
      std::error_code ec;
      int dirs = 0;
      for (const auto& e : std::filesystem::directory_iterator(run, ec)) dirs += e.is_directory() ? 1 : 0;
      stale_dirs = dirs;
      clean = PidsRunningFrom(bin).empty() && PidsWithEnv(marker).empty();
    }
    if (!clean) Broken(t, "private files or processes left behind after exit and linger");
    // A trial that killed nothing tested nothing: a broken setup, not a pass.
    if (!t.killed) {
      ++not_killed;
      t.failure = absl::StrCat("setup: kill -9 of the ", kVictimNames[t.victim], " did not land (",
                               t.kill_tried ? t.kill_note : "the killer never ran: Start failed?", ")",
                               t.failure.empty() ? "" : "; also: ", t.failure);
    }
    killed[t.victim] += t.killed ? 1 : 0;
    bytes += t.out.size();
    if (!t.failure.empty()) {
      ++failed;
      std::printf("FAIL trial %llu (kill %s): %s\n  replay: crash_test --trial %llu\n",
                  static_cast<unsigned long long>(seed), kVictimNames[t.victim], t.failure.c_str(),
                  static_cast<unsigned long long>(seed));
      std::fflush(stdout);
    }
  }
  std::filesystem::remove_all(root);
  std::printf("crash: %llu trials, kill -9 landed on %d bridges, %d daemons, %d children (%d trials without a "
              "kill); %llu output bytes checked; %d directories of killed daemons left; %d FAILED\n",
              static_cast<unsigned long long>(count), killed[kBridge], killed[kDaemon], killed[kChild], not_killed,
              static_cast<unsigned long long>(bytes), stale_dirs, failed);
  return failed ? 1 : 0;
}
