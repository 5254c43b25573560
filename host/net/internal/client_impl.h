// The Client behind http.h, shared by client.cc (calls, streams, upgrades),
// streams.cc and websocket.cc: connections, deadlines and error mapping.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/cancellation_state.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/system/error_code.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "host/net/http.h"
#include "host/net/internal/limits.h"
#include "host/net/internal/stream.h"

namespace tether::net::internal {

namespace http = boost::beast::http;

using HeadParser = http::response_parser<http::empty_body>;
using ResponseParser = http::basic_parser<false>;
using HttpRequest = http::request<http::string_body>;

// One connection: its stream, the bytes read past the last parsed message,
// and a resolver while it connects. Close() ends every pending operation.
struct Conn {
  Conn(const boost::asio::any_io_executor& ex, boost::asio::ssl::context* tls)
      : stream(tls ? Stream(ex, *tls) : Stream(ex)), buffer(kReadBufferBytes) {
    // Beast reads what the buffer has room for (512 bytes when empty).
    buffer.reserve(kReadChunkBytes);
  }
  Stream stream;
  boost::beast::flat_buffer buffer;
  std::optional<boost::asio::ip::tcp::resolver> resolver;
  bool closed = false;

  void Close();
  // For the idle pool: false when the server closed it or sent something
  // unasked (then it is closed).
  bool StillIdle();
};

// Runs `fire` once if it is still alive after `timeout`; the destructor
// disarms it. Every deadline is one of these: firing closes a connection,
// which completes whatever is pending on it with an error.
class Watchdog {
 public:
  Watchdog(const boost::asio::any_io_executor& ex, std::chrono::milliseconds timeout, std::function<void()> fire);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  bool fired() const { return state_->fired; }

 private:
  struct State {
    explicit State(const boost::asio::any_io_executor& ex) : timer(ex) {}
    boost::asio::steady_timer timer;
    std::function<void()> fire;
    bool fired = false;
  };
  std::shared_ptr<State> state_;
};

// A watchdog that closes `conn` when it fires.
std::function<void()> Closer(const std::shared_ptr<Conn>& conn);
// One that closes whichever connection `current` names when it fires (a
// call that may move from a kept-alive connection to a new one).
std::function<void()> CurrentCloser(std::shared_ptr<std::weak_ptr<Conn>> current);

// More than kMaxInterimResponses 1xx heads (ReadHead's own error; NetError
// names it).
const boost::system::error_code& TooManyInterimResponses();

// "<what>: " + a message for `ec` (kUnavailable; kProtocol attached when the
// peer broke HTTP or WebSocket framing).
absl::Status NetError(const std::string& what, const boost::system::error_code& ec);
// NetError for a failure while reading a body: a chunk-size line or trailer
// block that overflows the read buffer is named as such (not as the head).
absl::Status BodyNetError(const std::string& what, const boost::system::error_code& ec);
absl::Status TimeoutError(const std::string& what, std::chrono::milliseconds after, const char* which);
absl::Status ClosedError(const std::string& what);
absl::Status CancelledError(const std::string& what);

// Header names are tokens and values have no line break or NUL
// (kInvalidArgument naming the header, never its value).
absl::Status CheckHeaders(const Headers& headers);

// Whether the awaiting coroutine was cancelled, as
// `IsCancelled(co_await boost::asio::this_coro::cancellation_state)`. A
// coroutine checks it before each await after its first: once cancelled,
// Asio would throw from the next co_await of an operation or awaitable.
inline bool IsCancelled(const boost::asio::cancellation_state& cs) {
  return cs.cancelled() != boost::asio::cancellation_type::none;
}

// The head of a parsed response as a Response (no body).
Response ToResponse(const http::response_header<>& h);

class ClientImpl final : public Client {
 public:
  ClientImpl(boost::asio::any_io_executor ex, ClientOptions options, std::shared_ptr<boost::asio::ssl::context> tls)
      : ex_(std::move(ex)), options_(std::move(options)), tls_(std::move(tls)) {}

  const ClientOptions& options() const override { return options_; }
  boost::asio::awaitable<absl::StatusOr<Response>> Call(Request request) override;
  boost::asio::awaitable<absl::StatusOr<std::unique_ptr<BodyStream>>> Open(Request request) override;
  boost::asio::awaitable<absl::StatusOr<std::unique_ptr<BodyWriter>>> Begin(Request request) override;
  boost::asio::awaitable<absl::StatusOr<std::unique_ptr<RawStream>>> Upgrade(Request request,
                                                                            std::string protocol) override;
  boost::asio::awaitable<absl::StatusOr<std::unique_ptr<WebSocket>>> OpenWebSocket(
      std::string target, Headers headers, std::vector<std::string> subprotocols) override;

  const boost::asio::any_io_executor& executor() const { return ex_; }
  std::shared_ptr<ClientImpl> self() { return std::static_pointer_cast<ClientImpl>(shared_from_this()); }

  std::shared_ptr<Conn> NewConn() { return std::make_shared<Conn>(ex_, tls_.get()); }
  // TCP or Unix connect, then the TLS handshake; bounded by connect_timeout
  // (and by whatever else closes `conn`).
  boost::asio::awaitable<absl::Status> Connect(std::shared_ptr<Conn> conn);
  // "METHOD /base/path" (never the query) for messages.
  std::string Describe(std::string_view method, std::string_view target) const;
  // The request with Host and User-Agent; a bad method, target or header
  // is kInvalidArgument (naming the header, never its value).
  absl::StatusOr<HttpRequest> BuildRequest(const Request& r) const;
  // The Host header value: "localhost" over Unix sockets.
  std::string HostHeader() const;

  // Writes `req` on a kept-alive or a new connection and reads the
  // response head (client.cc).
  template <typename Failed>
  boost::asio::awaitable<absl::StatusOr<std::unique_ptr<HeadParser>>> SendForHead(
      std::shared_ptr<Conn>& conn, std::weak_ptr<Conn>& current, const Watchdog& wd, HttpRequest& req,
      const std::string& what, bool head_request, Failed failed);

  std::shared_ptr<Conn> TakeIdle();
  void PutIdle(std::shared_ptr<Conn> conn);

 private:
  boost::asio::any_io_executor ex_;
  ClientOptions options_;
  std::shared_ptr<boost::asio::ssl::context> tls_;
  std::vector<std::shared_ptr<Conn>> idle_;
};

// DrainInBackground (http.h), with `done` called once it ends: true when
// the connection went back to the pool (tests wait for it).
void DrainInBackground(boost::asio::any_io_executor ex, std::unique_ptr<BodyStream> stream,
                       std::function<void(bool kept)> done);

// The streams over a connection whose response head was read.
std::unique_ptr<BodyStream> MakeBodyStream(std::shared_ptr<ClientImpl> client, std::shared_ptr<Conn> conn,
                                           HeadParser&& head, std::string what);
std::unique_ptr<BodyWriter> MakeBodyWriter(std::shared_ptr<ClientImpl> client, std::shared_ptr<Conn> conn,
                                           std::string what);
std::unique_ptr<RawStream> MakeRawStream(std::shared_ptr<ClientImpl> client, std::shared_ptr<Conn> conn,
                                         Response head, std::string what);

// Beast's http::async_read_some on `conn`: reads and feeds `parser` until a
// put() ends with anything but need_more (success, need_buffer or an
// error); buffer_overflow when the read buffer fills first, end_of_stream
// or partial_message at EOF. Between reads, a PutGate decides whether the
// parser is given the buffer again (read.cc).
boost::asio::awaitable<boost::system::error_code> ReadSome(Conn& conn, ResponseParser& parser);
// ReadSome until the head (`header_only`, not eager) or the whole message
// (eager) is parsed: Beast's async_read_header and async_read.
boost::asio::awaitable<boost::system::error_code> ReadUntil(Conn& conn, ResponseParser& parser, bool header_only);

// Reads a response head on `conn` (header limit, HEAD has no body, 1xx
// skipped up to kMaxInterimResponses). A declared Content-Length above
// `body_limit` is http::error::body_limit (nullopt: no limit, a stream).
boost::asio::awaitable<boost::system::error_code> ReadHead(Conn& conn, std::unique_ptr<HeadParser>& parser,
                                                           bool head_request,
                                                           std::optional<std::uint64_t> body_limit);

}  // namespace tether::net::internal
