// Shared by the process API tests: a private local sandbox, readers and
// writers that check offsets and limits, and misbehaving transports.
#pragma once

#include <doctest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <thread>

#include "tether/errors.h"
#include "tether/local_transport.h"
#include "host/transports/forwarding_transport.h"
#include "tether/process.h"

namespace tether::testing {

namespace asio = boost::asio;
using asio::awaitable;


// A private local sandbox per test; checks that nothing is left behind.
class Sandbox {
 public:
  Sandbox() {
    char tmpl[] = "/tmp/tether-host-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    root_ = tmpl;
  }
  ~Sandbox() {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  const std::string& root() const { return root_; }

  // Runs `body` with a fresh transport until every coroutine (including the
  // process handles finishing in the background) is done.
  void Run(std::function<awaitable<void>(Transport&)> body) {
    asio::io_context io;
    absl::StatusOr<std::shared_ptr<Transport>> t = MakeLocalTransport(io.get_executor(), {root_});
    REQUIRE(t.ok());
    bool finished = false;
    asio::co_spawn(io, body(**t), [&](std::exception_ptr e) {
      finished = true;
      if (e) std::rethrow_exception(e);
    });
    io.run();
    CHECK(finished);
  }

  // Private state of finished processes is removed.
  // The supervisor removes them on its own once the exit is acknowledged
  // (or its linger ends), which may trail the host's last coroutine: wait
  // up to `patience` for none to be left, not a fixed time. Cancellation
  // markers are not counted (Markers()): they stay an hour on purpose.
  std::size_t LeftoverStateDirs(std::chrono::milliseconds patience = std::chrono::seconds(10)) const {
    const auto deadline = std::chrono::steady_clock::now() + patience;
    while (true) {
      const std::size_t n = Entries(false);
      if (n == 0 || std::chrono::steady_clock::now() >= deadline) return n;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  // Cancellation markers (<launch id>.cancel) in the state root.
  std::size_t Markers() const { return Entries(true); }

 private:
  std::size_t Entries(bool markers) const {
    std::error_code ec;
    std::size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator(root_ + "/run", ec)) {
      const std::string name = e.path().filename().string();
      const bool marker = name.size() > 7 && name.compare(name.size() - 7, 7, ".cancel") == 0 &&
                          e.is_regular_file(ec);
      n += marker == markers;
    }
    return n;
  }

  std::string root_;
};

struct Output {
  std::string out, err;
  absl::Status status;
};

// Reads to the end of output; `stdout_from` and `stderr_from` are what the
// caller already read.
inline awaitable<Output> ReadAll(Process& p, std::uint64_t stdout_from = 0, std::uint64_t stderr_from = 0) {
  Output o;
  std::uint64_t next[4] = {0, stdout_from, stderr_from, stdout_from};
  while (true) {
    absl::StatusOr<std::optional<OutputChunk>> c = co_await p.Read();
    if (!c.ok()) {
      o.status = c.status();
      break;
    }
    if (!*c) break;
    const int s = static_cast<int>((*c)->stream);
    CHECK((*c)->offset == next[s]);  // in order, no gap, no duplicate
    CHECK((*c)->bytes.size() <= kMaxChunkBytes);
    CHECK(!(*c)->bytes.empty());
    next[s] += (*c)->bytes.size();
    ((*c)->stream == StreamId::kStderr ? o.err : o.out) += (*c)->bytes;
  }
  co_return o;
}

// g++ 12 rejects braced lists of strings inside coroutines ("array used as
// initializer"), so argument lists are built by this ordinary function.
template <typename... A>
inline std::vector<std::string> V(A&&... a) {
  return std::vector<std::string>{std::string(std::forward<A>(a))...};
}

inline std::vector<std::pair<std::string, std::string>> E(std::string k, std::string v) {
  return {{std::move(k), std::move(v)}};
}

// Exact bytes, whole output: what most tests check.
inline StartOptions Opts() {
  StartOptions o;
  o.output_mode = OutputMode::kStream;
  o.output_format = OutputFormat::kBytes;
  return o;
}

inline awaitable<absl::StatusOr<std::unique_ptr<Process>>> Start(Transport& t, std::vector<std::string> argv,
                                                          bool stdin_pipe = false) {
  StartOptions o = Opts();
  o.argv = std::move(argv);
  o.stdin_pipe = stdin_pipe;
  co_return co_await Process::Start(t, std::move(o));
}

// One start of `true` to its end: the sandbox has its supervisor after it.
inline awaitable<void> WarmUp(Transport& t) {
  absl::StatusOr<std::unique_ptr<Process>> p = co_await Start(t, V("true"));
  REQUIRE_MESSAGE(p.ok(), p.status());
  absl::StatusOr<ExitStatus> e = co_await (*p)->Wait();
  REQUIRE(e.ok());
}

inline std::string AllByteValues(std::size_t repeat) {
  std::string s;
  for (std::size_t r = 0; r < repeat; ++r) {
    for (int b = 0; b < 256; ++b) s.push_back(static_cast<char>(b));
  }
  return s;
}

inline std::string RandomBytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

inline awaitable<absl::Status> WriteAll(Process& p, std::string_view data) {
  while (!data.empty()) {
    const std::size_t n = std::min(data.size(), kMaxWriteBytes);
    if (absl::Status st = co_await p.Write(data.substr(0, n)); !st.ok()) co_return st;
    data.remove_prefix(n);
  }
  co_return co_await p.CloseStdin();
}

inline std::string Seq(int n) {
  std::string s;
  for (int i = 1; i <= n; ++i) s += std::to_string(i) + "\n";
  return s;
}


// A channel that forwards reads, writes and closing to `inner`: the base of
// the misbehaving channels in these tests, which override what they
// change. The optional parts of the Channel contract (WaitReadable,
// AsyncClose, exit_code) keep their defaults, so every byte goes through
// ReadSome. Cut() closes the inner channel under the host (a connection
// lost).
class ForwardingChannel : public Channel {
 public:
  explicit ForwardingChannel(std::unique_ptr<Channel> inner) : inner_(std::move(inner)) {}
  awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf) override {
    co_return co_await inner_->ReadSome(buf);
  }
  awaitable<absl::Status> Write(std::string_view bytes) override { co_return co_await inner_->Write(bytes); }
  void CloseWrite() override { inner_->CloseWrite(); }
  void Close() override { inner_->Close(); }
  std::string Diagnostics() const override { return inner_->Diagnostics(); }
  void Cut() { inner_->Close(); }

 protected:
  std::unique_ptr<Channel> inner_;
};

// A transport whose channels hold every write back for `delay`: a slow
// native channel, for setup timeouts.
class SlowTransport final : public internal::ForwardingTransport {
 public:
  SlowTransport(Transport& inner, std::chrono::milliseconds delay) : ForwardingTransport(inner), delay_(delay) {}
  awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(std::vector<std::string> argv) override {
    auto ch = co_await inner().Exec(std::move(argv));
    if (!ch.ok()) co_return ch.status();
    co_return std::unique_ptr<Channel>(new SlowChannel(*std::move(ch), delay_, landed_));
  }
  // Channels whose late deliveries were all made and whose far end then
  // ended (a late launch that ran to its end).
  int landed() const { return *landed_; }

 private:
  class SlowChannel final : public Channel {
   public:
    SlowChannel(std::unique_ptr<Channel> inner, std::chrono::milliseconds delay, std::shared_ptr<int> landed)
        : inner_(std::move(inner)), late_(std::make_shared<Late>(Late{inner_, 0, std::move(landed)})), delay_(delay) {}
    awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf) override {
      co_return co_await inner_->ReadSome(buf);
    }
    // Accepts at once and delivers after the delay, even when the host has
    // given up by then: what a slow native call does. The last delivery
    // also reads the far end's answer to EOF, so that it can finish.
    awaitable<absl::Status> Write(std::string_view bytes) override {
      auto ex = co_await asio::this_coro::executor;
      ++late_->pending;
      asio::co_spawn(
          ex,
          [late = late_, copy = std::string(bytes), delay = delay_]() -> awaitable<void> {
            asio::steady_timer t(co_await asio::this_coro::executor, delay);
            co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
            co_await late->inner->Write(copy);
            if (--late->pending > 0) co_return;
            late->inner->CloseWrite();
            char buf[4096];
            while (true) {
              auto n = co_await late->inner->ReadSome({buf, sizeof buf});
              if (!n.ok() || *n == 0) break;
            }
            ++*late->landed;
          },
          asio::detached);
      co_return absl::OkStatus();
    }
    void CloseWrite() override { inner_->CloseWrite(); }
    void Close() override {}  // the late delivery still happens; the inner channel ends with it
    std::string Diagnostics() const override { return inner_->Diagnostics(); }

   private:
    struct Late {
      std::shared_ptr<Channel> inner;
      int pending;  // deliveries not yet made
      std::shared_ptr<int> landed;
    };
    std::shared_ptr<Channel> inner_;
    std::shared_ptr<Late> late_;
    std::chrono::milliseconds delay_;
  };

  std::chrono::milliseconds delay_;
  std::shared_ptr<int> landed_ = std::make_shared<int>(0);
};

// A transport whose channels can start swallowing writes (a black hole on
// the way to the supervisor) and be cut: a connection lost mid-request.
class LossyTransport final : public internal::ForwardingTransport {
 public:
  explicit LossyTransport(Transport& inner) : ForwardingTransport(inner) {}
  awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(std::vector<std::string> argv) override {
    auto ch = co_await inner().Exec(std::move(argv));
    if (!ch.ok()) co_return ch.status();
    auto lossy = std::make_unique<LossyChannel>(*std::move(ch), &drop_);
    last_ = lossy.get();
    co_return std::unique_ptr<Channel>(std::move(lossy));
  }
  void StartDropping() { drop_ = true; }
  void StopDropping() { drop_ = false; }
  void Cut() { last_->Cut(); }

 private:
  class LossyChannel final : public ForwardingChannel {
   public:
    LossyChannel(std::unique_ptr<Channel> inner, const bool* drop) : ForwardingChannel(std::move(inner)), drop_(drop) {}
    awaitable<absl::Status> Write(std::string_view bytes) override {
      if (*drop_) co_return absl::OkStatus();
      co_return co_await inner_->Write(bytes);
    }

   private:
    const bool* drop_;
  };

  bool drop_ = false;
  LossyChannel* last_ = nullptr;
};

// Sleeps on the current executor.
inline awaitable<void> Sleep(std::chrono::milliseconds d) {
  asio::steady_timer t(co_await asio::this_coro::executor, d);
  co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
}

// Waits (polling every 5 ms, at most `limit`) until `path` exists: a
// child's marker that it got somewhere, instead of a fixed sleep that load
// outlasts. True if it appeared.
inline awaitable<bool> AwaitFile(const std::string& path,
                                 std::chrono::milliseconds limit = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!std::filesystem::exists(path)) {
    if (std::chrono::steady_clock::now() >= deadline) co_return false;
    co_await Sleep(std::chrono::milliseconds(5));
  }
  co_return true;
}

// Kills a child (and its group) and the daemon that is its parent: for
// tests that cut a process off from every host on purpose.
inline void KillStray(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const std::size_t close = line.rfind(')');
  const pid_t daemon = close == std::string::npos ? 0 : std::atoi(line.c_str() + close + 4);
  ::kill(-pid, SIGKILL);
  if (daemon > 1) ::kill(daemon, SIGKILL);
}

}  // namespace tether::testing
