// A transport whose "supervisor" is a script: it answers the host's Hello
// with a valid Welcome and then sends whatever bytes a test (or the message
// handler fuzzer) chooses, to show that a compromised sandbox cannot make the
// real host Session/Process allocate beyond its limits, crash or hang.
//
//   LyingTransport t(ex, [](std::uint64_t hello_id) { return bytes; }, LyingTransport::kEnd);
//   auto p = co_await Process::Start(t, opts);
//
// After the script the channel ends (kEnd), stays silent until closed
// (kStall), or repeats `endless` forever (kEndless), yielding to the
// executor between reads as a real channel does.
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "tether/transport.h"
#include "protocol/envelope.h"
#include "protocol/frame.h"

namespace tether::testing {

// Frames for scripts.
inline std::string FrameOf(const wire::Envelope& env) { return protocol::EncodeEnvelope(env); }

// The launch id of the last Launch a lying channel saw: its Welcome names the
// directory a real supervisor would have made for it.
inline std::string g_lying_launch_id;

inline wire::Envelope WelcomeFor(std::uint64_t hello_id, std::uint64_t generation = 1) {
  wire::Envelope env;
  env.set_request_id(hello_id);
  env.set_generation(generation);
  wire::Welcome* w = env.mutable_welcome();
  w->set_version(1);
  w->set_generation(generation);
  w->set_stdin_window_bytes(256 * 1024);
  w->mutable_state()->set_phase(wire::ProcessState::PHASE_RUNNING);
  w->mutable_state()->set_pid(4242);
  w->set_state_dir("/nonexistent/tether-lying/run/" + g_lying_launch_id);
  w->set_supervisor_path("/nonexistent/tether-lying/bin/tether-supervisor-lying");
  return env;
}

inline wire::Envelope OutputAt(std::uint64_t offset, std::string data, bool eof = false,
                               wire::Stream stream = wire::STREAM_STDOUT, std::uint64_t generation = 1) {
  wire::Envelope env;
  env.set_generation(generation);
  wire::Output* o = env.mutable_output();
  o->set_stream(stream);
  o->set_offset(offset);
  o->set_data(std::move(data));
  o->set_eof(eof);
  return env;
}

class LyingTransport final : public Transport {
 public:
  enum After { kEnd, kStall, kEndless };
  // `script` gets the Hello's request id; its result (empty: no Welcome at
  // all) is what the host reads first.
  using Script = std::function<std::string(std::uint64_t hello_id)>;

  LyingTransport(boost::asio::any_io_executor ex, Script script, After after, std::string endless = {})
      : ex_(std::move(ex)), script_(std::move(script)), after_(after), endless_(std::move(endless)) {}

  std::string_view name() const override { return "lying"; }
  std::string sandbox_id() const override { return "lying-sandbox"; }
  boost::asio::any_io_executor executor() const override { return ex_; }
  boost::asio::awaitable<absl::StatusOr<SandboxInfo>> Probe() override {
    co_return SandboxInfo{"x86_64", "/nonexistent/tether-lying/run", "/nonexistent/tether-lying/bin"};
  }
  boost::asio::awaitable<absl::Status> PutFile(std::string, std::string_view, int) override {
    co_return absl::OkStatus();
  }
  boost::asio::awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(std::vector<std::string>) override {
    ++execs_;
    co_return std::unique_ptr<Channel>(new LyingChannel(ex_, this));
  }
  // Bytes the host wrote, over all channels.
  std::uint64_t host_bytes() const { return host_bytes_; }
  int execs() const { return execs_; }

 private:
  class LyingChannel final : public Channel {
   public:
    LyingChannel(boost::asio::any_io_executor ex, LyingTransport* t) : t_(t), stall_(ex) {}
    boost::asio::awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf) override {
      // A real channel completes through the executor: never starve it.
      co_await boost::asio::post(co_await boost::asio::this_coro::executor, boost::asio::use_awaitable);
      while (!closed_ && head_ == out_.size()) {
        out_.clear();
        head_ = 0;
        if (!answered_) {
          // Until the Hello arrives there is nothing to say.
          stall_.expires_after(std::chrono::hours(1));
          co_await stall_.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
          continue;
        }
        if (t_->after_ == kEndless) {
          out_ = t_->endless_;
        } else if (t_->after_ == kStall) {
          stall_.expires_after(std::chrono::hours(1));
          co_await stall_.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
        } else {
          co_return std::size_t{0};
        }
      }
      if (closed_) co_return absl::UnavailableError("closed");
      const std::size_t n = std::min(buf.size(), out_.size() - head_);
      std::memcpy(buf.data(), out_.data() + head_, n);
      head_ += n;
      co_return n;
    }
    boost::asio::awaitable<absl::Status> Write(std::string_view bytes) override {
      if (closed_) co_return absl::UnavailableError("closed");
      t_->host_bytes_ += bytes.size();
      wire::Envelope env;
      while (!answered_) {
        absl::StatusOr<bool> got = decoder_.Next(&bytes, &env);
        if (!got.ok() || !*got) break;
        if (env.has_launch()) g_lying_launch_id = env.launch().launch_id();
        if (env.has_hello()) {
          answered_ = true;
          out_ = t_->script_(env.request_id());
          stall_.cancel();
        }
      }
      co_return absl::OkStatus();
    }
    void CloseWrite() override {}
    void Close() override {
      closed_ = true;
      stall_.cancel();
    }
    std::string Diagnostics() const override { return "lying supervisor"; }

   private:
    LyingTransport* t_;
    boost::asio::steady_timer stall_;
    protocol::EnvelopeDecoder decoder_;
    bool answered_ = false;
    bool closed_ = false;
    std::string out_;
    std::size_t head_ = 0;
  };

  boost::asio::any_io_executor ex_;
  Script script_;
  After after_;
  std::string endless_;
  std::uint64_t host_bytes_ = 0;
  int execs_ = 0;
};

}  // namespace tether::testing
