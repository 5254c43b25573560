// A deliberately hostile text channel over a real transport, for the text
// tunnel: it behaves like the worst provider log/exec APIs at once.
//
// Towards the host it prefixes lines with provider markers, adds blank lines
// and shell noise, echoes every line the host writes, drops NUL bytes, and
// every 0.3-1.5 s "reconnects its log stream": it replays everything the
// connection delivered so far from byte 0 before going on (as log APIs that
// resume from the start do). Towards the sandbox it adds blank lines and
// drops NUL bytes. It cuts each connection after a random 1-3 s. Everything
// is drawn from one seeded generator, so a failing seed can be replayed.
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <memory>
#include <chrono>
#include <cstring>
#include <random>
#include <string>

#include "host/transports/forwarding_transport.h"
#include "tether/transport.h"

namespace tether::testing {

class HostileTransport final : public internal::ForwardingTransport {
 public:
  struct Stats {
    std::uint64_t connections = 0, cuts = 0, replayed_bytes = 0, noise_lines = 0, echoed_lines = 0;
  };

  // `mode`: kText, or kExchange (one-shot commands: the same damage to
  // each command's output, and cuts that lose a poll's answer).
  HostileTransport(Transport& inner, std::uint64_t seed, TunnelMode mode = TunnelMode::kText)
      : ForwardingTransport(inner), mode_(mode), shared_(std::make_shared<Shared>()) {
    shared_->rng.seed(seed);
  }
  ChannelCapabilities capabilities() const override { return CapabilitiesOf(mode_); }
  boost::asio::awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(std::vector<std::string> argv) override {
    // Exchange polls may also be cut at once (their answer lost): a poll is
    // made again safely. Setup commands are cut only after 1-3 s, as
    // everything else.
    const bool poll = argv.size() > 1 && argv[1] == "exchange";
    auto ch = co_await inner().Exec(std::move(argv));
    if (!ch.ok()) co_return ch.status();
    ++shared_->stats.connections;
    co_return std::unique_ptr<Channel>(new HostileChannel(*std::move(ch), shared_, inner().executor(), poll));
  }
  const Stats& stats() const { return shared_->stats; }

 private:
  struct Shared {
    std::mt19937_64 rng;
    Stats stats;
    int Roll(int n) { return static_cast<int>(rng() % static_cast<std::uint64_t>(n)); }
  };
  static constexpr std::size_t kMaxHistory = 16 << 20;  // per connection

  class HostileChannel final : public Channel {
   public:
    HostileChannel(std::unique_ptr<Channel> inner, std::shared_ptr<Shared> shared, boost::asio::any_io_executor ex,
                   bool poll)
        : inner_(std::move(inner)), shared_(std::move(shared)), cut_(std::make_shared<boost::asio::steady_timer>(ex)) {
      ScheduleReplay();
      cut_->expires_after(std::chrono::milliseconds(
          poll && shared_->Roll(8) == 0 ? shared_->Roll(20) : 1000 + shared_->Roll(2000)));
      Channel* raw = inner_.get();
      auto alive = alive_;
      auto shared_stats = shared_;
      cut_->async_wait([raw, alive, shared_stats](boost::system::error_code ec) {
        if (ec || !*alive) return;
        ++shared_stats->stats.cuts;
        raw->Close();
      });
    }
    ~HostileChannel() override {
      *alive_ = false;
      cut_->cancel();
    }

    boost::asio::awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf) override {
      if (std::chrono::steady_clock::now() >= next_replay_ && !history_.empty()) {
        // The log stream "reconnected": everything again, from byte 0.
        out_.append(history_);
        shared_->stats.replayed_bytes += history_.size();
        ScheduleReplay();
      }
      while (out_head_ == out_.size()) {
        out_.clear();
        out_head_ = 0;
        char tmp[16384];
        absl::StatusOr<std::size_t> n = co_await inner_->ReadSome({tmp, sizeof tmp});
        if (!n.ok() || *n == 0) {
          if (!partial_.empty()) Emit(std::exchange(partial_, std::string()) + "\n");
          if (out_.empty()) co_return n;
          break;
        }
        partial_.append(tmp, *n);
        std::size_t nl;
        while ((nl = partial_.find('\n')) != std::string::npos) {
          std::string line = partial_.substr(0, nl + 1);
          partial_.erase(0, nl + 1);
          Mangle(std::move(line));
        }
      }
      const std::size_t take = std::min(buf.size(), out_.size() - out_head_);
      std::memcpy(buf.data(), out_.data() + out_head_, take);
      out_head_ += take;
      co_return take;
    }

    boost::asio::awaitable<absl::Status> Write(std::string_view bytes) override {
      std::string sent;
      for (char c : bytes) {
        if (c == '\0') continue;  // NUL dropped
        sent.push_back(c);
        if (c == '\n') {
          echo_.append(line_ + "\n");  // echoed back on the output side
          line_.clear();
          ++shared_->stats.echoed_lines;
          if (shared_->Roll(4) == 0) sent.push_back('\n');  // an appended newline
        } else {
          line_.push_back(c);
        }
      }
      co_return co_await inner_->Write(sent);
    }
    void CloseWrite() override { inner_->CloseWrite(); }
    void Close() override { inner_->Close(); }
    std::string Diagnostics() const override { return inner_->Diagnostics(); }

   private:
    void ScheduleReplay() {
      next_replay_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(300 + shared_->Roll(1200));
    }
    void Emit(std::string text) {
      std::string kept;
      for (char c : text) {
        if (c != '\0') kept.push_back(c);
      }
      out_.append(kept);
      if (history_.size() < kMaxHistory) history_.append(kept);
    }
    void Mangle(std::string line) {
      if (!echo_.empty() && shared_->Roll(2) == 0) Emit(std::exchange(echo_, std::string()));
      switch (shared_->Roll(6)) {
        case 0: Emit("[stdout] " + line); break;          // a provider's marker
        case 1: Emit("\n" + line); break;                  // a blank line first
        case 2:
          Emit("bash: warning: setlocale: LC_ALL: cannot change locale\n");  // noise
          ++shared_->stats.noise_lines;
          Emit(line);
          break;
        default: Emit(line);
      }
    }

    std::unique_ptr<Channel> inner_;
    std::shared_ptr<Shared> shared_;
    std::shared_ptr<boost::asio::steady_timer> cut_;
    std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
    std::string out_, partial_, echo_, line_, history_;
    std::chrono::steady_clock::time_point next_replay_;
    std::size_t out_head_ = 0;
  };

  TunnelMode mode_;
  std::shared_ptr<Shared> shared_;
};

}  // namespace tether::testing
