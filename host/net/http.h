// tether::net: the one HTTP/1.1, WebSocket and TLS client the native
// providers use (Boost.Beast over OpenSSL). Provider code never touches a
// socket: it names an endpoint, sends requests and reads bodies, streams and
// messages through the small surface below.
//
//   absl::StatusOr<net::Url> url = net::ParseUrl("https://api.example.com/v1");
//   auto client = net::Client::Make(ex, {.url = *url});
//   net::Request req{.method = "GET", .target = "/x"};
//   absl::StatusOr<net::Response> r = co_await (*client)->Call(std::move(req));
//   if (r.ok() && !net::IsSuccess(*r)) return net::HttpError(*r, "GET /x");
//
// (g++ 12: build a Request as a named variable, not as a braced aggregate
// inside the co_await operand; the compiler mis-destroys such temporaries.)
//
// Rules every call keeps:
// - Certificates are verified by default (the system store, plus a CA the
//   caller names), with SNI and host name checks; a bad certificate is an
//   UntrustedServerError (below) that says why, never retried. Plain http:// and ws:// are refused
//   unless the host is a loopback address (127.0.0.0/8, ::1, localhost);
//   unix:// (HTTP over a Unix socket, the Docker default) is local by
//   definition.
// - Every await is bounded: connecting and TLS by connect_timeout, a
//   buffered Call by request_timeout. Streams, raw streams and WebSockets
//   have no idle deadline of their own (a supervisor may be silent for
//   hours) but honour Asio's per-operation cancellation (terminal) and
//   Close(), as the Channel contract (include/tether/transport.h) requires.
// - Limits are checked before allocation: a buffered body above max_body, a
//   header block above 64 KiB, a WebSocket message above max_message are
//   errors (kProtocol attached), never truncations.
// - Connections are kept alive in a small idle pool per Client. Every call
//   (Call, Open, Begin, Upgrade, OpenWebSocket) starts on an idle one when
//   there is one, which saves the TCP and TLS round trips of a new
//   connection (a warm start: issue 32); a stream owns its connection
//   while it lasts, and a body read to its end gives it back; an upgrade
//   and a WebSocket keep theirs. A request is sent again on a new
//   connection only when writing it to a kept-alive one failed (it never
//   reached the server); never once the server may have acted on it.
// - Errors are Status values, never exceptions: kUnavailable for a refused,
//   reset or timed-out connection (a timeout names itself: "... timed out
//   after N ms (connect_timeout)"), kInvalidArgument for a bad URL, option
//   or header, kCancelled for an operation cancelled ("...: cancelled") or
//   ended by Close() ("...: closed"), and a body or frame that breaks HTTP
//   or WebSocket is an error with ErrorCode kProtocol attached (include/tether/errors.h).
// - A Client and everything it returns are used from its executor's one
//   thread (an io_context run by one thread, or a strand).
// - No header value (Authorization, X-API-KEY, tokens) and no query string
//   ever appears in an error message: messages name the method, the path
//   without its query, and the server's own message (quoted as sent: a
//   server that echoes a credential back would show it).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace tether::net {

// An endpoint: scheme://host[:port][/base]. `base_path` ("" or "/a/b", no
// trailing slash) is prefixed to every request target.
struct Url {
  std::string scheme;     // "https", "http", "wss", "ws" or "unix"
  std::string host;       // "api.e2b.app", "127.0.0.1", "::1" (no brackets); "localhost" for unix
  std::string port;       // "443", "80" when not given ("" for unix)
  std::string base_path;  // "" or "/prefix"
  std::string unix_path;  // unix:///var/run/docker.sock -> "/var/run/docker.sock"
  bool tls() const { return scheme == "https" || scheme == "wss"; }
};

// Parses and checks an endpoint (kInvalidArgument with the reason: unknown
// scheme, plain http to a host that is not loopback, userinfo, a query or
// fragment, a bad port). "tcp://host:port" (DOCKER_HOST) is read as http
// (port 2375 when not given). A trailing "/" of the path is dropped.
absl::StatusOr<Url> ParseUrl(std::string_view text);

// True for 127.0.0.0/8, ::1 and "localhost".
bool IsLoopbackHost(std::string_view host);

// Percent-encodes `s` for a query value or a path segment (RFC 3986
// unreserved characters pass).
std::string UrlEncode(std::string_view s);

struct TlsOptions {
  std::string ca_file;            // PEM file trusted in addition to the system store
  std::string ca_pem;             // PEM text trusted in addition (kubeconfig certificate-authority-data)
  bool system_store = true;       // also trust the system's CAs
  std::string client_cert_pem;    // client certificate (kubeconfig), PEM
  std::string client_key_pem;     // its key, PEM
  bool insecure_skip_verify = false;  // only where the user's own config says so
  std::string server_name;        // SNI and name check; empty: the URL's host
};

struct ClientOptions {
  Url url;
  TlsOptions tls;
  std::chrono::milliseconds connect_timeout{10000};  // TCP + TLS + upgrade
  std::chrono::milliseconds request_timeout{30000};  // a whole buffered Call
  std::size_t max_body = 64u << 20;                   // buffered response bodies
  std::size_t max_message = 16u << 20;                // one WebSocket message
  std::size_t max_idle_connections = 4;
};

using Headers = std::vector<std::pair<std::string, std::string>>;

struct Request {
  std::string method = "GET";
  std::string target = "/";  // path and query, encoded; base_path is prefixed
  Headers headers;           // Host, Content-Length and User-Agent are added
  std::string body;
};

struct Response {
  int status = 0;
  Headers headers;
  std::string body;  // empty for streams
  // The first value of header `name` (case-insensitive), or "".
  std::string_view header(std::string_view name) const;
};

inline bool IsSuccess(const Response& r) { return r.status >= 200 && r.status < 300; }

// A 4xx/5xx as a Status: 400 kInvalidArgument, 401 kUnauthenticated, 403
// kPermissionDenied, 404 kNotFound, 409 kFailedPrecondition, 408/429/502/503/
// 504 kUnavailable, others kInternal; the message is "<what>: HTTP <code>: "
// + the server's message (a JSON "message" field, else the body's first 200
// printable bytes).
absl::Status HttpError(const Response& r, std::string_view what);

// A server whose TLS certificate failed verification (expired, for another
// name, from a CA not trusted): kPermissionDenied, "<message> (not
// retried: ...)". Not kUnavailable: every retry loop retries that, and a
// certificate does not get better in a second (a start that retried it
// would end in OUTCOME_UNKNOWN for a launch that was never sent). Nothing
// was sent over the connection.
absl::Status UntrustedServerError(std::string_view message);
// Whether `st` is (or wraps the payload of) an UntrustedServerError, not a
// server's own 403.
bool IsUntrustedServer(const absl::Status& st);

// A response body read as it arrives (sized, chunked, or to the close). It
// owns its connection: read to its end (ReadSome gave 0) on a connection
// the server keeps alive, that goes back to the client's idle pool;
// otherwise it is closed when the stream goes.
class BodyStream {
 public:
  virtual ~BodyStream() = default;
  virtual const Response& head() const = 0;  // status and headers
  // Some bytes of the body; 0 at its end. An empty `buf` is kInvalidArgument.
  virtual boost::asio::awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf) = 0;
  virtual void Close() = 0;  // idempotent; pending reads complete with an error
};

// For a program that owns its process and ends it with exit() (the CLI),
// called before any TLS is used: OpenSSL's own exit handler
// (OPENSSL_cleanup) is not installed, and the kernel frees OpenSSL's state
// with the process. That handler deletes OpenSSL's per-thread keys while
// threads of the gRPC providers (modal, boxd) may still be ending; their
// thread-exit handlers then never run, and each leaks its error queue
// (LeakSanitizer in CI: 2 x 904 bytes from CRYPTO_zalloc after `tether run
// --provider modal`) or frees it twice (grpc/grpc#38539). A library in
// another program's process leaves that program's OpenSSL alone.
void LeaveTlsStateToProcessExit();

// Reads what is left of `stream`'s body on `ex` in the background, at most
// 64 KiB for at most 2 s, so that its connection goes back to the idle pool
// (a protocol that knows its last message came, as Connect's end-of-stream,
// before the HTTP body's own end); past either bound it is closed. For a
// stream the caller is done with; nothing it reads is kept.
void DrainInBackground(boost::asio::any_io_executor ex, std::unique_ptr<BodyStream> stream);

// `stream`'s head with the first 64 KiB of its body (as a buffered Call
// keeps of a non-2xx answer): a stream opened on an error status, read for
// its message. A read error ends the body where it was; the caller closes
// the stream.
boost::asio::awaitable<Response> ReadErrorResponse(BodyStream& stream);

// A request whose body is written as it is produced (chunked), then its
// response read as a stream.
class BodyWriter {
 public:
  virtual ~BodyWriter() = default;
  virtual boost::asio::awaitable<absl::Status> Write(std::string_view bytes) = 0;  // one chunk ("" sends nothing)
  // Ends the body and reads the response head (bounded by request_timeout).
  virtual boost::asio::awaitable<absl::StatusOr<std::unique_ptr<BodyStream>>> Finish() = 0;
  // Abandons the request (closes its connection); after a Finish that
  // returned a stream, a no-op: the stream owns the connection then.
  virtual void Close() = 0;
};

// The connection after an HTTP upgrade (Docker's hijacked exec): raw bytes
// both ways.
class RawStream {
 public:
  virtual ~RawStream() = default;
  virtual const Response& head() const = 0;  // the 101 (or 200) response
  // Bytes the server sent right after the head come first. 0: EOF (a TLS
  // peer that closes without close_notify counts as EOF too).
  virtual boost::asio::awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf) = 0;
  virtual boost::asio::awaitable<absl::Status> Write(std::string_view bytes) = 0;
  // Half-close (TLS: close_notify is not sent; only TCP); a Write after it
  // is kFailedPrecondition.
  virtual void ShutdownWrite() = 0;
  virtual void Close() = 0;          // idempotent; pending operations complete with an error
};

struct WebSocketMessage {
  bool binary = true;
  std::string data;
};

class WebSocket {
 public:
  virtual ~WebSocket() = default;
  virtual const Response& head() const = 0;      // the 101 response
  virtual std::string_view subprotocol() const = 0;  // as the server chose it
  // The next whole message; kUnavailable with the close code and reason
  // once the peer closed (close_code() then says which). One Read and one
  // Write may be pending at a time. A cancelled Read loses nothing (the
  // next Read gets the message); a cancelled Write closes the WebSocket.
  virtual boost::asio::awaitable<absl::StatusOr<WebSocketMessage>> Read() = 0;
  virtual boost::asio::awaitable<absl::Status> Write(std::string_view data, bool binary = true) = 0;
  // The close handshake, bounded by connect_timeout; then as Close().
  virtual boost::asio::awaitable<void> AsyncClose(int code = 1000) = 0;
  virtual void Close() = 0;  // abrupt, idempotent
  // The peer's close code once it closed; nullopt before, or when the
  // connection ended without a close frame.
  virtual std::optional<int> close_code() const = 0;
};

// One origin (scheme, host, port, TLS settings). Owned by shared_ptr: its
// streams keep it alive.
class Client : public std::enable_shared_from_this<Client> {
 public:
  static absl::StatusOr<std::shared_ptr<Client>> Make(boost::asio::any_io_executor ex, ClientOptions options);
  virtual ~Client() = default;
  virtual const ClientOptions& options() const = 0;

  // The whole exchange, buffered (any HTTP status is a Response; only a
  // failure to get one is an error), bounded by request_timeout. It runs on
  // an idle kept-alive connection when there is one; a pooled connection
  // the server closed is replaced, and the request is sent again only when
  // writing it failed (never once a response may have been produced).
  virtual boost::asio::awaitable<absl::StatusOr<Response>> Call(Request request) = 0;
  // Sends `request` and returns once the response head arrived; the body
  // is read from the stream. (A non-2xx response is returned too; its body
  // can be read the same way.) Connecting and the head are bounded by
  // request_timeout; the body by nothing but cancellation and Close().
  virtual boost::asio::awaitable<absl::StatusOr<std::unique_ptr<BodyStream>>> Open(Request request) = 0;
  // Sends the head of `request` (its body is ignored) with chunked
  // transfer encoding; the body follows through the writer.
  virtual boost::asio::awaitable<absl::StatusOr<std::unique_ptr<BodyWriter>>> Begin(Request request) = 0;
  // Sends `request` with Connection: Upgrade and Upgrade: `protocol`; a 101
  // (or a 200 the server keeps open, as Docker's exec start may) hands over
  // the connection (a 200 with a Content-Length or chunked body is
  // kProtocol). Any other status is an HttpError. The whole exchange is
  // bounded by connect_timeout.
  virtual boost::asio::awaitable<absl::StatusOr<std::unique_ptr<RawStream>>> Upgrade(Request request,
                                                                                    std::string protocol) = 0;
  // Opens a WebSocket at `target` offering `subprotocols` in order (the
  // scheme's ws/wss follows the client's http/https); bounded by
  // connect_timeout. A refusal is an HttpError; a subprotocol the server
  // chose that was not offered is kProtocol. No permessage-deflate.
  virtual boost::asio::awaitable<absl::StatusOr<std::unique_ptr<WebSocket>>> OpenWebSocket(
      std::string target, Headers headers, std::vector<std::string> subprotocols) = 0;
};

}  // namespace tether::net
