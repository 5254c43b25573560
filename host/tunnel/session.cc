#include "host/tunnel/session.h"

#include <sys/random.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include "absl/strings/str_cat.h"
#include "tether/errors.h"
#include "tether/protocol/version.h"

namespace tether {

namespace asio = boost::asio;

std::shared_ptr<Session> Session::Create(asio::any_io_executor ex, std::unique_ptr<Channel> channel) {
  return std::shared_ptr<Session>(new Session(std::move(ex), std::move(channel)));
}

Session::Session(asio::any_io_executor ex, std::unique_ptr<Channel> channel)
    : ex_(std::move(ex)), channel_(std::move(channel)) {
  // Request ids start at a random point, so that replies an earlier
  // session's channel replays (text channels do) never match ours.
  std::uint64_t r = 0;
  if (::getrandom(&r, sizeof r, 0) == sizeof r) next_request_id_ = (r >> 2) + 1;
}

Session::~Session() { channel_->Close(); }

void Session::SendFrame(std::string frame) {
  if (closed_) return;
  queued_bytes_ += frame.size();
  outbox_.append(frame);
  if (!writing_) {
    writing_ = true;
    asio::co_spawn(ex_, Writer(), asio::detached);
  }
}

std::uint64_t Session::Send(wire::Envelope env) {
  const std::uint64_t id = next_request_id_++;
  env.set_generation(generation_);
  env.set_request_id(id);
  std::string frame;
  protocol::AppendEnvelope(env, protocol::Compression::kNone, &frame);
  SendFrame(std::move(frame));
  return id;
}

asio::awaitable<void> Session::Writer() {
  auto self = shared_from_this();
  // co_spawn started this coroutine inline, inside the first Send. Yield
  // once, so that the frames queued in the same turn go in one write: an
  // ack with the ping it rides on, a reconnect's replay (one wake-up of the
  // daemon, one native call on a message channel).
  co_await asio::post(ex_, asio::use_awaitable);
  std::string batch;
  while (!closed_ && !outbox_.empty()) {
    batch.clear();
    batch.swap(outbox_);
    handed_bytes_ += batch.size();
    absl::Status st = co_await channel_->Write(batch);
    if (!st.ok()) {
      write_error_ = st;
      break;
    }
  }
  writing_ = false;
}

std::string Session::PrepareHello(wire::Hello hello) {
  hello.set_min_version(kProtocolVersion);
  hello.set_max_version(kProtocolVersion);
  wire::Envelope env;
  *env.mutable_hello() = std::move(hello);
  hello_id_ = next_request_id_++;
  env.set_generation(generation_);
  env.set_request_id(hello_id_);
  std::string frame;
  protocol::AppendEnvelope(env, protocol::Compression::kNone, &frame);
  return frame;
}

asio::awaitable<absl::StatusOr<wire::Welcome>> Session::Handshake(wire::Hello hello) {
  SendFrame(PrepareHello(std::move(hello)));
  co_return co_await AwaitWelcome();
}

asio::awaitable<absl::StatusOr<wire::Welcome>> Session::AwaitWelcome() {
  const std::uint64_t id = hello_id_;
  absl::StatusOr<wire::Envelope> reply;
  while (true) {
    reply = co_await Receive();
    if (!reply.ok()) co_return reply.status();
    // Errors from the launcher or bridge themselves carry no request id.
    if (reply->has_error() && (reply->request_id() == id || reply->request_id() == 0)) {
      co_return StatusFromWireError(reply->error());
    }
    if (reply->has_welcome() && reply->request_id() == id) break;
    if (reply->request_id() == id) {
      co_return absl::DataLossError(absl::StrCat("handshake: expected welcome, got ",
                                                 std::string(protocol::BodyName(*reply))));
    }
    // Anything else is a replay of an earlier attachment's frames: skipped.
  }
  if (reply->welcome().generation() == 0) {
    co_return absl::DataLossError("handshake: welcome without a generation");
  }
  generation_ = reply->welcome().generation();
  co_return std::move(*reply->mutable_welcome());
}

asio::awaitable<absl::StatusOr<wire::Envelope>> Session::Receive() {
  wire::Envelope env;
  while (true) {
    if (closed_) co_return absl::UnavailableError("session closed");
    absl::StatusOr<bool> got = decoder_.Next(&pending_, &env);
    if (!got.ok()) {
      Close();
      co_return absl::DataLossError(absl::StrCat("corrupt stream from the supervisor: ",
                                                 std::string(got.status().message())));
    }
    if (*got) co_return env;
    // (Nothing views buf_ here: pending_ is consumed, and decoded frames
    // were copied out by the Envelope parse.)
    if (drained_small_ && channel_->waits_readable()) {
      drained_small_ = false;
      buf_.reset();
      buf_size_ = kSessionInitialReadBytes;
      absl::Status ready = co_await channel_->WaitReadable();
      if (closed_) continue;
      if (!ready.ok()) {
        Close();
        co_return absl::UnavailableError(
            absl::StrCat("connection to the supervisor ended: ", std::string(ready.message())));
      }
    }
    if (!buf_) {
      buf_.reset(new char[buf_size_]);
    } else if (filled_last_read_ && buf_size_ < kSessionReadBytes) {
      buf_size_ *= 2;
      buf_.reset(new char[buf_size_]);
    }
    absl::StatusOr<std::size_t> n = co_await channel_->ReadSome({buf_.get(), buf_size_});
    filled_last_read_ = n.ok() && *n == buf_size_;
    drained_small_ = n.ok() && *n > 0 && *n < kSessionInitialReadBytes;
    if (!n.ok() || *n == 0) {
      std::string diag = channel_->Diagnostics();
      const bool mid_frame = !decoder_.idle();
      ended_by_peer_ = n.ok() && !mid_frame && !closed_;
      Close();
      co_return absl::UnavailableError(absl::StrCat(
          "connection to the supervisor ended", mid_frame ? " in the middle of a frame" : "",
          n.ok() ? "" : absl::StrCat(": ", std::string(n.status().message())),
          diag.empty() ? "" : absl::StrCat("; its stderr: ", diag)));
    }
    pending_ = std::string_view(buf_.get(), *n);
    received_bytes_ += *n;
  }
}

asio::awaitable<void> Session::Drain(std::chrono::milliseconds limit) {
  auto self = shared_from_this();
  asio::steady_timer timer(ex_, limit);
  timer.async_wait([self](boost::system::error_code ec) {
    if (!ec) self->Close();
  });
  while ((co_await Receive()).ok()) {
  }
  timer.cancel();
  Close();
}

void Session::Close() {
  if (closed_) return;
  closed_ = true;
  channel_->Close();
}

}  // namespace tether
