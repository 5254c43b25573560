// The process API over one attachment: each call checks what the handle
// allows, hands its request to the protocol core or the session, and waits
// on the state's condition (host/process/state.h). Start and
// Reopen are in start.cc.
#include "tether/process.h"

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "absl/strings/str_cat.h"
#include "tether/errors.h"
#include "host/process/state.h"
#include "host/process/reference.h"

namespace tether {

namespace asio = boost::asio;

namespace {
constexpr auto kStatusTimeout = std::chrono::seconds(30);  // a dispatched status or terminate request

absl::Status Disconnected() { return InputClosedError("this handle was disconnected; reopen the process"); }
}  // namespace

Process::Process(std::shared_ptr<State> state) : state_(std::move(state)) {}

Process::~Process() {
  State& s = *state_;
  s.reconnect = false;  // nobody holds this attachment any more: never reattach it
  if (!s.failed.ok() || s.session->closed() || s.exit_acked) return;  // finishing, or finished
  if (s.control) {
    s.session->Close();  // requests only: nothing to finish
    return;
  }
  if (s.core.output.ended() && s.core.output.all_taken() && !s.disconnected) {
    // Every byte was read; the exit record is here or follows the output.
    // The application is done with it: acknowledge it (so the supervisor
    // cleans up now, not after its linger), within a bound.
    if (s.core.exit) {
      s.AckExit();
      return;
    }
    s.ack_exit_on_arrival = true;
    auto state = state_;
    s.close_timer.expires_after(kCloseAfterExitTimeout);
    s.close_timer.async_wait([state](boost::system::error_code ec) {
      if (!ec) state->session->Close();
    });
    return;
  }
  // Otherwise dropping the handle ends only this attachment; the child (or
  // its exit record and unread output) stays for a later reopen.
  s.session->Close();
}

std::int32_t Process::pid() const { return state_->core.pid; }
bool Process::output_gap() const { return state_->core.output.gap(); }
OutputMissing Process::output_missing(StreamId stream) const {
  const int i = stream == StreamId::kStderr ? 1 : 0;
  return {state_->core.output.dropped(i), state_->core.output.read_earlier(i)};
}
bool Process::has_pty() const { return state_->core.output.config().pty; }
std::size_t Process::unread_bytes() const { return state_->core.output.unread_bytes(); }
std::uint64_t Process::reconnects() const { return state_->reconnects; }
std::size_t Process::unread_chunks() const { return state_->core.output.unread_chunks(); }
bool Process::read_ready() const { return !state_->failed.ok() || state_->core.output.TakeReady(); }

asio::awaitable<absl::Status> Process::Write(std::string_view bytes) {
  State& s = *state_;
  if (bytes.size() > kMaxWriteBytes) {
    co_return absl::InvalidArgumentError(
        absl::StrCat("write of ", bytes.size(), " bytes exceeds ", kMaxWriteBytes, "; split it"));
  }
  if (absl::Status st = s.InputAllowed(); !st.ok() || bytes.empty()) co_return st;
  // The bytes are copied: the caller's buffer need not outlive the wait.
  std::string data(bytes);
  if (absl::Status st = co_await s.AwaitInputTurn(data.size(), false); !st.ok()) co_return st;
  wire::Envelope env;
  *env.mutable_stdin_data() = s.core.input.MakeData(std::move(data));
  s.session->Send(std::move(env));
  co_return absl::OkStatus();
}

asio::awaitable<absl::Status> Process::CloseStdin() {
  State& s = *state_;
  if (s.disconnected) co_return Disconnected();
  if (!s.core.input.pipe() || s.core.input.eof_sent()) co_return absl::OkStatus();
  // After the exit EOF is moot (nothing reads stdin any more) and not an
  // error, as close(2) of a pipe whose reader is gone is not: "write the
  // input, close stdin, wait" failed when the child exited on its own
  // before the EOF went out (found by @tether/node's reopen test in CI).
  const bool control = s.control;
  if (!control && s.core.exit) co_return absl::OkStatus();
  // EOF follows every write called before it.
  if (absl::Status st = co_await s.AwaitInputTurn(0, true); !st.ok()) {
    co_return s.core.input.eof_sent() || (!control && s.core.exit) ? absl::OkStatus() : st;
  }
  wire::Envelope env;
  *env.mutable_stdin_eof() = s.core.input.MakeEof();
  s.cond.NotifyAll();
  s.session->Send(std::move(env));
  co_return absl::OkStatus();
}

asio::awaitable<absl::StatusOr<std::optional<OutputChunk>>> Process::Read() {
  State& s = *state_;
  if (s.control) co_return absl::UnimplementedError("read: a control handle receives no output; reopen it fully");
  while (true) {
    core::ReadStep step = s.core.output.Take();
    s.MaybeAck();  // what was taken frees credit (also bytes held back undecoded)
    switch (step.kind) {
      case core::ReadStep::kChunk: co_return std::move(step.chunk);
      case core::ReadStep::kStopped: co_return step.error;
      case core::ReadStep::kEnd: co_return std::optional<OutputChunk>();
      case core::ReadStep::kNeedMore: break;
    }
    if (!s.failed.ok()) co_return s.failed;
    if (!co_await s.cond.Wait()) co_return WaitAbortedError("the read was aborted; no output was taken");
  }
}

asio::awaitable<absl::StatusOr<ExitStatus>> Process::Wait() {
  State& s = *state_;
  if (s.control) {
    co_return absl::FailedPreconditionError("wait: a control handle never takes the exit; use Status() or reopen fully");
  }
  while (true) {
    if (s.core.exit) {
      ExitStatus e = *s.core.exit;
      // Complete only once every byte reached the consumer, with no gap.
      e.output_complete = s.core.output.complete() && !e.output_cut;
      // Delivered: every output byte is here already (the exit follows the
      // output), so the supervisor need keep nothing more.
      if (!s.disconnected) s.AckExit();
      co_return e;
    }
    if (!s.failed.ok()) {
      co_return absl::UnavailableError(absl::StrCat("exit not observed: ", std::string(s.failed.message())));
    }
    if (!co_await s.cond.Wait()) co_return WaitAbortedError("the wait was aborted; the process was not touched");
  }
}

asio::awaitable<absl::Status> Process::Signal(int signal) {
  State& s = *state_;
  if (signal <= 0 || signal >= 65) co_return absl::InvalidArgumentError(absl::StrCat(signal, " is not a signal"));
  if (s.disconnected) co_return Disconnected();
  if (s.core.exit) co_return absl::NotFoundError("the process has exited");
  if (!s.failed.ok()) co_return s.failed;
  wire::Envelope env;
  env.mutable_signal()->set_signal(signal);
  co_return co_await s.SendActed(std::move(env), "signal",
                                 absl::NotFoundError("the process exited before the signal was acknowledged"));
}

asio::awaitable<absl::Status> Process::Signal(std::string_view name) {
  absl::StatusOr<int> n = SignalNumber(name);
  if (!n.ok()) co_return n.status();
  co_return co_await Signal(*n);
}

asio::awaitable<absl::Status> Process::Terminate(unsigned grace_ms) {
  State& s = *state_;
  core::Requests& r = s.core.requests;
  if (r.terminate_result()) co_return *r.terminate_result();
  if (s.disconnected) co_return Disconnected();
  if (s.core.exit) co_return absl::OkStatus();
  if (!s.failed.ok()) co_return s.failed;
  if (!r.terminate_sent()) {
    wire::Envelope env;
    env.mutable_terminate()->set_grace_ms(grace_ms);
    r.TerminateSent(s.session->Send(std::move(env)), grace_ms);
    // Only the first caller arms the deadline; the others share its outcome.
    auto state = state_;
    auto deadline = std::make_shared<asio::steady_timer>(co_await asio::this_coro::executor, kStatusTimeout);
    deadline->async_wait([state, deadline](boost::system::error_code ec) {
      if (ec || state->core.requests.terminate_result() || state->core.exit) return;
      state->core.requests.SetTerminateResult(OutcomeUnknownError(
          "the terminate request was not acknowledged within 30 s; it is not sent again"));
      state->cond.NotifyAll();
    });
    s.terminate_deadline = deadline;
  }
  while (!r.terminate_result() && !s.core.exit && s.failed.ok()) {
    if (!co_await s.cond.Wait()) {
      co_return WaitAbortedError("this caller stopped waiting; the terminate request stands");
    }
  }
  if (r.terminate_result()) co_return *r.terminate_result();
  if (s.core.exit) co_return absl::OkStatus();  // it exited: the request did its work or was moot
  // The connection failed with the request in flight: we cannot tell.
  r.SetTerminateResult(OutcomeUnknownError(absl::StrCat(
      "the connection failed before the terminate request was acknowledged: ", std::string(s.failed.message()))));
  co_return *r.terminate_result();
}

asio::awaitable<absl::StatusOr<ProcessStatus>> Process::Status() {
  State& s = *state_;
  ProcessStatus st;
  st.observed_at = std::chrono::system_clock::now();
  if (s.core.exit) {
    st.state = ProcessStatus::State::kExited;
    st.exit = s.core.exit;
    co_return st;
  }
  if (s.disconnected || !s.failed.ok()) co_return st;  // unknown: no evidence either way
  wire::Envelope env;
  env.mutable_status_request();
  const std::uint64_t id = s.session->Send(std::move(env));
  s.core.requests.StatusSent(id);
  // The timer's handler owns what it touches (this coroutine's frame may be
  // gone when a handler queued at expiry runs).
  auto timed_out = std::make_shared<bool>(false);
  auto deadline = std::make_shared<asio::steady_timer>(co_await asio::this_coro::executor, kStatusTimeout);
  deadline->async_wait([timed_out, state = state_, deadline](boost::system::error_code ec) {
    if (ec) return;
    *timed_out = true;
    state->cond.NotifyAll();
  });
  bool aborted = false;
  while (!s.core.requests.StatusReply(id) && !*timed_out && s.failed.ok() && !s.core.exit) {
    if (!co_await s.cond.Wait()) {
      aborted = true;
      break;
    }
  }
  deadline->cancel();
  const std::optional<wire::ProcessState> reply = s.core.requests.StatusReply(id);
  s.core.requests.Forget(id);
  if (aborted) co_return WaitAbortedError("the status check was aborted");
  st.observed_at = std::chrono::system_clock::now();
  if (s.core.exit) {
    st.state = ProcessStatus::State::kExited;
    st.exit = s.core.exit;
  } else if (reply && reply->phase() == wire::ProcessState::PHASE_RUNNING) {
    st.state = ProcessStatus::State::kRunning;
  } else if (reply && reply->phase() == wire::ProcessState::PHASE_EXITED && reply->has_exit()) {
    // The supervisor reaped it; its output may still be unread.
    st.state = ProcessStatus::State::kExited;
    st.exit = core::ToExitStatus(reply->exit());
  }
  co_return st;
}

absl::StatusOr<std::string> Process::Reference() const {
  const State& s = *state_;
  if (s.control) return absl::FailedPreconditionError("a control handle issues no references");
  if (absl::Status st = s.core.input.Settled(s.core.exit.has_value()); !st.ok()) return st;
  const core::OutputReceiver& out = s.core.output;
  ProcessReference r;
  r.provider = s.provider;
  r.sandbox = s.sandbox;
  r.supervisor = s.target.supervisor;
  r.state_dir = s.target.state_dir;
  r.secret = s.secret;
  r.pid = s.core.pid;
  r.stdin_pipe = s.core.input.pipe();
  r.pty = out.config().pty;
  r.text = out.config().text;
  r.backpressure = out.config().backpressure;
  r.window_bytes = out.config().window;
  r.output_left = out.finite() ? static_cast<std::int64_t>(out.output_left()) : -1;
  // Bytes consumed but held back undecoded (text) are not delivered yet.
  r.stdout_offset = out.delivered(0);
  r.stderr_offset = out.delivered(1);
  // The supervisor's ticket decides how long the reference lives.
  if (s.core.ticket.expires_at() == 0 || s.core.ticket.mac().size() != 32) {
    return absl::FailedPreconditionError("the supervisor issued no reference ticket");
  }
  r.expires_at = static_cast<std::int64_t>(s.core.ticket.expires_at());
  r.ticket_mac = s.core.ticket.mac();
  return EncodeReference(r);
}

asio::awaitable<absl::Status> Process::Disconnect() {
  State& s = *state_;
  if (s.disconnected) co_return absl::OkStatus();
  // What was consumed is acknowledged before the Detach (the supervisor
  // then resumes the next attachment after it).
  const bool was_healthy = s.failed.ok();
  if (!s.core.exit && was_healthy) s.FlushAck();
  s.disconnected = true;
  s.ping_timer.cancel();
  s.cond.NotifyAll();
  if (s.session->closed()) co_return absl::OkStatus();
  // The exit was acknowledged (everything was read, Wait saw the exit): the
  // supervisor is done with this attachment and ends it itself, as when
  // the handle is dropped. A Detach on top only cost a round trip and,
  // through E2B, the connection: the next start had to connect again
  // (./dev startbench, @tether/node's warm start at 25 ms one-way: 231 ms
  // with a detach after each job, 132 ms without).
  if (s.exit_acked) co_return absl::OkStatus();
  // Unread output stays in the supervisor's ring for the next attachment.
  wire::Envelope env;
  env.mutable_detach();
  s.session->Send(std::move(env));
  // The supervisor closes the connection once it has the Detach; the pump,
  // the connection's only reader, sees that and closes the session. Wait
  // for it (bounded) rather than read here too: two readers of one channel
  // split its frames between them, and the pump, failing on half a stream,
  // closed the session before the writer had sent the Detach (the
  // supervisor then kept backpressure for a lease, as for a lost host).
  auto state = state_;
  boost::asio::steady_timer limit(co_await boost::asio::this_coro::executor, kCloseAfterExitTimeout);
  limit.async_wait([state](boost::system::error_code ec) {
    if (!ec) state->session->Close();
  });
  bool aborted = false;
  while (!s.session->closed()) {
    if (!co_await s.cond.Wait()) {
      aborted = true;
      break;
    }
  }
  limit.cancel();
  // The supervisor ending the channel confirms the Detach. A channel that
  // failed instead (an answer lost on a provider that carries frames as
  // calls) may have lost it, and the supervisor then holds the process
  // for this handle until it sees that channel end, which may take a
  // lease: another handle's Reopen gets BUSY meanwhile. Attaching again
  // with this handle's id takes the process from that attachment
  // (PROTOCOL.md 5.4), and a Detach there frees it now. Bounded; if it
  // fails, the lease frees the process as before.
  if (!aborted && was_healthy && !s.control && !s.core.exit && !s.session->ended_by_peer() &&
      !(co_await boost::asio::this_coro::cancellation_state).cancelled()) {
    const auto until = std::chrono::steady_clock::now() + kCloseAfterExitTimeout;
    absl::StatusOr<wire::Welcome> again = co_await s.ReattachUntil(s.ResumeHello(), until, "detaching again");
    if (again.ok()) {
      wire::Envelope detach;
      detach.mutable_detach();
      s.session->Send(std::move(detach));
      co_await s.session->Drain(kCloseAfterExitTimeout);
    } else if (s.session) {
      s.session->Close();
    }
  }
  co_return absl::OkStatus();
}

asio::awaitable<absl::Status> Process::Detach() {
  State& s = *state_;
  absl::Status st = co_await Disconnect();
  s.core.output.Discard();  // Read() ends: nothing more for this handle
  s.cond.NotifyAll();
  co_return st;
}

asio::awaitable<absl::Status> Process::Resize(unsigned cols, unsigned rows) {
  State& s = *state_;
  if (!s.core.output.config().pty) co_return absl::UnimplementedError("resize: this process has no terminal");
  if (absl::Status st = CheckTerminalSize(cols, rows); !st.ok()) co_return st;
  if (s.disconnected) co_return Disconnected();
  if (s.core.exit) co_return absl::OkStatus();
  if (!s.failed.ok()) co_return s.failed;
  wire::Envelope env;
  env.mutable_resize()->mutable_size()->set_cols(cols);
  env.mutable_resize()->mutable_size()->set_rows(rows);
  // (Idempotent: sent again after a cut until acknowledged. The child may
  // then see one more SIGWINCH, with the same size.)
  co_return co_await s.SendActed(std::move(env), "resize", absl::OkStatus(), /*idempotent=*/true);
}

}  // namespace tether
