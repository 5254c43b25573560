#include "host/tunnel/exchange_channel.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "protocol/command_line.h"
#include "protocol/exchange_format.h"

namespace tether::internal {

boost::asio::awaitable<absl::StatusOr<std::string>> RunOneShot(Transport& transport, std::vector<std::string> argv);

namespace {

namespace asio = boost::asio;

constexpr std::size_t kMaxPollInput = 48 * 1024;  // bytes of ours per poll (in argv, base85)
constexpr int kMaxFailedPolls = 50;               // then the relay counts as gone

constexpr int kCloseAttempts = 5;                  // 50, 100, 200, 400 ms apart

// Until the relay says it is ending (or gone): a close lost on its way (a
// cut one-shot command, an exec API that failed) would hold the attachment
// for a lease, and a reopen would be BUSY until then. A repeated close is
// harmless: it finds no relay and says so. (The transport by shared_ptr:
// the close outlives the channel.)
asio::awaitable<void> CloseRelay(std::shared_ptr<Transport> t, std::vector<std::string> argv) {
  auto pause = std::chrono::milliseconds(50);
  for (int attempt = 0; attempt < kCloseAttempts; ++attempt, pause *= 2) {
    absl::StatusOr<std::string> out = co_await RunOneShot(*t, argv);
    if (out.ok() && absl::StrContains(*out, protocol::kRelayClosedLine)) co_return;
    if (attempt + 1 == kCloseAttempts) break;
    asio::steady_timer timer(co_await asio::this_coro::executor, pause);
    co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
  }
}

class ExchangeChannel final : public Channel {
 public:
  ExchangeChannel(Transport& t, std::string supervisor, std::string dir, std::string id)
      : owner_(t.shared_from_this()), t_(t), supervisor_(std::move(supervisor)), dir_(std::move(dir)), id_(std::move(id)) {}

  asio::awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf) override {
    auto backoff = std::chrono::milliseconds(0);
    int failed = 0;
    while (read_head_ == read_.size()) {
      if (closed_) co_return absl::UnavailableError("exchange channel closed");
      if (ended_) co_return std::size_t{0};
      if (backoff.count() > 0) {
        asio::steady_timer timer(co_await asio::this_coro::executor, backoff);
        co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
      }
      read_.clear();
      read_head_ = 0;
      protocol::ExchangePollCommand poll;
      poll.state_dir = dir_;
      poll.relay_id = id_;
      poll.in_offset = in_base_;
      poll.out_offset = out_offset_;
      poll.data = pending_.substr(0, kMaxPollInput);
      std::vector<std::string> argv = protocol::ToArgv(poll, supervisor_);
      absl::StatusOr<std::string> out = co_await RunOneShot(t_, std::move(argv));
      absl::StatusOr<protocol::ExchangeReply> reply =
          out.ok() ? protocol::ParseExchangeOutput(*out) : absl::StatusOr<protocol::ExchangeReply>(out.status());
      if (!reply.ok() && (absl::IsUnavailable(reply.status()) || !out.ok())) {
        // Lost or damaged on the way: the same poll again (offsets make it safe).
        if (++failed > kMaxFailedPolls) co_return absl::UnavailableError("exchange: no reply from the relay");
        backoff = std::chrono::milliseconds(std::min<long>(200, 10 + 20L * failed));
        continue;
      }
      // An intact line with a bad reply: a supervisor that speaks another
      // format (or a broken one); asking again cannot help.
      if (!reply.ok()) co_return reply.status();
      failed = 0;
      if (reply->flags & protocol::kExchangeNoRelay) co_return absl::UnavailableError("exchange: the relay is gone");
      if (reply->in_received > in_base_ && reply->in_received <= in_base_ + pending_.size()) {
        pending_.erase(0, static_cast<std::size_t>(reply->in_received - in_base_));
        in_base_ = reply->in_received;
      }
      const std::uint64_t from = reply->from;
      const std::string_view data = reply->data;
      if (from <= out_offset_ && from + data.size() > out_offset_) {
        read_.assign(data.substr(static_cast<std::size_t>(out_offset_ - from)));
        out_offset_ += read_.size();
      }
      if ((reply->flags & protocol::kExchangeDaemonEnded) && read_.empty() && from + data.size() <= out_offset_) {
        ended_ = true;
      }
      backoff = read_.empty() && pending_.empty()
                    ? std::min(std::chrono::milliseconds(200), backoff + std::chrono::milliseconds(20))
                    : std::chrono::milliseconds(0);
    }
    const std::size_t take = std::min(buf.size(), read_.size() - read_head_);
    std::memcpy(buf.data(), read_.data() + read_head_, take);
    read_head_ += take;
    co_return take;
  }

  asio::awaitable<absl::Status> Write(std::string_view bytes) override {
    if (closed_) co_return absl::UnavailableError("exchange channel closed");
    pending_.append(bytes);  // sent by the next polls
    co_return absl::OkStatus();
  }
  void CloseWrite() override {}
  // Tells the relay to let the attachment go, so that a reopen is not BUSY.
  void Close() override {
    if (closed_) return;
    closed_ = true;
    protocol::ExchangeCloseCommand close;
    close.state_dir = dir_;
    close.relay_id = id_;
    std::vector<std::string> argv = protocol::ToArgv(close, supervisor_);
    asio::co_spawn(t_.executor(), CloseRelay(owner_, std::move(argv)), asio::detached);
  }
  std::string Diagnostics() const override { return {}; }  // each poll is its own command

 private:
  std::shared_ptr<Transport> owner_;  // polls and the close use it
  Transport& t_;
  std::string supervisor_, dir_, id_;
  std::string pending_;          // our bytes from in_base_ not yet confirmed by the relay
  std::uint64_t in_base_ = 0;
  std::uint64_t out_offset_ = 0;  // relay bytes we have
  std::string read_;
  std::size_t read_head_ = 0;
  bool closed_ = false, ended_ = false;
};

}  // namespace

asio::awaitable<absl::StatusOr<std::string>> RunOneShot(Transport& transport, std::vector<std::string> argv) {
  absl::StatusOr<std::unique_ptr<Channel>> ch = co_await transport.Exec(std::move(argv));
  if (!ch.ok()) co_return ch.status();
  (*ch)->CloseWrite();
  std::string out;
  char buf[16384];
  bool too_long = false;
  while (true) {
    absl::StatusOr<std::size_t> n = co_await (*ch)->ReadSome({buf, sizeof buf});
    if (!n.ok() || *n == 0) break;
    out.append(buf, *n);
    too_long = out.size() > kMaxOneShotOutputBytes;
    if (too_long) break;
  }
  (*ch)->Close();
  if (too_long) {
    // Never a silently cut output: the caller would parse half of it.
    co_return absl::ResourceExhaustedError(
        absl::StrCat("a one-shot command printed more than ", kMaxOneShotOutputBytes, " bytes"));
  }
  co_return out;
}

std::unique_ptr<Channel> MakeExchangeChannel(Transport& transport, std::string supervisor, std::string state_dir,
                                             std::string relay_id) {
  return std::make_unique<ExchangeChannel>(transport, std::move(supervisor), std::move(state_dir),
                                           std::move(relay_id));
}

}  // namespace tether::internal
