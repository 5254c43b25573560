#include "host/native/docker/docker_channel.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "host/codec/stdcopy.h"
#include "tether/errors.h"

namespace tether::docker {

namespace asio = boost::asio;
namespace json = boost::json;

namespace {

constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);
constexpr std::size_t kDiagnosticsBytes = 4096;  // stderr tail kept for messages
constexpr std::size_t kReadBytes = 64 * 1024;    // one read of the exec stream
// After the stream's end the engine may still be recording the exit status
// (podman and Docker both report Running: true for a moment).
constexpr int kExitPolls = 100;
constexpr std::chrono::milliseconds kExitPollInterval{20};

// A buffered call run on its own, so that Close() and per-operation
// cancellation end the wait at once; an abandoned call finishes in the
// background and its answer is dropped.
struct PendingCall {
  explicit PendingCall(const asio::any_io_executor& ex) : done(ex, asio::steady_timer::time_point::max()) {}
  asio::steady_timer done;  // expires (min) when `result` is set
  std::optional<absl::StatusOr<net::Response>> result;
};

asio::awaitable<void> RunCall(std::shared_ptr<net::Client> client, net::Request request,
                              std::shared_ptr<PendingCall> p) {
  p->result = co_await client->Call(std::move(request));
  p->done.expires_at(asio::steady_timer::time_point::min());
}

// The exec's stdio: a raw stream carrying stdcopy frames from the engine
// and raw stdin bytes to it.
class DockerChannel final : public Channel {
 public:
  DockerChannel(asio::any_io_executor ex, std::shared_ptr<const Engine> engine, std::string exec_id,
                std::unique_ptr<net::RawStream> raw)
      : ex_(std::move(ex)), engine_(std::move(engine)), exec_id_(std::move(exec_id)), raw_(std::move(raw)),
        poll_timer_(ex_) {}
  ~DockerChannel() override { Close(); }

  asio::awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf) override {
    while (true) {
      if (closed_) co_return absl::UnavailableError("docker: channel closed");
      if (!out_.empty()) {
        const std::size_t n = std::min(out_.size(), buf.size());
        std::memcpy(buf.data(), out_.data(), n);
        out_.remove_prefix(n);
        co_return n;
      }
      if (!failed_.ok()) co_return failed_;
      if (!undecoded_.empty()) {
        absl::StatusOr<std::optional<codec::StdcopyPiece>> p = dec_.Next(&undecoded_);
        if (!p.ok()) {
          failed_ = ProtocolError(absl::StrCat("docker: the exec stream is not what the engine should send: ",
                                               p.status().message()));
          continue;
        }
        if (!*p) continue;
        switch ((*p)->stream) {
          case codec::StdStream::kStdin:  // (moby's StdCopy writes these to stdout too)
          case codec::StdStream::kStdout:
            out_ = (*p)->bytes;
            break;
          case codec::StdStream::kStderr:
            Keep(&diag_, (*p)->bytes);
            break;
          case codec::StdStream::kSystemError:
            Keep(&system_error_, (*p)->bytes);
            break;
        }
        continue;
      }
      if (eof_) co_return co_await Finish();
      in_.resize(kReadBytes);
      absl::StatusOr<std::size_t> n = co_await raw_->ReadSome({in_.data(), in_.size()});
      if (closed_) co_return absl::UnavailableError("docker: channel closed");
      if (!n.ok()) co_return absl::Status(n.status().code(), absl::StrCat("docker: exec stream: ", n.status().message()));
      if (*n == 0) {
        eof_ = true;
      } else {
        undecoded_ = std::string_view(in_.data(), *n);
      }
    }
  }

  asio::awaitable<absl::Status> Write(std::string_view bytes) override {
    if (closed_ || write_closed_) co_return absl::UnavailableError("docker: channel input closed");
    absl::Status st = co_await raw_->Write(bytes);
    if (!st.ok()) co_return absl::Status(st.code(), absl::StrCat("docker: exec stream: ", st.message()));
    co_return absl::OkStatus();
  }

  // TCP half-close: Docker passes it on as the command's stdin EOF only on
  // some versions and connections (the capabilities say stdin_eof false).
  void CloseWrite() override {
    if (closed_ || write_closed_) return;
    write_closed_ = true;
    raw_->ShutdownWrite();
  }

  void Close() override {
    if (closed_) return;
    closed_ = true;
    raw_->Close();
    if (pending_) pending_->done.cancel();
    poll_timer_.cancel();
    // Closed before its end: the engine may leave the command running with
    // its output undrained (podman does when the client goes away while
    // output is pending), so the transport ends it (see Reap).
    if (!eof_ && on_abandon_) {
      std::function<void()> f = std::move(on_abandon_);
      f();
    }
  }

  // Called once when the channel is closed before the stream's end.
  void set_on_abandon(std::function<void()> f) { on_abandon_ = std::move(f); }

  std::optional<int> exit_code() const override { return exit_code_; }

  std::string Diagnostics() const override {
    if (system_error_.empty()) return diag_;
    return absl::StrCat(diag_, diag_.empty() ? "" : "\n", "(engine: ", system_error_, ")");
  }

 private:
  static void Keep(std::string* tail, std::string_view bytes) {
    tail->append(bytes);
    if (tail->size() > kDiagnosticsBytes) tail->erase(0, tail->size() - kDiagnosticsBytes);
  }

  // The stream ended: a clean end is EOF once the exit status is known (or
  // the engine would not say); a cut inside a frame or the engine's own
  // error report is a failure.
  asio::awaitable<absl::StatusOr<std::size_t>> Finish() {
    if (!system_error_.empty()) {
      failed_ = absl::UnavailableError(absl::StrCat("docker: the engine ended the exec: ", system_error_));
      co_return failed_;
    }
    if (!dec_.idle()) {
      failed_ = absl::UnavailableError("docker: the exec stream was cut inside a frame");
      co_return failed_;
    }
    while (!exit_checked_) {
      absl::StatusOr<bool> done = co_await PollExit();
      if (!done.ok()) co_return done.status();
      if (*done) break;
      poll_timer_.expires_after(kExitPollInterval);
      auto [ec] = co_await poll_timer_.async_wait(kNoThrow);
      if (closed_) co_return absl::UnavailableError("docker: channel closed");
      if (ec) co_return absl::CancelledError("docker: waiting for the exit status was cancelled");
    }
    co_return std::size_t{0};
  }

  // One look at the exec: true when there is nothing more to learn (its
  // exit status, or an engine that will not say), false while it runs.
  asio::awaitable<absl::StatusOr<bool>> PollExit() {
    if (++polls_ > kExitPolls) {
      exit_checked_ = true;  // never a guess: the status stays unknown
      co_return true;
    }
    net::Request req;
    req.target = absl::StrCat(engine_->api, "/exec/", net::UrlEncode(exec_id_), "/json");
    auto p = std::make_shared<PendingCall>(ex_);
    asio::co_spawn(ex_, RunCall(engine_->client, std::move(req), p), asio::detached);
    pending_ = p;
    if (!p->result) co_await p->done.async_wait(kNoThrow);
    pending_.reset();
    if (closed_) co_return absl::UnavailableError("docker: channel closed");
    if (!p->result) co_return absl::CancelledError("docker: waiting for the exit status was cancelled");
    if (!p->result->ok() || !net::IsSuccess(**p->result)) {
      exit_checked_ = true;
      co_return true;
    }
    boost::system::error_code ec;
    json::value v = json::parse((*p->result)->body, ec);
    if (ec || !v.is_object()) {
      exit_checked_ = true;
      co_return true;
    }
    const json::object& o = v.as_object();
    const json::value* running = o.if_contains("Running");
    if (running != nullptr && running->is_bool() && running->as_bool()) co_return false;
    const json::value* code = o.if_contains("ExitCode");
    if (code != nullptr && code->is_int64()) exit_code_ = static_cast<int>(code->as_int64());
    exit_checked_ = true;
    co_return true;
  }

  asio::any_io_executor ex_;
  std::shared_ptr<const Engine> engine_;
  std::string exec_id_;
  std::unique_ptr<net::RawStream> raw_;
  codec::StdcopyDecoder dec_;
  std::string in_;               // the last read from the stream
  std::string_view undecoded_;   // in in_: not yet through the decoder
  std::string_view out_;         // in in_: stdout not yet returned
  std::string diag_;             // stderr tail
  std::string system_error_;     // the engine's own error report (stream 3)
  absl::Status failed_;
  bool eof_ = false;
  bool closed_ = false;
  bool write_closed_ = false;
  bool exit_checked_ = false;
  int polls_ = 0;
  std::optional<int> exit_code_;
  std::function<void()> on_abandon_;
  std::shared_ptr<PendingCall> pending_;  // the exit status call being awaited
  asio::steady_timer poll_timer_;         // between exit status calls
};

}  // namespace

absl::Status ProtocolError(std::string_view message) {
  return WithErrorCode(absl::UnavailableError(std::string(message)), ErrorCode::kProtocol);
}

std::unique_ptr<Channel> MakeExecChannel(asio::any_io_executor ex, std::shared_ptr<const Engine> engine,
                                         std::string exec_id, std::unique_ptr<net::RawStream> raw,
                                         std::function<void()> on_abandon) {
  auto ch = std::make_unique<DockerChannel>(std::move(ex), std::move(engine), std::move(exec_id), std::move(raw));
  if (on_abandon) ch->set_on_abandon(std::move(on_abandon));
  return ch;
}

}  // namespace tether::docker
