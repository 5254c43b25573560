#include "host/native/modal/modal_channel.h"

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "host/support/random.h"
#include "tether/errors.h"
#include "tether/output_helpers.h"

namespace tether::modal {

namespace asio = boost::asio;
namespace rt = ::modal::task_command_router;

namespace {

using StdioStream = ServerStream<rt::TaskExecStdioReadResponse>;
constexpr int kFdStdout = 0, kFdStderr = 1;                 // TaskExecStdioRead's file_descriptor
constexpr std::chrono::milliseconds kEofDeadline{10000};     // the background stdin EOF, per attempt
constexpr int kEofRetries = 3;
constexpr int kWaitRetries = 5;                              // TaskExecWait after stdout ended (60 s each)


class StdioReader;

// The sink of one stream: a reader's current stream has its own, so the
// completions of a stream given up (cancelled, replaced) go nowhere.
struct StreamHook final : StreamSink {
  std::weak_ptr<StdioReader> reader;
  void OnMessage(std::string data) override;
  void OnDone(const grpc::Status& s) override;
};

// One fd's bytes in order, through TaskExecStdioRead streams, each opened at
// the offset after the last byte received.
class StdioReader : public std::enable_shared_from_this<StdioReader> {
 public:
  StdioReader(std::shared_ptr<ModalSession> s, std::string exec_id, int fd)
      : s_(std::move(s)), exec_id_(std::move(exec_id)), fd_(fd), cond_(s_->executor()) {}

  // Some bytes (0: the end of the output). Cancellation consumes nothing.
  asio::awaitable<absl::StatusOr<std::size_t>> Read(std::span<char> buf) {
    while (pos_ == buf_.size()) {
      if (closed_) co_return Closed();
      if (!failure_.ok()) co_return failure_;
      if (eof_) co_return std::size_t{0};
      if (!stream_) {
        Open();
        continue;
      }
      if (done_) {
        absl::Status st = co_await AfterDone();
        if (!st.ok()) co_return st;
        continue;
      }
      const bool woke = co_await cond_.Wait();
      if (!woke) co_return absl::CancelledError("modal: the read was cancelled");
    }
    const std::size_t n = std::min(buf.size(), buf_.size() - pos_);
    std::memcpy(buf.data(), buf_.data() + pos_, n);
    pos_ += n;
    if (pos_ == buf_.size()) {
      buf_.clear();
      pos_ = 0;
    }
    if (paused_ && buf_.size() - pos_ < kReadAhead && stream_ && !done_) {
      paused_ = false;
      stream_->Next();
    }
    co_return n;
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    if (stream_) stream_->Cancel();
    cond_.NotifyAll();
  }

  void OnMessage(std::string data) {
    if (closed_) return;
    offset_ += data.size();
    retries_ = 0;
    delay_ = kRetryBase;
    refreshed_ = false;
    if (pos_ == buf_.size()) {
      buf_ = std::move(data);
      pos_ = 0;
    } else {
      buf_.append(data);
    }
    if (buf_.size() - pos_ < kReadAhead) {
      stream_->Next();
    } else {
      paused_ = true;
    }
    cond_.NotifyAll();
  }

  void OnDone(const grpc::Status& s) {
    done_ = true;
    status_ = s;
    cond_.NotifyAll();
  }

 private:
  static absl::Status Closed() { return absl::UnavailableError("the modal channel was closed"); }

  void Open() {
    hook_ = std::make_shared<StreamHook>();
    hook_->reader = weak_from_this();
    stream_ = std::make_shared<StdioStream>(s_->executor(), hook_);
    done_ = false;
    paused_ = false;
    ModalSession::Router r = s_->router();
    generation_ = r.generation;
    stream_->context()->AddMetadata("authorization", "Bearer " + r.jwt);
    req_.set_task_id(s_->task_id());
    req_.set_exec_id(exec_id_);
    req_.set_offset(offset_);
    req_.set_file_descriptor(fd_);
    stream_->Start([&](StdioStream* reactor) { r.stub->async()->TaskExecStdioRead(reactor->context(), &req_, reactor); });
  }

  // The stream ended: at the end of the output, or to be opened again at
  // the next offset (a transient code; UNAUTHENTICATED after a new JWT).
  asio::awaitable<absl::Status> AfterDone() {
    const grpc::Status st = status_;
    stream_.reset();
    hook_.reset();
    if (st.ok()) {
      eof_ = true;
      co_return absl::OkStatus();
    }
    const std::string what = fd_ == kFdStdout ? "TaskExecStdioRead (stdout)" : "TaskExecStdioRead (stderr)";
    if (st.error_code() == grpc::StatusCode::UNAUTHENTICATED && !refreshed_) {
      refreshed_ = true;
      absl::Status rs = co_await s_->RefreshRouter(generation_);
      if (!rs.ok()) failure_ = rs;
      co_return failure_;
    }
    if (!Retryable(st) || retries_ >= kMaxRetries) {
      failure_ = FromGrpc(st, what);
      co_return failure_;
    }
    ++retries_;
    asio::steady_timer t(s_->executor(), delay_);
    auto [ec] = co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec) co_return absl::CancelledError("modal: the read was cancelled");
    delay_ *= 2;
    co_return absl::OkStatus();
  }

  std::shared_ptr<ModalSession> s_;
  std::string exec_id_;
  int fd_;
  internal::Condition cond_;
  rt::TaskExecStdioReadRequest req_;
  std::shared_ptr<StreamHook> hook_;
  std::shared_ptr<StdioStream> stream_;
  std::uint64_t generation_ = 0;
  std::string buf_;
  std::size_t pos_ = 0;
  std::uint64_t offset_ = 0;  // bytes received: where a new stream starts
  bool done_ = false, eof_ = false, closed_ = false, paused_ = false, refreshed_ = false;
  grpc::Status status_;
  absl::Status failure_;
  int retries_ = 0;
  std::chrono::milliseconds delay_ = kRetryBase;
};

void StreamHook::OnMessage(std::string data) {
  if (auto r = reader.lock()) r->OnMessage(std::move(data));
}
void StreamHook::OnDone(const grpc::Status& s) {
  if (auto r = reader.lock()) r->OnDone(s);
}

// Reads stderr into a bounded tail until it ends or the channel closes.
asio::awaitable<void> DrainTail(std::shared_ptr<StdioReader> r, std::shared_ptr<std::string> tail) {
  char buf[4096];
  while (true) {
    absl::StatusOr<std::size_t> n = co_await r->Read({buf, sizeof buf});
    if (!n.ok() || *n == 0) co_return;
    tail->append(buf, *n);
    if (tail->size() > kDiagnosticsBytes) tail->erase(0, tail->size() - kDiagnosticsBytes);
  }
}

auto StdinWriteCall() {
  return [](auto* a, auto* c, auto* q, auto* p, auto done) { a->TaskExecStdinWrite(c, q, p, std::move(done)); };
}

class ExecChannel final : public Channel {
 public:
  ExecChannel(std::shared_ptr<ModalSession> s, std::string exec_id)
      : s_(std::move(s)), exec_id_(std::move(exec_id)),
        out_(std::make_shared<StdioReader>(s_, exec_id_, kFdStdout)),
        err_(std::make_shared<StdioReader>(s_, exec_id_, kFdStderr)),
        tail_(std::make_shared<std::string>()),
        read_live_(std::make_shared<std::shared_ptr<grpc::ClientContext>>()),
        write_live_(std::make_shared<std::shared_ptr<grpc::ClientContext>>()) {
    asio::co_spawn(s_->executor(), DrainTail(err_, tail_), asio::detached);
  }
  ~ExecChannel() override { Close(); }

  asio::awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf) override {
    if (closed_) co_return Closed();
    absl::StatusOr<std::size_t> n = co_await out_->Read(buf);
    if (!n.ok() || *n > 0 || exit_.has_value()) co_return n;
    // stdout ended: the exit status, before EOF is returned.
    rt::TaskExecWaitRequest req;
    req.set_task_id(s_->task_id());
    req.set_exec_id(exec_id_);
    rt::TaskExecWaitResponse resp;
    grpc::Status st = co_await s_->RouterCall(
        req, &resp, [](auto* a, auto* c, auto* q, auto* p, auto done) { a->TaskExecWait(c, q, p, std::move(done)); },
        read_live_.get(), kUnaryDeadline, kWaitRetries);
    if (closed_) co_return Closed();
    asio::cancellation_state cs = co_await asio::this_coro::cancellation_state;
    if (cs.cancelled() != asio::cancellation_type::none) co_return absl::CancelledError("modal: the read was cancelled");
    if (st.ok()) {
      if (resp.exit_status_case() == rt::TaskExecWaitResponse::kSignal) {
        exit_ = 128 + resp.signal();
      } else if (resp.exit_status_case() == rt::TaskExecWaitResponse::kCode) {
        exit_ = resp.code();
      }
    }
    co_return std::size_t{0};  // without a status when Wait failed: never a guess
  }

  asio::awaitable<absl::Status> Write(std::string_view bytes) override {
    writing_ = true;
    absl::Status result;
    for (std::size_t off = 0; off < bytes.size() && result.ok(); off += kInputPiece) {
      if (closed_) {
        result = Closed();
        break;
      }
      if (stdin_closed_) {
        result = absl::FailedPreconditionError("modal: stdin was already closed");
        break;
      }
      const std::string_view piece = bytes.substr(off, kInputPiece);
      rt::TaskExecStdinWriteRequest req;
      req.set_task_id(s_->task_id());
      req.set_exec_id(exec_id_);
      req.set_offset(stdin_offset_);
      req.set_data(piece.data(), piece.size());
      rt::TaskExecStdinWriteResponse resp;
      grpc::Status st = co_await s_->RouterCall(req, &resp, StdinWriteCall(), write_live_.get());
      if (closed_) {
        result = Closed();
      } else if (!st.ok()) {
        result = FromGrpc(st, "TaskExecStdinWrite");
      } else {
        stdin_offset_ += piece.size();
      }
    }
    writing_ = false;
    if (eof_pending_) {
      eof_pending_ = false;
      SendEof();
    }
    co_return result;
  }

  void CloseWrite() override {
    if (closed_ || stdin_closed_) return;
    stdin_closed_ = true;
    if (writing_) {
      eof_pending_ = true;
    } else {
      SendEof();
    }
  }

  void Close() override {
    if (closed_) return;
    closed_ = true;
    out_->Close();
    err_->Close();
    if (*read_live_) (*read_live_)->TryCancel();
    if (*write_live_) (*write_live_)->TryCancel();
    // No kill RPC: stdin's EOF is what ends a bridge left behind.
    if (!stdin_closed_) {
      stdin_closed_ = true;
      SendEof();
    }
  }

  std::optional<int> exit_code() const override { return exit_; }
  std::string Diagnostics() const override { return *tail_; }

 private:
  static absl::Status Closed() { return absl::UnavailableError("the modal channel was closed"); }

  // In the background, after the bytes written so far.
  void SendEof() {
    rt::TaskExecStdinWriteRequest req;
    req.set_task_id(s_->task_id());
    req.set_exec_id(exec_id_);
    req.set_offset(stdin_offset_);
    req.set_eof(true);
    asio::co_spawn(
        s_->executor(),
        [](std::shared_ptr<ModalSession> s, rt::TaskExecStdinWriteRequest req) -> asio::awaitable<void> {
          rt::TaskExecStdinWriteResponse resp;
          (void)co_await s->RouterCall(req, &resp, StdinWriteCall(), nullptr, kEofDeadline, kEofRetries);
        }(s_, std::move(req)),
        asio::detached);
  }

  std::shared_ptr<ModalSession> s_;
  std::string exec_id_;
  std::shared_ptr<StdioReader> out_, err_;
  std::shared_ptr<std::string> tail_;
  // The calls in flight (TaskExecWait of ReadSome, TaskExecStdinWrite of Write), for Close.
  std::shared_ptr<std::shared_ptr<grpc::ClientContext>> read_live_, write_live_;
  std::uint64_t stdin_offset_ = 0;
  bool closed_ = false, stdin_closed_ = false, writing_ = false, eof_pending_ = false;
  std::optional<int> exit_;
};

}  // namespace

std::string NewExecId() {
  std::string b = internal::RandomBytes(16);
  b[6] = static_cast<char>((b[6] & 0x0f) | 0x40);  // version 4
  b[8] = static_cast<char>((b[8] & 0x3f) | 0x80);  // RFC 4122 variant
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < b.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out.push_back('-');
    out.push_back(kHex[(static_cast<unsigned char>(b[i]) >> 4) & 15]);
    out.push_back(kHex[static_cast<unsigned char>(b[i]) & 15]);
  }
  return out;
}

asio::awaitable<absl::StatusOr<std::unique_ptr<Channel>>> StartExec(std::shared_ptr<ModalSession> s,
                                                                     std::vector<std::string> argv) {
  if (argv.empty()) co_return absl::InvalidArgumentError("exec: empty argv");
  std::size_t total = 0;
  for (const std::string& a : argv) {
    total += a.size() + 1;
    if (!IsValidUtf8(a) || a.find('\0') != std::string::npos) {
      co_return absl::InvalidArgumentError("modal: command arguments must be UTF-8 without NUL (the router takes strings)");
    }
  }
  if (total > kMaxArgvBytes) co_return absl::InvalidArgumentError("modal: the command line is larger than 1 MiB");
  if (absl::Status st = co_await s->Ready(); !st.ok()) co_return st;
  rt::TaskExecStartRequest req;
  req.set_task_id(s->task_id());
  const std::string exec_id = NewExecId();
  req.set_exec_id(exec_id);
  for (std::string& a : argv) req.add_command_args(std::move(a));
  req.set_stdout_config(1);  // PIPE
  req.set_stderr_config(1);
  rt::TaskExecStartResponse resp;
  // Retried with the same exec id: the router starts it once.
  grpc::Status st = co_await s->RouterCall(
      req, &resp, [](auto* a, auto* c, auto* q, auto* p, auto done) { a->TaskExecStart(c, q, p, std::move(done)); });
  if (!st.ok()) co_return FromGrpc(st, absl::StrCat("TaskExecStart ", req.command_args(0)));
  co_return std::unique_ptr<Channel>(std::make_unique<ExecChannel>(std::move(s), exec_id));
}

}  // namespace tether::modal
