// Buffered calls, streamed responses, chunked requests and upgrades
// (http.h, Client).
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/write.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tether/errors.h"
#include "host/net/internal/client_impl.h"

namespace tether::net::internal {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;
constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);

bool IsTokenChar(char c) {
  return absl::ascii_isalnum(c) || std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool IsToken(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!IsTokenChar(c)) return false;
  }
  return true;
}

bool IsFieldValue(std::string_view s) {
  for (char c : s) {
    if (c == '\r' || c == '\n' || c == '\0') return false;
  }
  return true;
}

bool IsTarget(std::string_view s) {
  if (s.empty() || s[0] != '/') return false;
  for (unsigned char c : s) {
    if (c <= 0x20 || c == 0x7f) return false;
  }
  return true;
}

}  // namespace

absl::Status CheckHeaders(const Headers& headers) {
  for (const auto& [name, value] : headers) {
    if (!IsToken(name)) return absl::InvalidArgumentError("net: a bad header name");
    if (!IsFieldValue(value)) {
      return absl::InvalidArgumentError(absl::StrCat("net: header ", name, ": a line break or NUL in the value"));
    }
  }
  return absl::OkStatus();
}

std::string ClientImpl::Describe(std::string_view method, std::string_view target) const {
  std::string_view path = target.substr(0, target.find_first_of("?#"));
  return absl::StrCat(std::string(method), " ", options_.url.base_path, std::string(path));
}

std::string ClientImpl::HostHeader() const {
  const Url& u = options_.url;
  if (u.scheme == "unix") return "localhost";
  std::string host = u.host.find(':') != std::string::npos ? absl::StrCat("[", u.host, "]") : u.host;
  std::string_view default_port = u.tls() ? "443" : "80";
  if (u.port != default_port) absl::StrAppend(&host, ":", u.port);
  return host;
}

absl::StatusOr<HttpRequest> ClientImpl::BuildRequest(const Request& r) const {
  if (!IsToken(r.method)) return absl::InvalidArgumentError("net: a bad request method");
  if (!IsTarget(r.target)) {
    return absl::InvalidArgumentError(
        absl::StrCat(Describe(r.method, ""), ": the request target must start with '/' and have no spaces"));
  }
  HttpRequest req;
  req.method_string(r.method);
  req.target(absl::StrCat(options_.url.base_path, r.target));
  req.version(11);
  if (absl::Status st = CheckHeaders(r.headers); !st.ok()) return st;
  for (const auto& [name, value] : r.headers) req.insert(name, value);
  if (req.find(http::field::host) == req.end()) req.set(http::field::host, HostHeader());
  if (req.find(http::field::user_agent) == req.end()) req.set(http::field::user_agent, "tether");
  req.body() = r.body;
  req.prepare_payload();
  return req;
}

asio::awaitable<error_code> ReadHead(Conn& conn, std::unique_ptr<HeadParser>& parser, bool head_request,
                                     std::optional<std::uint64_t> body_limit) {
  for (int interim = 0;; ++interim) {
    if (interim > kMaxInterimResponses) co_return TooManyInterimResponses();
    parser = std::make_unique<HeadParser>();
    parser->header_limit(kMaxHeaderBytes);
    // Beast compares a Content-Length with the limit once, when the head
    // ends (its default is 8 MiB), so the caller's limit must be set here.
    if (body_limit) {
      parser->body_limit(*body_limit);
    } else {
      parser->body_limit(boost::none);
    }
    if (head_request) parser->skip(true);
    if (IsCancelled(co_await asio::this_coro::cancellation_state)) co_return asio::error::operation_aborted;
    if (error_code ec = co_await ReadUntil(conn, *parser, /*header_only=*/true)) co_return ec;
    // 1xx other than 101 are interim: the real head follows.
    int status = static_cast<int>(parser->get().result_int());
    if (status >= 200 || status == 101) co_return error_code();
  }
}

// Call, Open and Upgrade: sends `req` on an idle kept-alive connection
// when there is one, else on a new one, and reads the response head. `conn`
// is the connection used (`current` too, for the caller's watchdog). A
// reused connection whose write failed never delivered the request (the
// server had dropped it), so a new connection carries it, once; any other
// failure closes `conn` and is passed through `failed` (which names the
// watchdog's timeout when that is what ended it). A reused connection
// that fails after the write is not retried: the request may have been
// acted on (a POST that ran a command), and only the caller knows whether
// it may be sent again.
template <typename Failed>
asio::awaitable<absl::StatusOr<std::unique_ptr<HeadParser>>> ClientImpl::SendForHead(
    std::shared_ptr<Conn>& conn, std::weak_ptr<Conn>& current, const Watchdog& wd, HttpRequest& req,
    const std::string& what, bool head_request, Failed failed) {
  for (int attempt = 0;; ++attempt) {
    if (IsCancelled(co_await asio::this_coro::cancellation_state)) co_return CancelledError(what);
    conn = attempt == 0 ? TakeIdle() : nullptr;
    const bool reused = conn != nullptr;
    if (!reused) {
      conn = NewConn();
      current = conn;
      absl::Status st = co_await Connect(conn);
      if (!st.ok()) co_return failed(st);
      if (IsCancelled(co_await asio::this_coro::cancellation_state)) co_return CancelledError(what);
    }
    current = conn;
    auto [ec, written] = co_await http::async_write(conn->stream, req, kNoThrow);
    if (ec) {
      conn->Close();
      if (reused && !wd.fired()) continue;
      co_return failed(NetError(what, ec));
    }
    if (IsCancelled(co_await asio::this_coro::cancellation_state)) co_return CancelledError(what);
    std::unique_ptr<HeadParser> head;
    ec = co_await ReadHead(*conn, head, head_request, std::nullopt);
    if (ec) {
      conn->Close();
      co_return failed(NetError(what, ec));
    }
    co_return head;
  }
}

// A non-2xx answer's head and the first kMaxErrorBodyBytes of its body,
// however long the body declares or turns out to be; the connection is
// closed after it.
static asio::awaitable<Response> ReadErrorBody(std::shared_ptr<Conn> conn, std::unique_ptr<HeadParser> head) {
  http::response_parser<http::buffer_body> parser(std::move(*head));
  parser.body_limit(boost::none);  // bounded below, by what is kept
  std::string body;
  std::string chunk(kReadChunkBytes, '\0');
  while (!parser.is_done() && body.size() < kMaxErrorBodyBytes) {
    parser.get().body().data = chunk.data();
    parser.get().body().size = chunk.size();
    error_code ec = co_await ReadSome(*conn, parser);
    body.append(chunk.data(), chunk.size() - parser.get().body().size);
    if (ec && ec != http::error::need_buffer) break;
  }
  if (body.size() > kMaxErrorBodyBytes) body.resize(kMaxErrorBodyBytes);
  Response response = ToResponse(parser.get().base());
  response.body = std::move(body);
  conn->Close();  // (never pooled: what is left of the body is unread)
  co_return response;
}

asio::awaitable<absl::StatusOr<Response>> ClientImpl::Call(Request request) {
  std::shared_ptr<ClientImpl> keep = self();
  std::string what = Describe(request.method, request.target);
  absl::StatusOr<HttpRequest> req = BuildRequest(request);
  if (!req.ok()) co_return req.status();
  auto current = std::make_shared<std::weak_ptr<Conn>>();
  Watchdog wd(ex_, options_.request_timeout, CurrentCloser(current));
  auto failed = [&](const absl::Status& st) -> absl::Status {
    return wd.fired() ? TimeoutError(what, options_.request_timeout, "request_timeout") : st;
  };
  std::shared_ptr<Conn> conn;
  absl::StatusOr<std::unique_ptr<HeadParser>> sent =
      co_await SendForHead(conn, *current, wd, *req, what, request.method == "HEAD", failed);
  if (!sent.ok()) co_return sent.status();
  std::unique_ptr<HeadParser> head = *std::move(sent);
  if (const int status = static_cast<int>(head->get().result_int()); status < 200 || status > 299) {
    // A refusal is read for its message only: its first
    // kMaxErrorBodyBytes, whatever it declares, so that a huge one keeps
    // its status and its words (the caller makes an HttpError of it).
    co_return co_await ReadErrorBody(std::move(conn), std::move(head));
  }
  // Beast compares a declared length with the limit once, when the head
  // ends (and a chunked body chunk by chunk as it reads): here, before a
  // body byte is read or reserved.
  if (head->content_length() && *head->content_length() > options_.max_body) {
    conn->Close();
    co_return failed(NetError(what, http::error::body_limit));
  }
  http::response_parser<http::string_body> parser(std::move(*head));
  parser.body_limit(options_.max_body);
  if (!parser.is_done()) {
    if (IsCancelled(co_await asio::this_coro::cancellation_state)) co_return CancelledError(what);
    error_code ec = co_await ReadUntil(*conn, parser, /*header_only=*/false);
    if (ec) {
      conn->Close();
      co_return failed(BodyNetError(what, ec));
    }
  }
  Response response = ToResponse(parser.get().base());
  response.body = std::move(parser.get().body());
  if (parser.get().keep_alive() && !conn->closed) {
    PutIdle(std::move(conn));
  } else {
    conn->Close();
  }
  co_return response;
}

asio::awaitable<absl::StatusOr<std::unique_ptr<BodyStream>>> ClientImpl::Open(Request request) {
  std::shared_ptr<ClientImpl> keep = self();
  std::string what = Describe(request.method, request.target);
  absl::StatusOr<HttpRequest> req = BuildRequest(request);
  if (!req.ok()) co_return req.status();
  auto current = std::make_shared<std::weak_ptr<Conn>>();
  Watchdog wd(ex_, options_.request_timeout, CurrentCloser(current));
  auto failed = [&](const absl::Status& st) -> absl::Status {
    return wd.fired() ? TimeoutError(what, options_.request_timeout, "request_timeout") : st;
  };
  std::shared_ptr<Conn> conn;
  absl::StatusOr<std::unique_ptr<HeadParser>> head =
      co_await SendForHead(conn, *current, wd, *req, what, request.method == "HEAD", failed);
  if (!head.ok()) co_return head.status();
  co_return MakeBodyStream(std::move(keep), std::move(conn), std::move(**head), std::move(what));
}

asio::awaitable<absl::StatusOr<std::unique_ptr<BodyWriter>>> ClientImpl::Begin(Request request) {
  std::shared_ptr<ClientImpl> keep = self();
  std::string what = Describe(request.method, request.target);
  request.body.clear();
  absl::StatusOr<HttpRequest> req = BuildRequest(request);
  if (!req.ok()) co_return req.status();
  req->chunked(true);
  auto current = std::make_shared<std::weak_ptr<Conn>>();
  Watchdog wd(ex_, options_.request_timeout, CurrentCloser(current));
  auto failed = [&](const absl::Status& st) -> absl::Status {
    return wd.fired() ? TimeoutError(what, options_.request_timeout, "request_timeout") : st;
  };
  // As SendForHead: a kept-alive connection first; one whose write of the
  // head failed never delivered it, so a new connection carries it.
  for (int attempt = 0;; ++attempt) {
    if (IsCancelled(co_await asio::this_coro::cancellation_state)) co_return CancelledError(what);
    std::shared_ptr<Conn> conn = attempt == 0 ? TakeIdle() : nullptr;
    const bool reused = conn != nullptr;
    if (!reused) {
      conn = NewConn();
      *current = conn;
      absl::Status st = co_await Connect(conn);
      if (!st.ok()) co_return failed(st);
      if (IsCancelled(co_await asio::this_coro::cancellation_state)) co_return CancelledError(what);
    }
    *current = conn;
    http::request_serializer<http::string_body> sr(*req);
    auto [ec, written] = co_await http::async_write_header(conn->stream, sr, kNoThrow);
    if (ec) {
      conn->Close();
      if (reused && !wd.fired()) continue;
      co_return failed(NetError(what, ec));
    }
    co_return MakeBodyWriter(std::move(keep), std::move(conn), std::move(what));
  }
}

asio::awaitable<absl::StatusOr<std::unique_ptr<RawStream>>> ClientImpl::Upgrade(Request request,
                                                                                std::string protocol) {
  std::shared_ptr<ClientImpl> keep = self();
  std::string what = Describe(request.method, request.target);
  if (!IsToken(protocol)) co_return absl::InvalidArgumentError(absl::StrCat(what, ": a bad upgrade protocol"));
  absl::StatusOr<HttpRequest> req = BuildRequest(request);
  if (!req.ok()) co_return req.status();
  req->set(http::field::connection, "Upgrade");
  req->set(http::field::upgrade, protocol);
  auto current = std::make_shared<std::weak_ptr<Conn>>();
  Watchdog wd(ex_, options_.connect_timeout, CurrentCloser(current));
  auto failed = [&](const absl::Status& st) -> absl::Status {
    return wd.fired() ? TimeoutError(what, options_.connect_timeout, "connect_timeout") : st;
  };
  std::shared_ptr<Conn> conn;
  absl::StatusOr<std::unique_ptr<HeadParser>> sent =
      co_await SendForHead(conn, *current, wd, *req, what, false, failed);
  if (!sent.ok()) co_return sent.status();
  std::unique_ptr<HeadParser> head = *std::move(sent);
  error_code ec;
  int status = static_cast<int>(head->get().result_int());
  if (status == 101 || status == 200) {
    if (status == 200 && (head->chunked() || head->content_length())) {
      conn->Close();
      co_return MakeError(ErrorCode::kProtocol, absl::StrCat(what, ": a 200 with a framed body is not an upgrade"));
    }
    co_return MakeRawStream(std::move(keep), std::move(conn), ToResponse(head->get().base()), std::move(what));
  }
  const bool too_long = head->content_length() && *head->content_length() > kMaxErrorBodyBytes;
  http::response_parser<http::string_body> parser(std::move(*head));
  parser.body_limit(kMaxErrorBodyBytes);
  if (!too_long && !parser.is_done() && !IsCancelled(co_await asio::this_coro::cancellation_state)) {
    ec = co_await ReadUntil(*conn, parser, /*header_only=*/false);
  }
  conn->Close();
  Response response = ToResponse(parser.get().base());
  if (!ec) response.body = std::move(parser.get().body());
  co_return HttpError(response, what);
}

}  // namespace tether::net::internal
