// A chaos channel over a real transport: it cuts, delays, duplicates,
// truncates and corrupts the native channel's bytes at random points, in both
// directions, drawn from one seeded generator per transport (a failing seed
// is replayed by running it again).
//
//   cut        the connection closes at once; the chunk in hand is dropped
//   delay      the chunk is held back 1-8 ms
//   duplicate  a range of the chunk is delivered twice
//   truncate   only a prefix of the chunk goes through, then the connection
//              closes (a write reports success: the loss is silent)
//   corrupt    one byte of the chunk is changed
//
// A binary tunnel needs a channel that delivers exact bytes (DESIGN.md), so
// with kBinary only cut, delay and truncate are injected: binary frames
// carry no checksum, and a corrupt or spliced binary stream is undetectable
// by design. Text tunnels get every fault (armored lines carry CRC-32C).
// Each connection gets at most a few faults, and from the kCalmAfter-th
// connection of a transport none: the channel is hostile, not dead, so a
// run can finish.
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <array>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>

#include "host/transports/forwarding_transport.h"
#include "tether/transport.h"

namespace tether::testing {

class ChaosTransport final : public internal::ForwardingTransport {
 public:
  enum Fault { kCut, kDelay, kDuplicate, kTruncate, kCorrupt, kNumFaults };
  static constexpr const char* kFaultNames[kNumFaults] = {"cut", "delay", "duplicate", "truncate", "corrupt"};
  static constexpr int kCalmAfter = 8;         // connections with faults, per transport
  static constexpr int kMaxFaultsPerConnection = 3;  // besides delays
  struct Stats {
    std::array<std::uint64_t, kNumFaults> faults{};
    std::uint64_t connections = 0;
  };

  ChaosTransport(Transport& inner, std::uint64_t seed, TunnelMode mode)
      : ForwardingTransport(inner), mode_(mode), shared_(std::make_shared<Shared>()) {
    shared_->rng.seed(seed);
    shared_->byte_faults = mode != TunnelMode::kBinary;
  }
  ChannelCapabilities capabilities() const override { return CapabilitiesOf(mode_); }
  boost::asio::awaitable<absl::StatusOr<std::unique_ptr<Channel>>> Exec(std::vector<std::string> argv) override {
    auto ch = co_await inner().Exec(std::move(argv));
    if (!ch.ok()) co_return ch.status();
    const int budget = ++shared_->stats.connections > kCalmAfter ? 0 : shared_->Roll(kMaxFaultsPerConnection + 1);
    co_return std::unique_ptr<Channel>(new ChaosChannel(*std::move(ch), shared_, budget));
  }
  const Stats& stats() const { return shared_->stats; }

 private:
  struct Shared {
    std::mt19937_64 rng;
    Stats stats;
    bool byte_faults = true;
    std::size_t Roll(std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(rng() % n); }
  };

  class ChaosChannel final : public Channel {
   public:
    ChaosChannel(std::unique_ptr<Channel> inner, std::shared_ptr<Shared> shared, int budget)
        : inner_(std::move(inner)), shared_(std::move(shared)), budget_(budget) {}

    boost::asio::awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf) override {
      if (head_ == pending_.size()) {
        if (cut_) co_return std::size_t{0};
        pending_.resize(16 * 1024);
        head_ = 0;
        absl::StatusOr<std::size_t> n = co_await inner_->ReadSome({pending_.data(), pending_.size()});
        if (!n.ok() || *n == 0) {
          pending_.clear();
          co_return n;
        }
        pending_.resize(*n);
        co_await MaybeDelay();
        switch (Pick()) {
          case kCut:
            Cut();
            pending_.clear();
            co_return std::size_t{0};
          case kTruncate:
            pending_.resize(shared_->Roll(pending_.size()));
            Cut();  // after the prefix, nothing more arrives
            if (pending_.empty()) co_return std::size_t{0};
            break;
          case kDuplicate: Duplicate(&pending_); break;
          case kCorrupt: Corrupt(&pending_); break;
          default: break;
        }
      }
      const std::size_t take = std::min(buf.size(), pending_.size() - head_);
      std::memcpy(buf.data(), pending_.data() + head_, take);
      head_ += take;
      co_return take;
    }

    boost::asio::awaitable<absl::Status> Write(std::string_view bytes) override {
      if (cut_) co_return absl::UnavailableError("chaos: connection cut");
      co_await MaybeDelay();
      std::string data(bytes);
      switch (Pick()) {
        case kCut:
          Cut();
          co_return absl::UnavailableError("chaos: connection cut");
        case kTruncate: {
          data.resize(shared_->Roll(data.size()));
          if (!data.empty()) (void)co_await inner_->Write(data);
          Cut();
          co_return absl::OkStatus();  // the rest is lost silently
        }
        case kDuplicate: Duplicate(&data); break;
        case kCorrupt: Corrupt(&data); break;
        default: break;
      }
      co_return co_await inner_->Write(data);
    }
    void CloseWrite() override { inner_->CloseWrite(); }
    void Close() override { inner_->Close(); }
    std::string Diagnostics() const override { return inner_->Diagnostics(); }

   private:
    // A fault for this chunk, or kNumFaults for none.
    Fault Pick() {
      if (budget_ <= 0 || shared_->Roll(5) != 0) return kNumFaults;
      const std::size_t kinds = shared_->byte_faults ? 4 : 2;  // delay is drawn separately
      static constexpr Fault kOrder[] = {kCut, kTruncate, kDuplicate, kCorrupt};
      const Fault f = kOrder[shared_->Roll(kinds)];
      --budget_;
      ++shared_->stats.faults[f];
      return f;
    }
    boost::asio::awaitable<void> MaybeDelay() {
      if (delays_ >= 16 || shared_->Roll(6) != 0) co_return;
      ++delays_;
      ++shared_->stats.faults[kDelay];
      boost::asio::steady_timer t(co_await boost::asio::this_coro::executor,
                                  std::chrono::milliseconds(1 + shared_->Roll(8)));
      co_await t.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
    }
    void Duplicate(std::string* s) {
      if (s->empty()) return;
      const std::size_t from = shared_->Roll(s->size());
      const std::size_t len = 1 + shared_->Roll(s->size() - from);
      const std::size_t at = shared_->Roll(s->size() + 1);
      const std::string copy = s->substr(from, len);
      s->insert(at, copy);
    }
    void Corrupt(std::string* s) {
      if (s->empty()) return;
      (*s)[shared_->Roll(s->size())] ^= static_cast<char>(1 + shared_->Roll(255));
    }
    void Cut() {
      cut_ = true;
      inner_->Close();
    }

    std::unique_ptr<Channel> inner_;
    std::shared_ptr<Shared> shared_;
    int budget_;
    int delays_ = 0;
    bool cut_ = false;
    std::string pending_;
    std::size_t head_ = 0;
  };

  TunnelMode mode_;
  std::shared_ptr<Shared> shared_;
};

}  // namespace tether::testing
