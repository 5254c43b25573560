// The streams over one connection (http.h): a response body read as it
// arrives, a chunked request body, and the raw bytes after an upgrade.
// None has a deadline of its own; each honours per-operation cancellation
// (the coroutine's slot reaches the socket) and Close().
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <boost/beast/http/error.hpp>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "host/net/internal/client_impl.h"

namespace tether::net::internal {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;
constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);
using BodyParser = http::response_parser<http::buffer_body>;

// The error for a failed operation on `conn`: closed, cancelled or the
// connection's own.
absl::Status OpError(const Conn& conn, const std::string& what, const error_code& ec) {
  if (conn.closed) return ClosedError(what);
  if (ec == asio::error::operation_aborted) return CancelledError(what);
  return NetError(what, ec);
}

class BodyStreamImpl final : public BodyStream {
 public:
  BodyStreamImpl(std::shared_ptr<ClientImpl> client, std::shared_ptr<Conn> conn, HeadParser&& head, std::string what)
      : client_(std::move(client)),
        conn_(std::move(conn)),
        parser_(std::make_unique<BodyParser>(std::move(head))),
        head_(ToResponse(parser_->get().base())),
        what_(std::move(what)) {
    parser_->body_limit(boost::none);
  }
  ~BodyStreamImpl() override {
    if (!released_) conn_->Close();
  }

  const Response& head() const override { return head_; }

  asio::awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf) override {
    if (released_) co_return 0;  // (conn_ may be another call's now)
    std::shared_ptr<Conn> conn = conn_;
    if (conn->closed) co_return ClosedError(what_);
    if (buf.empty()) co_return absl::InvalidArgumentError(absl::StrCat(what_, ": ReadSome into an empty buffer"));
    if (failed_) co_return absl::UnavailableError(absl::StrCat(what_, ": the body failed earlier"));
    for (bool first = true;; first = false) {
      if (parser_->is_done()) {
        Release();
        co_return 0;
      }
      if (!first && IsCancelled(co_await asio::this_coro::cancellation_state)) co_return CancelledError(what_);
      auto& body = parser_->get().body();
      body.data = buf.data();
      body.size = buf.size();
      body.more = true;
      error_code ec = co_await internal::ReadSome(*conn, *parser_);
      if (ec == http::error::need_buffer) ec = {};
      std::size_t got = buf.size() - parser_->get().body().size;
      if (got > 0) co_return got;
      if (ec) {
        if (ec != asio::error::operation_aborted) failed_ = true;
        if (!conn->closed && ec == http::error::buffer_overflow) co_return BodyNetError(what_, ec);
        co_return OpError(*conn, what_, ec);
      }
    }
  }

  void Close() override {
    if (!released_) conn_->Close();
  }

 private:
  // The body was read to its end: a connection the server keeps alive goes
  // back to the client's idle pool (the next call or stream skips TCP and
  // TLS); PutIdle closes it when it is not fit (closed, pool full), and
  // TakeIdle when the server sent anything more.
  void Release() {
    if (released_) return;
    released_ = true;
    if (parser_->get().keep_alive() && !conn_->closed) {
      client_->PutIdle(conn_);
    } else {
      conn_->Close();
    }
  }

  std::shared_ptr<ClientImpl> client_;
  std::shared_ptr<Conn> conn_;
  std::unique_ptr<BodyParser> parser_;
  Response head_;
  std::string what_;
  bool failed_ = false;
  bool released_ = false;  // conn_ went back to the pool (or was closed) at the body's end
};

class BodyWriterImpl final : public BodyWriter {
 public:
  BodyWriterImpl(std::shared_ptr<ClientImpl> client, std::shared_ptr<Conn> conn, std::string what)
      : client_(std::move(client)), conn_(std::move(conn)), what_(std::move(what)) {}
  ~BodyWriterImpl() override {
    if (!finished_) conn_->Close();
  }

  asio::awaitable<absl::Status> Write(std::string_view bytes) override {
    if (finished_) co_return absl::FailedPreconditionError(absl::StrCat(what_, ": Write after Finish"));
    std::shared_ptr<Conn> conn = conn_;
    if (conn->closed) co_return ClosedError(what_);
    if (bytes.empty()) co_return absl::OkStatus();  // an empty chunk would end the body
    auto [ec, n] = co_await asio::async_write(conn->stream, http::make_chunk(asio::buffer(bytes)), kNoThrow);
    if (ec) {
      absl::Status st = OpError(*conn, what_, ec);
      conn->Close();  // a chunk may be half sent
      co_return st;
    }
    co_return absl::OkStatus();
  }

  asio::awaitable<absl::StatusOr<std::unique_ptr<BodyStream>>> Finish() override {
    if (finished_) co_return absl::FailedPreconditionError(absl::StrCat(what_, ": Finish twice"));
    std::shared_ptr<Conn> conn = conn_;
    if (conn->closed) co_return ClosedError(what_);
    finished_ = true;
    Watchdog wd(client_->executor(), client_->options().request_timeout, Closer(conn));
    auto failed = [&](const error_code& ec) -> absl::Status {
      absl::Status st = wd.fired() ? TimeoutError(what_, client_->options().request_timeout, "request_timeout")
                                   : OpError(*conn, what_, ec);
      conn->Close();
      return st;
    };
    auto [ec, n] = co_await asio::async_write(conn->stream, http::make_chunk_last(), kNoThrow);
    if (ec) co_return failed(ec);
    if (IsCancelled(co_await asio::this_coro::cancellation_state)) co_return failed(asio::error::operation_aborted);
    std::unique_ptr<HeadParser> head;
    ec = co_await ReadHead(*conn, head, false, std::nullopt);
    if (ec) co_return failed(ec);
    handed_over_ = true;
    co_return MakeBodyStream(client_, conn, std::move(*head), what_);
  }

  void Close() override {
    if (!handed_over_) conn_->Close();
  }

 private:
  std::shared_ptr<ClientImpl> client_;
  std::shared_ptr<Conn> conn_;
  std::string what_;
  bool finished_ = false;
  // The response stream Finish returned owns the connection (and may give
  // it back to the pool, for another call): this writer no longer closes it.
  bool handed_over_ = false;
};

class RawStreamImpl final : public RawStream {
 public:
  RawStreamImpl(std::shared_ptr<ClientImpl> client, std::shared_ptr<Conn> conn, Response head, std::string what)
      : client_(std::move(client)), conn_(std::move(conn)), head_(std::move(head)), what_(std::move(what)) {}
  ~RawStreamImpl() override { conn_->Close(); }

  const Response& head() const override { return head_; }

  asio::awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf) override {
    std::shared_ptr<Conn> conn = conn_;
    if (conn->closed) co_return ClosedError(what_);
    if (buf.empty()) co_return absl::InvalidArgumentError(absl::StrCat(what_, ": ReadSome into an empty buffer"));
    if (conn->buffer.size() > 0) {
      // Bytes the parser read past the response head come first.
      std::size_t n = asio::buffer_copy(asio::buffer(buf.data(), buf.size()), conn->buffer.data());
      conn->buffer.consume(n);
      co_return n;
    }
    if (eof_) co_return 0;
    auto [ec, n] = co_await conn->stream.async_read_some(asio::buffer(buf.data(), buf.size()), kNoThrow);
    if (n > 0) co_return n;
    if (ec == asio::error::eof || ec == asio::ssl::error::stream_truncated) {
      eof_ = true;
      co_return 0;
    }
    if (ec) co_return OpError(*conn, what_, ec);
    co_return absl::UnavailableError(absl::StrCat(what_, ": a read returned nothing"));
  }

  asio::awaitable<absl::Status> Write(std::string_view bytes) override {
    std::shared_ptr<Conn> conn = conn_;
    if (conn->closed) co_return ClosedError(what_);
    if (write_shut_) co_return absl::FailedPreconditionError(absl::StrCat(what_, ": Write after ShutdownWrite"));
    auto [ec, n] = co_await asio::async_write(conn->stream, asio::buffer(bytes.data(), bytes.size()), kNoThrow);
    if (ec) co_return OpError(*conn, what_, ec);
    co_return absl::OkStatus();
  }

  void ShutdownWrite() override {
    if (conn_->closed || write_shut_) return;
    write_shut_ = true;
    error_code ec;
    conn_->stream.lowest().shutdown(asio::socket_base::shutdown_send, ec);
  }

  void Close() override { conn_->Close(); }

 private:
  std::shared_ptr<ClientImpl> client_;
  std::shared_ptr<Conn> conn_;
  Response head_;
  std::string what_;
  bool eof_ = false;
  bool write_shut_ = false;
};

}  // namespace

std::unique_ptr<BodyStream> MakeBodyStream(std::shared_ptr<ClientImpl> client, std::shared_ptr<Conn> conn,
                                           HeadParser&& head, std::string what) {
  return std::make_unique<BodyStreamImpl>(std::move(client), std::move(conn), std::move(head), std::move(what));
}

std::unique_ptr<BodyWriter> MakeBodyWriter(std::shared_ptr<ClientImpl> client, std::shared_ptr<Conn> conn,
                                           std::string what) {
  return std::make_unique<BodyWriterImpl>(std::move(client), std::move(conn), std::move(what));
}

std::unique_ptr<RawStream> MakeRawStream(std::shared_ptr<ClientImpl> client, std::shared_ptr<Conn> conn,
                                         Response head, std::string what) {
  return std::make_unique<RawStreamImpl>(std::move(client), std::move(conn), std::move(head), std::move(what));
}

}  // namespace tether::net::internal

namespace tether::net {

void DrainInBackground(boost::asio::any_io_executor ex, std::unique_ptr<BodyStream> stream) {
  internal::DrainInBackground(std::move(ex), std::move(stream), nullptr);
}

boost::asio::awaitable<Response> ReadErrorResponse(BodyStream& stream) {
  Response r = stream.head();
  char buf[4096];
  while (r.body.size() < internal::kMaxErrorBodyBytes) {
    absl::StatusOr<std::size_t> n = co_await stream.ReadSome({buf, sizeof buf});
    if (!n.ok() || *n == 0) break;
    r.body.append(buf, *n);
  }
  if (r.body.size() > internal::kMaxErrorBodyBytes) r.body.resize(internal::kMaxErrorBodyBytes);
  co_return r;
}

}  // namespace tether::net

namespace tether::net::internal {

void DrainInBackground(boost::asio::any_io_executor ex, std::unique_ptr<BodyStream> stream,
                       std::function<void(bool kept)> done) {
  if (!stream) return;
  constexpr std::size_t kDrainBytes = 64 * 1024;
  constexpr std::chrono::milliseconds kDrainTimeout{2000};
  auto s = std::shared_ptr<BodyStream>(std::move(stream));
  auto drain = [](boost::asio::any_io_executor ex, std::shared_ptr<BodyStream> s,
                  std::function<void(bool)> done) -> boost::asio::awaitable<void> {
    bool kept = false;
    {
      Watchdog wd(ex, kDrainTimeout, [s] { s->Close(); });
      std::string buf(4096, '\0');
      std::size_t total = 0;
      while (total <= kDrainBytes) {
        absl::StatusOr<std::size_t> n = co_await s->ReadSome(std::span<char>(buf.data(), buf.size()));
        if (!n.ok()) break;
        if (*n == 0) {  // the body ended, and its connection went back
          kept = true;
          break;
        }
        total += *n;
      }
      if (!kept) s->Close();
    }
    if (done) done(kept);
  };
  boost::asio::co_spawn(ex, drain(ex, std::move(s), std::move(done)), [](std::exception_ptr) {});
}

}  // namespace tether::net::internal
