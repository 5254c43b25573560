// Process::State: the receive pump, keepalive, acks and reattaching around
// the protocol core (see host/process/state.h).
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tether/errors.h"
#include "host/process/state.h"

namespace tether {

namespace asio = boost::asio;

absl::Status Process::State::Begin(const wire::Welcome& welcome) {
  if (absl::Status st = core.Attached(welcome); !st.ok()) return st;
  pumping = true;  // (before the keepalive's first look)
  auto ex = close_timer.get_executor();
  asio::co_spawn(ex, Pump(), asio::detached);
  asio::co_spawn(ex, Keepalive(), asio::detached);
  return absl::OkStatus();
}

void Process::State::Heard() {
  unanswered_pings = 0;
  last_heard = std::chrono::steady_clock::now();
}

void Process::State::Fail(absl::Status st) {
  if (failed.ok()) failed = std::move(st);
  core.input.OnConnectionLost(failed);
  ping_timer.cancel();
  session->Close();
  cond.NotifyAll();
}

void Process::State::MaybeAck() {
  // Credit due (a quarter window consumed, or the end read) goes at once.
  // Less rides on the keepalive's ping, at most ping_interval (a third of
  // the lease) later, or goes before a Detach (Disconnect flushes). An ack
  // of its own for a trickle, or a timer for one, woke the daemon (and
  // this thread) a second time per output frame; the supervisor is far
  // from blocked while less than a step is unacknowledged.
  if (core.output.AckDue()) AckConsumed();
}

void Process::State::AckConsumed() {
  if (core.exit || !failed.ok() || disconnected) return;
  FlushAck();
}

void Process::State::FlushAck() {
  if (session->closed() || !core.output.AckPending()) return;
  wire::Envelope env;
  *env.mutable_ack() = core.output.MakeAck(false);
  session->Send(std::move(env));
}

void Process::State::AckExit() {
  if (exit_acked || !core.exit || session->closed()) return;
  exit_acked = true;
  ping_timer.cancel();
  core.output.ReleaseTaken();  // the application is done with what it read
  wire::Envelope env;
  *env.mutable_ack() = core.output.MakeAck(true);
  session->Send(std::move(env));
  close_timer.expires_after(kCloseAfterExitTimeout);
  close_timer.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (!ec) self->session->Close();
  });
}

// The supervisor frees an attachment that is silent for a lease; a quiet
// process (nothing to ack, no input) must not lose its attachment. The
// keepalive lives as long as the pump: across reattaches (a ping due while
// one is under way waits for the next attachment), and it gives up an
// attachment that answers nothing (kSilentPings).
asio::awaitable<void> Process::State::Keepalive() {
  auto self = shared_from_this();
  std::uint64_t nonce = 0;
  const Session* watched = nullptr;  // the session whose bytes were counted, and how many
  std::uint64_t watched_bytes = 0;
  const auto still = [this] { return pumping && !exit_acked && failed.ok() && !disconnected; };
  while (still()) {
    ping_timer.expires_after(ping_interval);
    co_await ping_timer.async_wait(asio::as_tuple(asio::use_awaitable));
    if (!still()) break;
    if (session->closed()) continue;  // reattaching: the next attachment gets the next ping
    if (session.get() != watched || session->received_bytes() != watched_bytes) {
      watched = session.get();
      watched_bytes = session->received_bytes();
      Heard();  // part of a frame counts: a slow channel is not a silent one
    }
    const auto quiet = std::chrono::steady_clock::now() - last_heard;
    if (unanswered_pings >= kSilentPings && quiet >= kSilentFloor) {
      silenced = absl::UnavailableError(absl::StrCat(
          "the attachment went silent: nothing from the supervisor for ",
          std::chrono::duration_cast<std::chrono::milliseconds>(quiet).count(), " ms, ", unanswered_pings,
          " pings unanswered; the channel was given up"));
      session->Close();  // the pump sees it end: reattach or fail
      continue;
    }
    AckConsumed();  // rides on the ping: one write, one wake-up of the daemon
    wire::Envelope env;
    env.mutable_ping()->set_nonce(++nonce);
    session->Send(std::move(env));
    ++unanswered_pings;
  }
}

asio::awaitable<void> Process::State::Pump() {
  auto self = shared_from_this();
  Heard();  // (what arrives later the keepalive counts: Session::received_bytes)
  while (true) {
    absl::StatusOr<wire::Envelope> env = co_await session->Receive();
    if (!env.ok() && !silenced.ok()) env = std::exchange(silenced, absl::OkStatus());
    if (!env.ok()) {
      // The channel ending after a confirmed exit is the normal end.
      if (core.exit) break;
      if (reconnect && !disconnected && absl::IsUnavailable(env.status())) {
        absl::Status st = co_await Reconnect(env.status());
        if (st.ok()) continue;
        Fail(std::move(st));
        break;
      }
      Fail(env.status());
      break;
    }
    core::Effects fx;
    if (absl::Status st = core.Handle(*env, session->generation(), &fx); !st.ok()) {
      Fail(st);
      break;
    }
    if (fx.exit_arrived || fx.terminate_settled) {
      if (terminate_deadline) terminate_deadline->cancel();
    }
    // Acknowledged only once delivered to a reader (Wait), so that the
    // supervisor keeps it, with any output, for whoever reads it.
    if (fx.exit_arrived && ack_exit_on_arrival) AckExit();
    if (env->has_output()) MaybeAck();
    cond.NotifyAll();
  }
  pumping = false;
  close_timer.cancel();
  ping_timer.cancel();
  if (terminate_deadline) terminate_deadline->cancel();
  session->Close();
  cond.NotifyAll();
}

wire::Hello Process::State::ResumeHello() const {
  wire::Hello hello;
  hello.set_secret(secret);
  hello.set_handle(handle_id);
  const core::OutputReceiver& out = core.output;
  if (out.config().pty) {
    hello.set_pty_offset(out.resume_offset(0));
  } else {
    hello.set_stdout_offset(out.resume_offset(0));
  }
  hello.set_stderr_offset(out.resume_offset(1));
  hello.set_window_bytes(out.config().window);
  *hello.mutable_ticket() = core.ticket;
  return hello;
}

asio::awaitable<void> Process::State::CloseSessionAt(asio::steady_timer& timer) {
  auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
  // A timer that fired in the turn the other branch won is cancelled too
  // late to report it: the session that branch opened must stay open.
  const asio::cancellation_state cs = co_await asio::this_coro::cancellation_state;
  if (!ec && cs.cancelled() == asio::cancellation_type::none && session) session->Close();
}

asio::awaitable<absl::StatusOr<wire::Welcome>> Process::State::ReattachUntil(
    wire::Hello hello, std::chrono::steady_clock::time_point deadline, std::string_view limit) {
  using namespace asio::experimental::awaitable_operators;
  auto self = shared_from_this();
  asio::steady_timer timer(co_await asio::this_coro::executor, deadline);
  auto raced = co_await (tunnel->Reattach(target, std::move(hello), session) || CloseSessionAt(timer));
  if (raced.index() == 0) co_return std::get<0>(std::move(raced));
  co_return absl::UnavailableError(
      absl::StrCat("attaching to the process did not finish within the time limit (", std::string(limit), ")"));
}

asio::awaitable<absl::Status> Process::State::Reconnect(const absl::Status& lost) {
  auto self = shared_from_this();
  // Input waits while this runs (AwaitInputTurn); whatever the outcome, the
  // writers are woken when it ends.
  struct Reattaching {
    State& s;
    explicit Reattaching(State& st) : s(st) { s.reattaching = true; }
    ~Reattaching() {
      s.reattaching = false;
      s.cond.NotifyAll();
    }
  } reattaching_now(*this);
  using std::chrono::steady_clock;
  const auto deadline = steady_clock::now() + reconnect_timeout;
  // The per-attempt bound (kReconnectAttemptShare): a channel that opens and
  // then never answers the Hello, nor closes, would otherwise hold this
  // loop, and the handle, forever.
  const auto attempt_limit = std::max(reconnect_timeout / kReconnectAttemptShare, std::chrono::milliseconds(1));
  const std::string attempt_what = absl::StrCat(attempt_limit.count(), " ms per attempt");
  auto backoff = std::chrono::milliseconds(20);
  absl::Status last;
  int attempts = 0;
  // (`reconnect` goes false when the handle is dropped: nobody holds this
  // attachment any more, so a reattach in flight must not outlive it.)
  while (steady_clock::now() < deadline && !disconnected && !core.exit && reconnect) {
    core.output.Attached();
    ++attempts;
    // The last attempt that fits gets all the time left: a slow channel
    // (a provider's own retry, a 429's Retry-After) may still make it.
    const auto now = steady_clock::now();
    const auto attempt_deadline = deadline - now <= 2 * attempt_limit ? deadline : now + attempt_limit;
    absl::StatusOr<wire::Welcome> welcome = co_await ReattachUntil(ResumeHello(), attempt_deadline, attempt_what);
    if (welcome.ok() && !reconnect) {
      // The handle was dropped while this attempt ran: the attachment it
      // won is released at once (a dropped handle ends its attachment), not
      // kept alive by keepalives that nobody reads.
      if (session) session->Close();
      co_return lost;
    }
    if (welcome.ok()) {
      ++reconnects;
      Heard();
      if (welcome->has_ticket()) core.ticket = welcome->ticket();
      // The new attachment knows what the supervisor holds: send again what
      // it lacks (it drops what it already has, by offset and id).
      (void)core.input.SetWindow(welcome->stdin_window_bytes());
      for (wire::Envelope& env : core.input.Resend(welcome->state())) session->Send(std::move(env));
      if (core.requests.terminate_pending()) {
        wire::Envelope env;
        env.mutable_terminate()->set_grace_ms(core.requests.terminate_grace_ms());
        core.requests.TerminateResent(session->Send(std::move(env)));
      }
      for (std::uint64_t first : core.requests.StatusPending()) {
        wire::Envelope env;
        env.mutable_status_request();
        core.requests.StatusResent(session->Send(std::move(env)), first);
      }
      // Credit as it stands (the Hello carried our acknowledged offsets).
      wire::Envelope ack;
      *ack.mutable_ack() = core.output.MakeAck(false);
      session->Send(std::move(ack));
      cond.NotifyAll();
      co_return absl::OkStatus();
    }
    // A given-up attempt's session is closed (ReattachUntil); one that
    // failed on its own may not be.
    if (session) session->Close();
    last = welcome.status();
    if (absl::IsNotFound(last) || absl::IsUnauthenticated(last)) {
      co_return MakeError(ErrorCode::kUnavailable,
                          absl::StrCat(lost.message(), "; the process cannot be reattached: ", last.message()));
    }
    const auto left = deadline - steady_clock::now();
    if (left <= steady_clock::duration::zero()) break;
    asio::steady_timer t(close_timer.get_executor(), std::min<steady_clock::duration>(backoff, left));
    co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
  if (attempts == 0 || disconnected || core.exit || !reconnect) co_return lost;
  co_return MakeError(ErrorCode::kUnavailable,
                      absl::StrCat(lost.message(), "; reattaching did not succeed within reconnect_timeout (",
                                   reconnect_timeout.count(), " ms, ", attempts, " attempts; the last: ",
                                   last.message(), ")"));
}

asio::awaitable<absl::Status> Process::State::SendActed(wire::Envelope request, const char* what,
                                                       absl::Status after_exit, bool idempotent) {
  auto self = shared_from_this();
  auto timed_out = std::make_shared<bool>(false);
  auto deadline = std::make_shared<asio::steady_timer>(close_timer.get_executor(), kActedTimeout);
  deadline->async_wait([timed_out, self, deadline](boost::system::error_code ec) {
    if (ec) return;
    *timed_out = true;
    self->cond.NotifyAll();
  });
  absl::Status result;
  while (true) {
    // Reattaching: the old session drops what it is given; wait for the new one.
    bool aborted = false;
    while (session->closed() && failed.ok() && !core.exit && !disconnected && !*timed_out) {
      if (!co_await cond.Wait()) {
        aborted = true;
        break;
      }
    }
    if (aborted) {
      result = WaitAbortedError(absl::StrCat("the ", what, " was aborted before it was sent"));
      break;
    }
    if (disconnected) {
      result = InputClosedError("this handle was disconnected; reopen the process");
      break;
    }
    if (core.exit) {
      result = after_exit;
      break;
    }
    if (!failed.ok()) {
      result = failed;
      break;
    }
    if (*timed_out) {
      result = absl::UnavailableError(absl::StrCat("the ", what, " was not sent: no attachment within ",
                                                   kActedTimeout.count(), " s"));
      break;
    }
    const std::shared_ptr<Session> sent_on = session;
    const std::uint64_t id = sent_on->Send(request);
    const std::uint64_t end = sent_on->queued_bytes();
    wire::Envelope ping;
    ping.mutable_ping();
    core.requests.ActedSent(id, sent_on->Send(std::move(ping)));
    // An exit that arrives now does not end the wait: the supervisor
    // answers the request in order (a NOT_FOUND error if the child had
    // exited before it, else the Pong after acting), and the exit alone
    // cannot tell whether the request reached the child (over a channel
    // that splits frames, E2B's input POSTs, the exit can overtake the Pong).
    while (!core.requests.Acted(id) && session == sent_on && !sent_on->closed() && failed.ok() && !disconnected &&
           !*timed_out) {
      if (!co_await cond.Wait()) {
        aborted = true;
        break;
      }
    }
    const std::optional<absl::Status> acted = core.requests.Acted(id);
    core.requests.ForgetActed(id);
    if (acted) {
      result = *acted;
      break;
    }
    if (aborted) {
      result = WaitAbortedError(absl::StrCat("this caller stopped waiting; the ", what, " was sent"));
      break;
    }
    if (disconnected) {
      result = InputClosedError("this handle was disconnected; reopen the process");
      break;
    }
    if (*timed_out) {
      result = OutcomeUnknownError(absl::StrCat("the ", what, " was not acknowledged within ", kActedTimeout.count(),
                                                " s; it is not sent again"));
      break;
    }
    // The attachment broke. A frame still queued then never left this host:
    // the next attachment gets it (its session is closed, so it never will),
    // unless the process has exited meanwhile: then it reached nothing.
    // So is an idempotent one that did leave: arriving twice does no harm.
    if (sent_on->closed() && (sent_on->handed_bytes() < end || idempotent)) {
      if (core.exit) {
        result = after_exit;
        break;
      }
      continue;
    }
    if (core.exit) {
      result = OutcomeUnknownError(absl::StrCat("the process exited and the attachment ended before the supervisor "
                                                "acknowledged the ", what, ": whether it reached the process is unknown"));
      break;
    }
    result = OutcomeUnknownError(absl::StrCat(
        "the connection broke before the supervisor acknowledged the ", what,
        "; it is not sent again (the supervisor does not deduplicate requests: it could arrive twice)"));
    break;
  }
  deadline->cancel();
  co_return result;
}

absl::Status Process::State::InputAllowed() const {
  if (control) return InputClosedError("a control handle sends no input");
  if (disconnected) return InputClosedError("this handle was disconnected; reopen the process");
  if (absl::Status st = core.input.Allowed(); !st.ok()) return st;
  if (!failed.ok()) return failed;
  if (core.exit) return InputClosedError("the process has exited");
  return absl::OkStatus();
}

asio::awaitable<absl::Status> Process::State::AwaitInputTurn(std::size_t bytes, bool is_close) {
  absl::StatusOr<std::uint64_t> ticket = core.input.Admit(bytes, is_close);
  if (!ticket.ok()) co_return ticket.status();
  auto self = shared_from_this();
  absl::Status result;
  while (true) {
    result = InputAllowed();
    if (!result.ok()) break;
    if (!reattaching && core.input.Ready(*ticket, bytes)) break;
    if (!co_await cond.Wait()) {
      result = WaitAbortedError("the write was aborted while queued; nothing of it was sent");
      break;
    }
  }
  core.input.Leave(*ticket, bytes);
  cond.NotifyAll();  // the next in line
  co_return result;
}

}  // namespace tether
