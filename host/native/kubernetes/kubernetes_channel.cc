#include "host/native/kubernetes/kubernetes_channel.h"

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "host/codec/k8s_channel.h"
#include "host/native/kubernetes/exec_status.h"
#include "tether/errors.h"

namespace tether::k8s {
namespace {

namespace asio = boost::asio;

constexpr std::size_t kWritePiece = 64 * 1024;  // stdin bytes per WebSocket message
constexpr std::size_t kDiagnosticsTail = 4096;  // bytes of stderr kept for messages

// The WebSocket, shared with the detached operations below so that it
// outlives the channel if need be. Reads run one message at a time in a
// detached ReadOne, which a caller's cancellation never interrupts (a
// cancelled ReadSome just stops waiting for it, and the message it brings
// waits in `inbox` for the next ReadSome); writes take turns. So nothing is
// lost, and no two reads or two writes ever overlap on the WebSocket, even
// for a caller that overlaps its own calls.
struct Conn {
  explicit Conn(const asio::any_io_executor& ex)
      : ready(ex, asio::steady_timer::time_point::max()), turn(ex, asio::steady_timer::time_point::max()) {}
  std::unique_ptr<net::WebSocket> ws;
  asio::steady_timer ready;  // never expires; cancelled when ReadOne delivers
  asio::steady_timer turn;   // never expires; cancelled when a writer is done
  bool reading = false;      // a ReadOne is in flight
  std::optional<absl::StatusOr<net::WebSocketMessage>> inbox;
  bool writing = false;  // a writer holds the turn
  bool closed = false;
};

asio::awaitable<void> ReadOne(std::shared_ptr<Conn> conn) {
  absl::StatusOr<net::WebSocketMessage> m = co_await conn->ws->Read();
  conn->inbox = std::move(m);
  conn->reading = false;
  conn->ready.cancel();
}

// Waits for the write turn: false when the channel closed or the caller
// cancelled meanwhile (then the turn is not held).
// (Every co_await in a statement of its own: g++ 12 miscompiles them inside
// conditions.)
asio::awaitable<bool> TakeTurn(std::shared_ptr<Conn> conn) {
  while (conn->writing) {
    auto [ec] = co_await conn->turn.async_wait(asio::as_tuple(asio::use_awaitable));
    (void)ec;
    if (conn->closed) co_return false;
    const asio::cancellation_state cs = co_await asio::this_coro::cancellation_state;
    if (cs.cancelled() != asio::cancellation_type::none) co_return false;
  }
  if (conn->closed) co_return false;
  conn->writing = true;
  co_return true;
}

void GiveTurn(const std::shared_ptr<Conn>& conn) {
  conn->writing = false;
  conn->turn.cancel();
}

asio::awaitable<void> SendCloseStdin(std::shared_ptr<Conn> conn) {
  const bool turn = co_await TakeTurn(conn);
  if (!turn) co_return;
  const std::string m = codec::EncodeK8sCloseStdin();
  (void)co_await conn->ws->Write(m, true);  // a failure shows on the next read
  GiveTurn(conn);
}

class ExecChannel final : public KubernetesChannel {
 public:
  ExecChannel(asio::any_io_executor ex, std::unique_ptr<net::WebSocket> ws, bool v5, std::string where)
      : ex_(std::move(ex)), conn_(std::make_shared<Conn>(ex_)), v5_(v5), where_(std::move(where)) {
    conn_->ws = std::move(ws);
  }
  ~ExecChannel() override { Close(); }

  asio::awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf) override {
    while (true) {
      if (pending_off_ < pending_.size()) {
        const std::size_t n = std::min(buf.size(), pending_.size() - pending_off_);
        std::memcpy(buf.data(), pending_.data() + pending_off_, n);
        pending_off_ += n;
        co_return n;
      }
      if (eof_) co_return 0;
      if (!error_.ok()) co_return error_;
      if (closed_) co_return absl::CancelledError("kubernetes exec: the channel is closed");
      const std::shared_ptr<Conn> conn = conn_;
      while (!conn->inbox) {
        if (!conn->reading) {
          conn->reading = true;
          // co_spawn runs ReadOne inline up to its first suspension, and a
          // WebSocket that already failed (a write's EPIPE closed it)
          // answers at once: the result is in the inbox before anyone waits
          // on `ready`, whose cancel() then woke nobody.
          asio::co_spawn(ex_, ReadOne(conn), asio::detached);
          if (conn->inbox) break;
        }
        auto [ec] = co_await conn->ready.async_wait(asio::as_tuple(asio::use_awaitable));
        (void)ec;
        if (closed_) co_return absl::CancelledError("kubernetes exec: the channel is closed");
        const asio::cancellation_state cs = co_await asio::this_coro::cancellation_state;
        if (!conn->inbox && cs.cancelled() != asio::cancellation_type::none) {
          co_return absl::CancelledError("kubernetes exec: read cancelled");  // nothing consumed
        }
      }
      absl::StatusOr<net::WebSocketMessage> m = *std::move(conn->inbox);
      conn->inbox.reset();
      if (!m.ok()) {
        if (closed_) co_return absl::CancelledError("kubernetes exec: the channel is closed");
        if (ErrorCodeOf(m.status()) == ErrorCode::kProtocol) {
          // A message above max_message, a bad frame: the server broke the
          // protocol, which opening the stream again would not mend.
          error_ = MakeError(ErrorCode::kProtocol, absl::StrCat(where_, ": ", m.status().message()));
          co_return error_;
        }
        cut_ = true;
        if (conn->ws->close_code().has_value()) {
          eof_ = true;  // closed without a Status: EOF, exit code unknown
          co_return 0;
        }
        error_ = absl::UnavailableError(
            absl::StrCat("kubernetes exec stream to ", where_, " was cut: ", m.status().message()));
        co_return error_;
      }
      absl::StatusOr<codec::K8sMessage> d = codec::DecodeK8sMessage(m->data);
      if (!d.ok()) {
        error_ = MakeError(ErrorCode::kProtocol, absl::StrCat(where_, ": ", d.status().message()));
        co_return error_;
      }
      switch (d->channel) {
        case codec::K8sChannel::kStdout: {
          if (d->payload.empty()) continue;
          const std::size_t n = std::min(buf.size(), d->payload.size());
          std::memcpy(buf.data(), d->payload.data(), n);
          if (n < d->payload.size()) {
            pending_ = std::move(m->data);  // (the payload starts after the channel byte)
            pending_off_ = 1 + n;
          }
          co_return n;
        }
        case codec::K8sChannel::kStderr:
          AppendDiagnostics(d->payload);
          continue;
        case codec::K8sChannel::kStatus: {
          absl::StatusOr<int> code = ParseExecStatus(d->payload);
          if (code.ok()) {
            exit_code_ = *code;
            eof_ = true;
            co_return 0;
          }
          AppendDiagnostics(std::string(code.status().message()));
          error_ = absl::Status(code.status().code(), absl::StrCat(where_, ": ", code.status().message()));
          co_return error_;
        }
        default:
          continue;  // 0, 4, 255: nothing a server sends but an empty channel-open message
      }
    }
  }

  asio::awaitable<absl::Status> Write(std::string_view bytes) override {
    if (closed_) co_return absl::CancelledError("kubernetes exec: the channel is closed");
    if (stdin_closed_) co_return InputClosedError("kubernetes exec: stdin was already closed");
    const std::shared_ptr<Conn> conn = conn_;
    const bool turn = co_await TakeTurn(conn);
    if (!turn) co_return absl::CancelledError("kubernetes exec: write cancelled or closed");
    absl::Status st;
    for (std::size_t off = 0; off < bytes.size() && st.ok(); off += kWritePiece) {
      const std::string m = codec::EncodeK8sStdin(bytes.substr(off, kWritePiece));
      st = co_await conn->ws->Write(m, true);
    }
    GiveTurn(conn);
    if (!st.ok()) {
      if (absl::IsCancelled(st)) co_return st;
      co_return absl::UnavailableError(absl::StrCat("kubernetes exec: sending stdin to ", where_, " failed: ",
                                                    st.message()));
    }
    co_return absl::OkStatus();
  }

  void CloseWrite() override {
    if (stdin_closed_ || closed_) return;
    stdin_closed_ = true;
    if (!v5_) return;  // v4 has no stdin EOF; the supervisor's in-band one is enough
    asio::co_spawn(ex_, SendCloseStdin(conn_), asio::detached);  // after any Write in flight
  }

  void Close() override {
    if (closed_) return;
    closed_ = true;
    conn_->closed = true;
    conn_->ws->Close();
    conn_->ready.cancel();
    conn_->turn.cancel();
  }

  asio::awaitable<void> AsyncClose() override {
    if (closed_) co_return;
    if (conn_->writing) {  // a close frame may not overtake a message being written
      Close();
      co_return;
    }
    const std::shared_ptr<Conn> conn = conn_;
    co_await conn->ws->AsyncClose(1000);
    Close();
  }

  std::optional<int> exit_code() const override { return exit_code_; }
  std::string Diagnostics() const override { return diag_; }

  bool cut() const override { return cut_; }

 private:
  void AppendDiagnostics(std::string_view bytes) {
    diag_.append(bytes);
    if (diag_.size() > kDiagnosticsTail) diag_.erase(0, diag_.size() - kDiagnosticsTail);
  }

  asio::any_io_executor ex_;
  std::shared_ptr<Conn> conn_;
  bool v5_;
  std::string where_;  // "pod NS/POD", for messages
  std::string pending_;  // a stdout message not yet read past pending_off_
  std::size_t pending_off_ = 0;
  std::string diag_;
  std::optional<int> exit_code_;
  absl::Status error_;
  bool eof_ = false;
  bool cut_ = false;
  bool closed_ = false;
  bool stdin_closed_ = false;
};

}  // namespace

std::unique_ptr<KubernetesChannel> MakeKubernetesChannel(asio::any_io_executor ex, std::unique_ptr<net::WebSocket> ws,
                                                         bool v5, std::string where) {
  return std::make_unique<ExecChannel>(std::move(ex), std::move(ws), v5, std::move(where));
}

}  // namespace tether::k8s
