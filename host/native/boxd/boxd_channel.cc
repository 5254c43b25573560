#include "host/native/boxd/boxd_channel.h"

#include <grpcpp/support/client_callback.h>

#include <algorithm>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "host/support/condition.h"
#include "tether/errors.h"
#include "tether/output_helpers.h"
#include "tether/shell_setup.h"

namespace tether::boxd {

namespace asio = boost::asio;
namespace pb = ::boxd::api::v1;

namespace {

// One Exec call. gRPC runs its reactions on its own threads; each is only
// posted to the executor, where all of this object's state lives and every
// operation is started (so no lock is needed). It holds itself until gRPC's
// OnDone has been handled there, and keeps the executor's work count up
// while the call lasts.
//
// The hold: gRPC calls OnDone only once it is removed, so that operations
// started from outside a reaction never race the call's end. It is removed
// once the read side is over (the server ended the call, or Close) and no
// write is in flight; after that no operation is started.
class ExecCall final : public grpc::ClientBidiReactor<pb::ExecChunk, pb::ExecChunk>,
                       public std::enable_shared_from_this<ExecCall> {
 public:
  explicit ExecCall(asio::any_io_executor ex)
      : work_(asio::prefer(ex, asio::execution::outstanding_work.tracked)), cond_(ex) {}

  grpc::ClientContext* context() { return &ctx_; }

  void Start(Stub& stub, pb::ExecChunk first) {
    self_ = shared_from_this();
    stub.async()->Exec(&ctx_, this);
    AddHold();
    out_ = std::move(first);
    write_out_ = true;
    StartWrite(&out_);
    read_out_ = true;
    StartRead(&in_);
    StartCall();
  }

  // ---- on the executor -------------------------------------------------

  // Some stdout bytes; 0 at the end of a call that ended OK; the call's
  // status when it ended otherwise.
  asio::awaitable<absl::StatusOr<std::size_t>> Read(std::span<char> buf) {
    while (pos_ == stdout_.size()) {
      if (closed_) co_return Closed();
      if (done_) {
        if (status_.ok()) co_return std::size_t{0};
        co_return EndStatus();
      }
      if (!co_await cond_.Wait()) co_return absl::CancelledError("boxd: the read was cancelled");
    }
    const std::size_t n = std::min(buf.size(), stdout_.size() - pos_);
    std::memcpy(buf.data(), stdout_.data() + pos_, n);
    pos_ += n;
    if (pos_ == stdout_.size()) {
      stdout_.clear();
      pos_ = 0;
    }
    MaybeReadMore();
    co_return n;
  }

  asio::awaitable<absl::Status> Write(std::string_view bytes) {
    for (std::size_t off = 0; off < bytes.size(); off += kInputPiece) {
      while (write_out_ && !closed_) {
        if (!co_await cond_.Wait()) co_return absl::CancelledError("boxd: the write was cancelled");
      }
      if (closed_) co_return Closed();
      if (eof_) co_return absl::FailedPreconditionError("boxd: stdin was already closed");
      if (!held_ || write_failed_) co_return Ended("the write");
      const std::string_view piece = bytes.substr(off, kInputPiece);
      out_.Clear();
      out_.set_data(piece.data(), piece.size());
      out_.set_stdin(true);
      write_out_ = true;
      StartWrite(&out_);
    }
    // Accepted by gRPC once the last piece went out.
    while (write_out_ && !closed_) {
      if (!co_await cond_.Wait()) co_return absl::CancelledError("boxd: the write was cancelled");
    }
    if (closed_) co_return Closed();
    if (write_failed_) co_return Ended("the write");
    co_return absl::OkStatus();
  }

  void CloseWrite() {
    if (eof_ || closed_) return;
    eof_ = true;
    if (!write_out_ && held_) SendWritesDone();  // else when the write in flight is done
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    ctx_.TryCancel();
    if (!read_out_) read_over_ = true;  // paused: no read will come back
    MaybeRelease();
    cond_.NotifyAll();
  }

  std::optional<int> exit_code() const { return exit_; }
  std::string Diagnostics() const { return stderr_tail_; }
  bool any_chunk() const { return any_chunk_; }
  bool done() const { return done_; }
  const grpc::Status& status() const { return status_; }

  // ---- gRPC's reactions: posted -----------------------------------------

  void OnReadDone(bool ok) override {
    Chunk c;
    c.ok = ok;
    if (ok) {
      c.data = std::move(*in_.mutable_data());
      c.is_stderr = in_.is_stderr();
      c.exit_code = in_.exit_code();
      in_.Clear();
    }
    asio::post(work_, [this, c = std::move(c)]() mutable { HandleRead(std::move(c)); });
  }
  void OnWriteDone(bool ok) override {
    asio::post(work_, [this, ok] { HandleWrite(ok); });
  }
  void OnWritesDoneDone(bool) override {}
  void OnDone(const grpc::Status& s) override {
    asio::any_io_executor w = work_;
    asio::post(w, [this, s] { HandleDone(s); });
  }

 private:
  struct Chunk {
    bool ok = false;
    std::string data;
    bool is_stderr = false;
    int exit_code = 0;
  };

  static absl::Status Closed() { return absl::UnavailableError("the boxd channel was closed"); }
  absl::Status Ended(std::string_view what) const {
    return absl::UnavailableError(absl::StrCat("boxd: ", std::string(what), ": the Exec call has ended"));
  }
  // The status a read reports once the call ended without OK.
  absl::Status EndStatus() const {
    if (status_.error_code() == grpc::StatusCode::NOT_FOUND) {
      return absl::NotFoundError(absl::StrCat("boxd: Exec: the VM was not found (", status_.error_message(), ")"));
    }
    return rpc::FromGrpc(status_, "boxd", "Exec");
  }

  void HandleRead(Chunk c) {
    read_out_ = false;
    if (!c.ok || closed_) {
      read_over_ = true;
      MaybeRelease();
      cond_.NotifyAll();
      return;
    }
    any_chunk_ = true;
    if (c.exit_code != 0) last_exit_ = c.exit_code;
    if (c.is_stderr) {
      stderr_tail_.append(c.data);
      if (stderr_tail_.size() > kDiagnosticsBytes) stderr_tail_.erase(0, stderr_tail_.size() - kDiagnosticsBytes);
    } else if (!c.data.empty()) {
      if (pos_ == stdout_.size()) {
        stdout_ = std::move(c.data);
        pos_ = 0;
      } else {
        stdout_.append(c.data);
      }
    }
    MaybeReadMore();
    cond_.NotifyAll();
  }

  void HandleWrite(bool ok) {
    write_out_ = false;
    if (!ok) write_failed_ = true;
    if (ok && eof_ && !writes_done_ && held_ && !closed_) SendWritesDone();
    MaybeRelease();
    cond_.NotifyAll();
  }

  void HandleDone(const grpc::Status& s) {
    done_ = true;
    status_ = s;
    exit_ = ExitStatus(s.ok(), last_exit_);
    cond_.NotifyAll();
    work_ = asio::any_io_executor();
    self_.reset();  // may destroy this
  }

  // Asks for the next chunk unless stdout holds kReadAhead already.
  void MaybeReadMore() {
    if (read_out_ || read_over_ || closed_ || !held_) return;
    if (stdout_.size() - pos_ >= kReadAhead) return;
    read_out_ = true;
    StartRead(&in_);
  }

  void SendWritesDone() {
    writes_done_ = true;
    StartWritesDone();
  }

  void MaybeRelease() {
    if (!held_ || !read_over_ || write_out_) return;
    held_ = false;
    RemoveHold();  // OnDone may follow on a gRPC thread
  }

  grpc::ClientContext ctx_;
  asio::any_io_executor work_;
  internal::Condition cond_;
  std::shared_ptr<ExecCall> self_;  // until OnDone was handled
  pb::ExecChunk in_, out_;
  std::string stdout_;
  std::size_t pos_ = 0;
  std::string stderr_tail_;
  std::optional<int> last_exit_, exit_;
  grpc::Status status_;
  bool held_ = true, read_out_ = false, read_over_ = false, write_out_ = false, write_failed_ = false;
  bool eof_ = false, writes_done_ = false, closed_ = false, done_ = false, any_chunk_ = false;
};

class ExecChannel final : public Channel {
 public:
  ExecChannel(std::shared_ptr<BoxdSession> s, std::shared_ptr<ExecCall> call, std::uint64_t generation)
      : s_(std::move(s)), call_(std::move(call)), generation_(generation) {}
  ~ExecChannel() override { call_->Close(); }

  asio::awaitable<absl::StatusOr<std::size_t>> ReadSome(std::span<char> buf) override {
    absl::StatusOr<std::size_t> n = co_await call_->Read(buf);
    if (n.ok() && *n > 0 && !accepted_) {
      accepted_ = true;
      s_->Accepted();
    }
    if (!n.ok() && call_->done() && call_->status().error_code() == grpc::StatusCode::UNAUTHENTICATED &&
        !call_->any_chunk()) {
      // Refused before the command ran. With a key to exchange again (and
      // not refused over and over), UNAVAILABLE: nothing ran, the next call
      // carries a new JWT, and a start sends its launch again.
      if (s_->Refused(generation_)) {
        co_return absl::UnavailableError(absl::StrCat("boxd: Exec: the JWT was refused before the command ran (",
                                                      call_->status().error_message(), "); a new one is asked for"));
      }
      co_return absl::UnauthenticatedError(
          absl::StrCat("boxd: Exec: the JWT was refused (", call_->status().error_message(), "): ",
                       s_->can_exchange() ? "new ones too; is BOXD_API_KEY this VM's organization's?"
                                          : "set BOXD_API_KEY, or a valid JWT in BOXD_TOKEN"));
    }
    co_return n;
  }
  asio::awaitable<absl::Status> Write(std::string_view bytes) override { co_return co_await call_->Write(bytes); }
  void CloseWrite() override { call_->CloseWrite(); }
  void Close() override { call_->Close(); }
  std::optional<int> exit_code() const override { return call_->exit_code(); }
  std::string Diagnostics() const override { return call_->Diagnostics(); }

 private:
  std::shared_ptr<BoxdSession> s_;
  std::shared_ptr<ExecCall> call_;
  std::uint64_t generation_;
  bool accepted_ = false;
};

}  // namespace

absl::StatusOr<std::string> CommandLine(const std::vector<std::string>& argv) {
  if (argv.empty()) return absl::InvalidArgumentError("boxd: exec with an empty argv");
  std::string line = "exec";
  for (const std::string& a : argv) {
    if (a.find('\0') != std::string::npos || !IsValidUtf8(a)) {
      return absl::InvalidArgumentError(
          "boxd: command arguments must be UTF-8 without NUL (boxd takes the command as one string)");
    }
    absl::StrAppend(&line, " ", ShellQuote(a));
    if (line.size() > kMaxCommandBytes) return absl::InvalidArgumentError("boxd: the command line is larger than 1 MiB");
  }
  return line;
}

std::optional<int> ExitStatus(bool ended_ok, std::optional<int> last_exit_code) {
  if (!ended_ok) return std::nullopt;
  if (!last_exit_code) return 0;
  if (*last_exit_code < 0) {
    // A signal's number, negated (no shell exits so); 128 + N as a shell says.
    return *last_exit_code >= -64 ? 128 - *last_exit_code : 255;
  }
  return *last_exit_code;
}

asio::awaitable<absl::StatusOr<std::unique_ptr<Channel>>> StartExec(std::shared_ptr<BoxdSession> s,
                                                                     std::vector<std::string> argv) {
  absl::StatusOr<std::string> line = CommandLine(argv);
  if (!line.ok()) co_return line.status();
  absl::StatusOr<BoxdSession::Bearer> bearer = co_await s->Token();
  if (!bearer.ok()) co_return bearer.status();
  auto call = std::make_shared<ExecCall>(s->executor());
  call->context()->AddMetadata("authorization", "Bearer " + bearer->token);
  pb::ExecChunk first;
  first.set_vm_id(s->vm_id());
  first.set_command(*std::move(line));
  call->Start(s->stub(), std::move(first));
  co_return std::unique_ptr<Channel>(std::make_unique<ExecChannel>(std::move(s), std::move(call), bearer->generation));
}

}  // namespace tether::boxd
