#include "supervisor/attachment.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/write.hpp>
#include <algorithm>
#include <chrono>
#include <ctime>
#include <optional>
#include <vector>

#include "supervisor/proc.h"

namespace tether::supervisor {
namespace {

using asio::awaitable;
using asio::local::stream_protocol;
using std::chrono::steady_clock;

constexpr std::size_t kReadBufferBytes = 64 * 1024;

}  // namespace

bool ProcessStopped(pid_t pid) {
  if (pid <= 0) return false;
  const std::optional<ProcStat> st = ReadProcStat(pid);
  return st && (st->state == 'T' || st->state == 't');
}

Attachment::Attachment(AttachmentOwner& owner, Supervised& process, stream_protocol::socket socket, pid_t peer_pid)
    : owner_(owner),
      core_(process, steady_clock::now()),
      socket_(std::move(socket)),
      wake_(socket_.get_executor()),
      lease_timer_(socket_.get_executor()),
      peer_pid_(peer_pid) {}

void Attachment::WakeIfQueued() {
  if (core_.TakeWake()) wake_.Notify();
}

void Attachment::QueueStdinAck() {
  core_.QueueStdinAck();
  WakeIfQueued();
}

void Attachment::Refused(const Action& action, const absl::Status& why) {
  core_.Refused(action, why);
  WakeIfQueued();
}

void Attachment::Close() {
  if (closed_) return;
  closed_ = true;
  boost::system::error_code ec;
  socket_.shutdown(stream_protocol::socket::shutdown_both, ec);
  socket_.close(ec);
  wake_.Notify();
  if (!core_.control()) owner_.Detached(this, core_.authenticated() && !core_.deliberate_end());
}

awaitable<void> Attachment::Run() {
  auto self = shared_from_this();
  // The writer tries the socket first; failing to set this only costs that
  // fast path.
  boost::system::error_code ignored;
  socket_.non_blocking(true, ignored);
  asio::co_spawn(socket_.get_executor(), Writer(), RethrowOnError);
  asio::co_spawn(socket_.get_executor(), Lease(), RethrowOnError);
  co_await Reader();
}

awaitable<void> Attachment::Lease() {
  auto self = shared_from_this();
  while (!closed_) {
    const auto now = steady_clock::now();
    const AttachmentCore::Lease lease = core_.CheckLease(now);
    if (lease.expired) {
      if (lease.unless_peer_stopped && ProcessStopped(peer_pid_)) {
        // The host on this machine is stopped (Ctrl-Z, SIGSTOP): paused, not
        // gone. Its attachment and backpressure wait for it to resume.
        core_.Paused(steady_clock::now());
        continue;
      }
      // Lost: no requests within the lease. Like a broken connection, the
      // output keeps its backpressure for another lease so that a host that
      // was only slow can reattach without loss.
      Close();
      break;
    }
    // One wake-up per lease, not a poll: a request only moves the deadline
    // later (seen when this one fires); the Hello, which may shorten it,
    // cancels the wait (Reader).
    lease_timer_.expires_at(lease.deadline);
    co_await lease_timer_.async_wait(kNoThrow);
  }
}

awaitable<void> Attachment::Reader() {
  auto self = shared_from_this();
  std::unique_ptr<char[]> buf(new char[kReadBufferBytes]);
  std::vector<Action> actions;
  while (!closed_) {
    auto [ec, n] = co_await socket_.async_read_some(asio::buffer(buf.get(), kReadBufferBytes), kNoThrow);
    if (ec || n == 0) break;
    core_.Received(steady_clock::now());
    const bool was_authenticated = core_.authenticated();
    std::string_view in(buf.get(), n);
    while (!closed_) {
      actions.clear();
      const AttachmentCore::Step step = core_.Next(&in, static_cast<std::int64_t>(::time(nullptr)), &actions);
      for (const Action& a : actions) owner_.Perform(a, *this);
      WakeIfQueued();
      if (step == AttachmentCore::Step::kNeedMore) break;
      // A fatal error is queued: the writer sends it after its current
      // batch, then closes (a second async_write on the socket would
      // interleave with the writer's bytes).
      if (step == AttachmentCore::Step::kStop) co_return;
    }
    if (!was_authenticated && core_.authenticated()) lease_timer_.cancel();  // the lease's own length from now
  }
  Close();
}

awaitable<void> Attachment::Writer() {
  auto self = shared_from_this();
  OutputBatch batch;  // reused: its buffers keep their capacity
  std::vector<asio::const_buffer> buffers;
  while (!closed_) {
    core_.NextBatch(&batch);
    if (batch.size() == 0) {
      if (core_.closing()) break;  // the fatal error or the detach is out
      co_await wake_.Wait();
      continue;
    }
    // Written at once when the socket takes it all (the usual case): no
    // completion to post and no round through the event loop, one
    // epoll_wait fewer per batch. What it does not take goes by async_write.
    buffers.clear();
    for (std::string_view v : batch.Views()) buffers.emplace_back(v.data(), v.size());
    if (socket_.non_blocking()) {
      boost::system::error_code ec;  // would_block, or an error async_write meets again
      std::size_t skip = socket_.write_some(buffers, ec);
      if (skip == batch.size()) continue;
      buffers.clear();
      for (std::string_view v : batch.Views()) {
        const std::size_t drop = std::min(skip, v.size());
        skip -= drop;
        if (drop < v.size()) buffers.emplace_back(v.data() + drop, v.size() - drop);
      }
    }
    auto [ec, n] = co_await asio::async_write(socket_, buffers, kNoThrow);
    if (ec) break;
  }
  Close();
}

}  // namespace tether::supervisor
