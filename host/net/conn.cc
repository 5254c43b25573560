// Connections, deadlines and error mapping (internal/client_impl.h), and
// Client::Make.
#include <sys/socket.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/websocket/error.hpp>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "tether/errors.h"
#include "host/net/internal/client_impl.h"
#include "host/net/internal/tls.h"
#include "host/support/trace.h"

namespace tether::net {

absl::StatusOr<std::shared_ptr<Client>> Client::Make(boost::asio::any_io_executor ex, ClientOptions options) {
  const Url& u = options.url;
  if (u.scheme != "https" && u.scheme != "http" && u.scheme != "wss" && u.scheme != "ws" && u.scheme != "unix") {
    return absl::InvalidArgumentError(absl::StrCat("net client: unknown scheme ", u.scheme, " (use ParseUrl)"));
  }
  if (u.scheme == "unix" ? u.unix_path.empty() : (u.host.empty() || u.port.empty())) {
    return absl::InvalidArgumentError("net client: the URL has no host, port or socket path (use ParseUrl)");
  }
  if (!u.tls() && u.scheme != "unix" && !IsLoopbackHost(u.host)) {
    return absl::InvalidArgumentError(
        absl::StrCat("net client: plain ", u.scheme, ":// to ", u.host, " is refused (only loopback hosts)"));
  }
  if (options.connect_timeout.count() <= 0 || options.request_timeout.count() <= 0) {
    return absl::InvalidArgumentError("net client: timeouts must be positive");
  }
  std::shared_ptr<boost::asio::ssl::context> tls;
  if (u.tls()) {
    absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> ctx = internal::MakeTlsContext(options.tls);
    if (!ctx.ok()) return ctx.status();
    tls = *std::move(ctx);
  }
  return std::make_shared<internal::ClientImpl>(std::move(ex), std::move(options), std::move(tls));
}

namespace internal {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;
constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);

}  // namespace

void Conn::Close() {
  if (closed) return;
  closed = true;
  error_code ec;
  if (resolver) resolver->cancel();
  stream.lowest().shutdown(asio::socket_base::shutdown_both, ec);
  stream.lowest().close(ec);
}

bool Conn::StillIdle() {
  if (closed || !stream.lowest().is_open()) return false;
  if (buffer.size() != 0) {
    Close();
    return false;
  }
  char c;
  ssize_t n = ::recv(stream.lowest().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
  Close();  // EOF, an error, or bytes nobody asked for
  return false;
}

Watchdog::Watchdog(const asio::any_io_executor& ex, std::chrono::milliseconds timeout, std::function<void()> fire)
    : state_(std::make_shared<State>(ex)) {
  state_->fire = std::move(fire);
  state_->timer.expires_after(timeout);
  state_->timer.async_wait([s = state_](error_code ec) {
    if (ec || !s->fire) return;
    s->fired = true;
    std::function<void()> f = std::move(s->fire);
    s->fire = nullptr;
    f();
  });
}

Watchdog::~Watchdog() {
  state_->fire = nullptr;
  state_->timer.cancel();
}

std::function<void()> Closer(const std::shared_ptr<Conn>& conn) {
  return [weak = std::weak_ptr<Conn>(conn)] {
    if (std::shared_ptr<Conn> c = weak.lock()) c->Close();
  };
}

std::function<void()> CurrentCloser(std::shared_ptr<std::weak_ptr<Conn>> current) {
  return [current = std::move(current)] {
    if (std::shared_ptr<Conn> c = current->lock()) c->Close();
  };
}

namespace {

class InterimCategory final : public boost::system::error_category {
 public:
  const char* name() const noexcept override { return "tether.net.head"; }
  std::string message(int) const override { return "too many interim (1xx) responses"; }
};

}  // namespace

const error_code& TooManyInterimResponses() {
  static const InterimCategory category;
  static const error_code ec(1, category);
  return ec;
}

absl::Status NetError(const std::string& what, const error_code& ec) {
  if (ec == TooManyInterimResponses()) {
    return MakeError(ErrorCode::kProtocol, absl::StrCat(what, ": more than ", kMaxInterimResponses,
                                                        " interim (1xx) responses before the response"));
  }
  if (ec == boost::beast::http::error::body_limit) {
    return MakeError(ErrorCode::kProtocol, absl::StrCat(what, ": the response body exceeds the limit (max_body)"));
  }
  if (ec == boost::beast::http::error::header_limit || ec == boost::beast::http::error::buffer_overflow) {
    return MakeError(ErrorCode::kProtocol, absl::StrCat(what, ": the response head exceeds ", kMaxHeaderBytes / 1024, " KiB"));
  }
  if (ec == boost::beast::websocket::error::message_too_big || ec == boost::beast::websocket::error::buffer_overflow) {
    return MakeError(ErrorCode::kProtocol, absl::StrCat(what, ": a WebSocket message exceeds the limit (max_message)"));
  }
  if (ec == boost::beast::http::error::end_of_stream || ec == asio::error::eof) {
    return absl::UnavailableError(absl::StrCat(what, ": the connection was closed by the server"));
  }
  if (ec == boost::beast::http::error::partial_message) {
    return absl::UnavailableError(absl::StrCat(what, ": the connection was closed in the middle of the response"));
  }
  if (ec.category() == make_error_code(boost::beast::http::error::body_limit).category() ||
      ec.category() == make_error_code(boost::beast::websocket::error::closed).category()) {
    return MakeError(ErrorCode::kProtocol, absl::StrCat(what, ": protocol error: ", ec.message()));
  }
  return absl::UnavailableError(absl::StrCat(what, ": ", ec.message()));
}

absl::Status BodyNetError(const std::string& what, const error_code& ec) {
  if (ec == boost::beast::http::error::buffer_overflow) {
    return MakeError(ErrorCode::kProtocol, absl::StrCat(what, ": a chunk-size line or the trailers of the response exceed ",
                                                        kReadBufferBytes / 1024, " KiB"));
  }
  return NetError(what, ec);
}

absl::Status TimeoutError(const std::string& what, std::chrono::milliseconds after, const char* which) {
  return absl::UnavailableError(absl::StrCat(what, ": timed out after ", after.count(), " ms (", which, ")"));
}

absl::Status ClosedError(const std::string& what) {
  return absl::CancelledError(absl::StrCat(what, ": closed"));
}

absl::Status CancelledError(const std::string& what) {
  return absl::CancelledError(absl::StrCat(what, ": cancelled"));
}

Response ToResponse(const http::response_header<>& h) {
  Response r;
  r.status = static_cast<int>(h.result_int());
  for (const auto& f : h) r.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  return r;
}

asio::awaitable<absl::Status> ClientImpl::Connect(std::shared_ptr<Conn> conn) {
  const Url& u = options_.url;
  std::string where = u.scheme == "unix" ? u.unix_path : absl::StrCat(u.host, ":", u.port);
  std::string what = absl::StrCat("connect to ", where);
  Watchdog wd(ex_, options_.connect_timeout, Closer(conn));
  Socket& sock = conn->stream.lowest();
  error_code ec;
  if (u.scheme == "unix") {
    asio::local::stream_protocol::endpoint ep(u.unix_path);
    sock.open(asio::generic::stream_protocol(AF_UNIX, 0), ec);
    if (!ec) std::tie(ec) = co_await sock.async_connect(ep, kNoThrow);
  } else {
    std::vector<asio::ip::tcp::endpoint> endpoints;
    unsigned short port = static_cast<unsigned short>(std::stoul(u.port));
    asio::ip::address addr = asio::ip::make_address(u.host, ec);
    if (!ec) {
      endpoints.emplace_back(addr, port);
    } else {
      conn->resolver.emplace(ex_);
      auto [rec, results] = co_await conn->resolver->async_resolve(u.host, u.port, kNoThrow);
      conn->resolver.reset();
      if (conn->closed) co_return TimeoutError(what, options_.connect_timeout, "connect_timeout");
      if (rec) co_return absl::UnavailableError(absl::StrCat("resolve ", u.host, ": ", rec.message()));
      for (const auto& r : results) endpoints.push_back(r.endpoint());
      ec = asio::error::host_not_found;
    }
    for (const auto& ep : endpoints) {
      if (conn->closed || IsCancelled(co_await asio::this_coro::cancellation_state)) break;
      if (sock.is_open()) sock.close(ec);
      sock.open(asio::generic::stream_protocol(ep.protocol().family(), IPPROTO_TCP), ec);
      if (ec) continue;
      std::tie(ec) = co_await sock.async_connect(ep, kNoThrow);
      if (!ec) break;
    }
    if (!ec) sock.set_option(asio::ip::tcp::no_delay(true), ec);
  }
  if (wd.fired()) co_return TimeoutError(what, options_.connect_timeout, "connect_timeout");
  if (conn->closed) co_return ClosedError(what);
  if (ec == asio::error::operation_aborted) co_return CancelledError(what);
  if (ec) co_return absl::UnavailableError(absl::StrCat(what, ": ", ec.message()));
  tether::internal::Trace("net.connected", where);
  if (TlsSocket* tls = conn->stream.tls()) {
    absl::Status st = PrepareTls(*tls, u.host, options_.tls);
    if (!st.ok()) co_return st;
    if (IsCancelled(co_await asio::this_coro::cancellation_state)) co_return CancelledError(what);
    std::tie(ec) = co_await tls->async_handshake(asio::ssl::stream_base::client, kNoThrow);
    if (wd.fired()) co_return TimeoutError(absl::StrCat("TLS handshake with ", u.host), options_.connect_timeout,
                                           "connect_timeout");
    if (conn->closed) co_return ClosedError(what);
    if (ec) co_return HandshakeError(*tls, u.host, ec);
    tether::internal::Trace("net.tls", where);
  }
  co_return absl::OkStatus();
}

std::shared_ptr<Conn> ClientImpl::TakeIdle() {
  while (!idle_.empty()) {
    std::shared_ptr<Conn> c = std::move(idle_.back());
    idle_.pop_back();
    if (c->StillIdle()) return c;
  }
  return nullptr;
}

void ClientImpl::PutIdle(std::shared_ptr<Conn> conn) {
  if (conn->closed || idle_.size() >= options_.max_idle_connections) {
    conn->Close();
    return;
  }
  idle_.push_back(std::move(conn));
}

}  // namespace internal
}  // namespace tether::net
