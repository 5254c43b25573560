// WebSockets (http.h): Beast's client over the same connections as HTTP,
// binary messages, subprotocols, close codes and a bounded close.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/websocket/stream.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "host/errors.h"
#include "host/net/internal/client_impl.h"

namespace tether::net::internal {
namespace {

namespace asio = boost::asio;
namespace websocket = boost::beast::websocket;
using boost::system::error_code;
constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);

struct WsState {
  explicit WsState(Stream s) : ws(std::move(s)) {}
  websocket::stream<Stream> ws;
  bool closed = false;
  void Close() {
    if (closed) return;
    closed = true;
    error_code ec;
    ws.next_layer().lowest().shutdown(asio::socket_base::shutdown_both, ec);
    ws.next_layer().lowest().close(ec);
  }
};

std::function<void()> WsCloser(const std::shared_ptr<WsState>& s) {
  return [weak = std::weak_ptr<WsState>(s)] {
    if (std::shared_ptr<WsState> st = weak.lock()) st->Close();
  };
}

class WebSocketImpl final : public WebSocket {
 public:
  WebSocketImpl(std::shared_ptr<ClientImpl> client, std::shared_ptr<WsState> state, Response head,
                std::string subprotocol, std::string what)
      : client_(std::move(client)),
        state_(std::move(state)),
        head_(std::move(head)),
        subprotocol_(std::move(subprotocol)),
        what_(std::move(what)) {}
  ~WebSocketImpl() override { state_->Close(); }

  const Response& head() const override { return head_; }
  std::string_view subprotocol() const override { return subprotocol_; }
  std::optional<int> close_code() const override { return close_code_; }

  asio::awaitable<absl::StatusOr<WebSocketMessage>> Read() override {
    std::shared_ptr<WsState> s = state_;
    if (close_code_) co_return PeerClosed();
    if (s->closed) co_return ClosedError(what_);
    boost::beast::flat_buffer buffer;
    auto [ec, n] = co_await s->ws.async_read(buffer, kNoThrow);
    if (ec == websocket::error::closed) {
      close_code_ = static_cast<int>(s->ws.reason().code);
      close_reason_ = std::string(s->ws.reason().reason.c_str());
      s->Close();
      co_return PeerClosed();
    }
    if (ec) co_return Failed(*s, ec);
    WebSocketMessage m;
    m.binary = s->ws.got_binary();
    m.data = boost::beast::buffers_to_string(buffer.data());
    co_return m;
  }

  asio::awaitable<absl::Status> Write(std::string_view data, bool binary) override {
    std::shared_ptr<WsState> s = state_;
    if (s->closed) co_return ClosedError(what_);
    s->ws.binary(binary);
    auto [ec, n] = co_await s->ws.async_write(asio::buffer(data.data(), data.size()), kNoThrow);
    if (ec) co_return Failed(*s, ec);
    co_return absl::OkStatus();
  }

  asio::awaitable<void> AsyncClose(int code) override {
    std::shared_ptr<WsState> s = state_;
    if (s->closed) co_return;
    {
      Watchdog wd(client_->executor(), client_->options().connect_timeout, WsCloser(s));
      websocket::close_reason reason(static_cast<websocket::close_code>(code));
      co_await s->ws.async_close(reason, kNoThrow);
      if (!close_code_ && s->ws.reason().code != websocket::close_code::none) {
        close_code_ = static_cast<int>(s->ws.reason().code);
      }
    }
    s->Close();
  }

  void Close() override { state_->Close(); }

 private:
  absl::Status PeerClosed() const {
    std::string reason = close_reason_.empty() ? "" : absl::StrCat(" (", close_reason_, ")");
    return absl::UnavailableError(absl::StrCat(what_, ": closed by the peer with code ", *close_code_, reason));
  }

  absl::Status Failed(WsState& s, const error_code& ec) {
    absl::Status st = s.closed                                   ? ClosedError(what_)
                      : ec == asio::error::operation_aborted ? CancelledError(what_)
                                                              : NetError(what_, ec);
    return st;
  }

  std::shared_ptr<ClientImpl> client_;
  std::shared_ptr<WsState> state_;
  Response head_;
  std::string subprotocol_;
  std::string what_;
  std::optional<int> close_code_;
  std::string close_reason_;
};

}  // namespace

asio::awaitable<absl::StatusOr<std::unique_ptr<WebSocket>>> ClientImpl::OpenWebSocket(
    std::string target, Headers headers, std::vector<std::string> subprotocols) {
  std::shared_ptr<ClientImpl> keep = self();
  std::string what = Describe("WebSocket", target);
  if (target.empty() || target[0] != '/') {
    co_return absl::InvalidArgumentError(absl::StrCat(what, ": the target must start with '/'"));
  }
  if (absl::Status st = CheckHeaders(headers); !st.ok()) co_return st;
  for (const std::string& p : subprotocols) {
    if (p.empty() || p.find_first_of(" ,\r\n\t") != std::string::npos) {
      co_return absl::InvalidArgumentError(absl::StrCat(what, ": a bad subprotocol name"));
    }
  }
  std::shared_ptr<Conn> conn = NewConn();
  {
    Watchdog wd(ex_, options_.connect_timeout, Closer(conn));
    absl::Status st = co_await Connect(conn);
    if (!st.ok()) co_return st;
  }
  auto state = std::make_shared<WsState>(std::move(conn->stream));
  Watchdog wd(ex_, options_.connect_timeout, WsCloser(state));
  websocket::stream<Stream>& ws = state->ws;
  std::string offer = absl::StrJoin(subprotocols, ", ");
  ws.set_option(websocket::stream_base::decorator([headers = std::move(headers), offer](websocket::request_type& req) {
    req.set(http::field::user_agent, "tether");
    for (const auto& [name, value] : headers) req.set(name, value);
    if (!offer.empty()) req.set(http::field::sec_websocket_protocol, offer);
  }));
  ws.read_message_max(options_.max_message);
  websocket::permessage_deflate no_deflate;
  no_deflate.client_enable = false;
  ws.set_option(no_deflate);
  websocket::response_type res;
  std::string path = absl::StrCat(options_.url.base_path, target);
  auto [ec] = co_await ws.async_handshake(res, HostHeader(), path, kNoThrow);
  if (wd.fired()) co_return TimeoutError(what, options_.connect_timeout, "connect_timeout");
  Response head = ToResponse(res.base());
  if (ec == websocket::error::upgrade_declined && res.result_int() != 101) {
    state->Close();
    head.body = res.body().substr(0, kMaxErrorBodyBytes);
    co_return HttpError(head, what);
  }
  if (ec) {
    state->Close();
    co_return NetError(what, ec);
  }
  std::string chosen(res[http::field::sec_websocket_protocol]);
  if (!chosen.empty() && std::find(subprotocols.begin(), subprotocols.end(), chosen) == subprotocols.end()) {
    state->Close();
    co_return MakeError(ErrorCode::kProtocol, absl::StrCat(what, ": the server chose a subprotocol not offered"));
  }
  co_return std::make_unique<WebSocketImpl>(std::move(keep), std::move(state), std::move(head), std::move(chosen),
                                            std::move(what));
}

}  // namespace tether::net::internal
