// WebSockets (http.h): Beast's client over the same connections as HTTP,
// binary messages, subprotocols, close codes and a bounded close.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/websocket/stream.hpp>
#include <optional>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tether/errors.h"
#include "host/net/internal/client_impl.h"

namespace tether::net::internal {
namespace {

namespace asio = boost::asio;
namespace websocket = boost::beast::websocket;
using boost::system::error_code;
constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);

// A WebSocket's state, shared with the read that runs in the background:
// Beast's terminal cancellation leaves a WebSocket undefined, so a Read
// never cancels the socket read itself, only its wait for the result,
// which the next Read then gets. Nothing is lost to a cancelled Read.
struct WsState {
  WsState(Stream s, const asio::any_io_executor& ex) : ws(std::move(s)), wake(ex) {}
  websocket::stream<Stream> ws;
  asio::steady_timer wake;  // cancelled when the background read completes
  bool closed = false;
  bool closed_by_user = false;  // Close(), AsyncClose() or the destructor
  bool reading = false;
  std::optional<WebSocketMessage> message;
  error_code error;  // sticky once set
  std::optional<int> close_code;
  std::string close_reason;

  void Close() {
    if (closed) return;
    closed = true;
    error_code ec;
    ws.next_layer().lowest().shutdown(asio::socket_base::shutdown_both, ec);
    ws.next_layer().lowest().close(ec);
  }
};

// The head at the start of `bytes` (a handshake's answer), if it is whole.
std::optional<Response> ParseHead(std::string_view bytes) {
  http::response_parser<http::empty_body> p;
  p.header_limit(kWsHandshakeHeaderBytes);
  p.eager(false);
  error_code ec;
  p.put(asio::buffer(bytes.data(), bytes.size()), ec);
  if (!p.is_header_done()) return std::nullopt;
  return ToResponse(p.get().base());
}

std::function<void()> WsCloser(const std::shared_ptr<WsState>& s) {
  return [weak = std::weak_ptr<WsState>(s)] {
    if (std::shared_ptr<WsState> st = weak.lock()) st->Close();
  };
}

asio::awaitable<void> ReadInBackground(std::shared_ptr<WsState> s) {
  boost::beast::flat_buffer buffer;
  auto [ec, n] = co_await s->ws.async_read(buffer, kNoThrow);
  s->reading = false;
  if (!ec) {
    WebSocketMessage m;
    m.binary = s->ws.got_binary();
    m.data = boost::beast::buffers_to_string(buffer.data());
    s->message = std::move(m);
  } else {
    if (ec == websocket::error::closed) {
      s->close_code = static_cast<int>(s->ws.reason().code);
      s->close_reason = PrintableMessage(s->ws.reason().reason.c_str(), 125);  // (the peer's words)
    }
    s->error = ec;
    s->Close();
  }
  s->wake.cancel();
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
  ~WebSocketImpl() override { Close(); }

  const Response& head() const override { return head_; }
  std::string_view subprotocol() const override { return subprotocol_; }
  std::optional<int> close_code() const override { return state_->close_code; }

  asio::awaitable<absl::StatusOr<WebSocketMessage>> Read() override {
    std::shared_ptr<WsState> s = state_;
    for (;;) {
      if (s->message) {
        WebSocketMessage m = std::move(*s->message);
        s->message.reset();
        co_return m;
      }
      if (s->close_code) co_return PeerClosed(*s);
      if (s->closed) co_return s->error && !s->closed_by_user ? NetError(what_, s->error) : ClosedError(what_);
      if (!s->reading) {
        s->reading = true;
        asio::co_spawn(client_->executor(), ReadInBackground(s), asio::detached);
      }
      s->wake.expires_at(asio::steady_timer::time_point::max());
      co_await s->wake.async_wait(kNoThrow);
      if (s->reading && IsCancelled(co_await asio::this_coro::cancellation_state)) co_return CancelledError(what_);
    }
  }

  asio::awaitable<absl::Status> Write(std::string_view data, bool binary) override {
    std::shared_ptr<WsState> s = state_;
    if (s->closed) co_return ClosedError(what_);
    s->ws.binary(binary);
    auto [ec, n] = co_await s->ws.async_write(asio::buffer(data.data(), data.size()), kNoThrow);
    if (!ec) co_return absl::OkStatus();
    absl::Status st = s->closed_by_user                         ? ClosedError(what_)
                      : ec == asio::error::operation_aborted ? CancelledError(what_)
                                                              : NetError(what_, ec);
    s->Close();  // a cancelled or failed write leaves the WebSocket undefined
    co_return st;
  }

  asio::awaitable<void> AsyncClose(int code) override {
    std::shared_ptr<WsState> s = state_;
    if (s->closed) {
      Close();
      co_return;
    }
    {
      Watchdog wd(client_->executor(), client_->options().connect_timeout, WsCloser(s));
      websocket::close_reason reason(static_cast<websocket::close_code>(code));
      co_await s->ws.async_close(reason, kNoThrow);
      if (!s->close_code && s->ws.reason().code != websocket::close_code::none) {
        s->close_code = static_cast<int>(s->ws.reason().code);
      }
    }
    Close();
  }

  void Close() override {
    state_->closed_by_user = true;
    state_->Close();
  }

 private:
  absl::Status PeerClosed(const WsState& s) const {
    std::string reason = s.close_reason.empty() ? "" : absl::StrCat(" (", s.close_reason, ")");
    return absl::UnavailableError(absl::StrCat(what_, ": closed by the peer with code ", *s.close_code, reason));
  }

  std::shared_ptr<ClientImpl> client_;
  std::shared_ptr<WsState> state_;
  Response head_;
  std::string subprotocol_;
  std::string what_;
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
  // A kept-alive connection when there is one (saves TCP and TLS round
  // trips), else a new one. Not retried on a new connection if the
  // handshake fails: Beast's handshake does not say whether the request
  // was written, and a server may have acted on it (an exec).
  std::shared_ptr<Conn> conn = TakeIdle();
  if (!conn) {
    conn = NewConn();
    // Connect keeps connect_timeout itself; a second watchdog here raced it
    // and could report a timed-out connect as "closed".
    absl::Status connected = co_await Connect(conn);
    if (!connected.ok()) co_return connected;
  }
  if (IsCancelled(co_await asio::this_coro::cancellation_state)) co_return CancelledError(what);
  auto state = std::make_shared<WsState>(std::move(conn->stream), ex_);
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
  Stream& raw = ws.next_layer();
  raw.read_budget = kWsHandshakeReadBytes;
  raw.record_limit = kWsHandshakeHeaderBytes;
  auto [ec] = co_await ws.async_handshake(res, HostHeader(), path, kNoThrow);
  raw.read_budget.reset();
  raw.record_limit = 0;
  const std::string start = std::exchange(raw.record, std::string());
  if (wd.fired()) co_return TimeoutError(what, options_.connect_timeout, "connect_timeout");
  Response head = ToResponse(res.base());
  if (ec == asio::error::message_size) {
    state->Close();
    // Beast gives no status then; the head read first still has it, and a
    // refusal keeps its status (a 401 or a 429 means something to the caller).
    if (std::optional<Response> refused = ParseHead(start); refused && refused->status != 101) {
      absl::Status st = HttpError(*refused, what);
      co_return absl::Status(st.code(), absl::StrCat(st.message(), " (the rest of the answer exceeds ",
                                                     kWsHandshakeReadBytes / 1024, " KiB and was not read)"));
    }
    co_return MakeError(ErrorCode::kProtocol, absl::StrCat(what, ": the handshake's response exceeds ",
                                                           kWsHandshakeReadBytes / 1024, " KiB"));
  }
  if (ec == websocket::error::upgrade_declined && res.result_int() != 101) {
    state->Close();
    head.body = res.body().substr(0, kMaxErrorBodyBytes);
    co_return HttpError(head, what);
  }
  if (ec) {
    state->Close();
    if (ec == http::error::header_limit) {
      co_return MakeError(ErrorCode::kProtocol, absl::StrCat(what, ": the handshake's response head exceeds ",
                                                             kWsHandshakeHeaderBytes / 1024, " KiB"));
    }
    if (ec == http::error::body_limit) {
      co_return MakeError(ErrorCode::kProtocol, absl::StrCat(what, ": the handshake's response body exceeds ",
                                                             kWsHandshakeBodyBytes >> 20, " MiB"));
    }
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
