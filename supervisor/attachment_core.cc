#include "supervisor/attachment_core.h"

#include <csignal>
#include <utility>

#include "absl/strings/str_cat.h"
#include "protocol/status_macros.h"
#include "tether/protocol/version.h"

namespace tether::supervisor {
namespace {

using protocol::Compression;

bool SecretsEqual(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// The error a fatal Status becomes on the wire.
wire::ErrorCode FatalCode(const absl::Status& st) {
  switch (st.code()) {
    case absl::StatusCode::kUnauthenticated: return wire::ERROR_UNAUTHENTICATED;
    case absl::StatusCode::kDeadlineExceeded: return wire::ERROR_EXPIRED;
    case absl::StatusCode::kUnavailable: return wire::ERROR_BUSY;
    case absl::StatusCode::kResourceExhausted: return wire::ERROR_RESOURCE_EXHAUSTED;
    // A well-formed request for something that is not there (a resume
    // offset beyond the output): the caller's argument, not a broken peer.
    case absl::StatusCode::kOutOfRange: return wire::ERROR_INVALID_ARGUMENT;
    default: return wire::ERROR_PROTOCOL;
  }
}

}  // namespace

AttachmentCore::Step AttachmentCore::Next(std::string_view* in, std::int64_t now_s, std::vector<Action>* actions) {
  absl::StatusOr<bool> got = decoder_.Next(in, &env_);
  absl::Status st = got.ok() ? absl::OkStatus() : got.status();
  if (st.ok() && !*got) return Step::kNeedMore;
  if (st.ok()) st = Handle(env_, now_s, actions);
  if (st.ok()) return Step::kHandled;
  // Hostile or corrupt input: say why, and drop the attachment once that is
  // written (after the batch in progress: the host never sees half a frame).
  QueueError(FatalCode(st), std::string(st.message()), env_.request_id(), true);
  closing_ = true;
  return Step::kStop;
}

void AttachmentCore::Queue(const wire::Envelope& env) {
  wire::Envelope copy = env;
  copy.set_generation(generation_);
  protocol::AppendEnvelope(copy, Compression::kNone, &queued_);
  wake_ = true;
}

void AttachmentCore::QueueError(wire::ErrorCode code, std::string message, std::uint64_t request_id, bool fatal) {
  wire::Envelope env;
  wire::Error* e = env.mutable_error();
  e->set_code(code);
  e->set_message(std::move(message));
  e->set_request_id(request_id);
  e->set_fatal(fatal);
  Queue(env);
}

void AttachmentCore::QueueStdinAck() {
  stdin_ack_dirty_ = true;
  wake_ = true;
}

bool AttachmentCore::TakeWake() { return std::exchange(wake_, false); }

void AttachmentCore::Refused(const Action& action, const absl::Status& why) {
  wire::ErrorCode code = wire::ERROR_INVALID_ARGUMENT;
  if (action.kind == Action::kSignal && !absl::IsInvalidArgument(why)) code = wire::ERROR_NOT_FOUND;
  if (action.kind == Action::kResize && absl::IsUnimplemented(why)) code = wire::ERROR_UNSUPPORTED;
  QueueError(code, std::string(why.message()), action.request_id, false);
}

AttachmentCore::Lease AttachmentCore::CheckLease(Clock::time_point now) const {
  const auto limit = authenticated_ ? std::chrono::milliseconds(p_.lease_ms()) : std::chrono::milliseconds(kHelloTimeoutMs);
  Lease l;
  l.deadline = last_request_ + limit;
  l.expired = now >= l.deadline;
  l.unless_peer_stopped = l.expired && authenticated_;
  return l;
}

void AttachmentCore::QueueWelcome(std::uint64_t request_id, std::uint64_t stdin_window, std::int64_t now_s) {
  wire::Envelope reply;
  reply.set_request_id(request_id);
  wire::Welcome* w = reply.mutable_welcome();
  w->set_version(kProtocolVersion);
  w->set_supervisor_version(kTetherVersion);
  w->set_generation(generation_);
  *w->mutable_state() = p_.State();
  w->set_stdin_window_bytes(stdin_window);
  w->set_max_frame_bytes(protocol::kMaxFrameBytes);
  *w->mutable_ticket() = p_.tickets.Issue(now_s);
  w->set_state_dir(p_.launch.state_dir());
  w->set_supervisor_path(p_.supervisor_path);
  Queue(reply);
}

absl::Status AttachmentCore::HandleHello(const wire::Envelope& env, std::int64_t now_s, std::vector<Action>* actions) {
  const wire::Hello& h = env.hello();
  if (!SecretsEqual(h.secret(), p_.launch.secret())) return absl::UnauthenticatedError("hello: wrong secret");
  if (h.handle().size() > protocol::kMaxHandleIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat("hello: a handle id of ", h.handle().size(), " bytes (at most ",
                                                   protocol::kMaxHandleIdBytes, ")"));
  }
  if (h.min_version() > kProtocolVersion || h.max_version() < kProtocolVersion) {
    return absl::InvalidArgumentError(absl::StrCat("hello: host speaks protocol ", h.min_version(), "..",
                                                   h.max_version(), ", supervisor speaks ", kProtocolVersion));
  }
  // The first attachment is the launching host's own; every later one comes
  // from a reference (or a handle that reattaches) and shows its ticket. A
  // host whose launch answer was lost sends the Launch again with a resend
  // Hello: it may have been the first attachment already, without ever
  // receiving the Welcome and its ticket. It needs none early on, which
  // opens nothing: any reference issued by then is valid for a day.
  const bool resend = h.resend() && p_.launched_at_s > 0 && now_s >= p_.launched_at_s &&
                      now_s - p_.launched_at_s < kResendWindowSeconds;
  // (A resend with the right secret, even one refused as too late: a copy of
  // its launch may still be on its way, so the record leaves a marker.)
  if (h.resend()) p_.resent = true;
  if (p_.generation > 0 && !resend) RETURN_IF_ERROR(p_.tickets.Check(h.ticket(), now_s));
  if (h.control()) {
    // Requests only: no generation of its own, no output, no exit record.
    authenticated_ = true;
    control_ = true;
    generation_ = p_.generation;
    QueueWelcome(env.request_id(), 0, now_s);  // no stdin window: it sends none
    return absl::OkStatus();
  }
  const bool pty = p_.pty();
  const std::uint64_t resume[kNumStreams] = {pty ? h.pty_offset() : h.stdout_offset(), h.stderr_offset()};
  for (int i = 0; i < kNumStreams; ++i) {
    if (resume[i] > p_.rings[i].end()) {
      return absl::OutOfRangeError(absl::StrCat("hello: resume offset ", resume[i], " is beyond the ",
                                                     p_.rings[i].end(), " bytes ", i == 0 ? (pty ? "the terminal" : "stdout") : "stderr",
                                                     " has produced so far"));
    }
  }
  // The same handle attaching again (its own earlier attachment, given up
  // on its side, not yet seen ending here): an empty handle claims nothing.
  const bool same_handle = p_.held && !h.handle().empty() && h.handle() == p_.holder_handle;
  if (p_.held && (resend || same_handle)) {
    // The launching host sending its launch again, or a handle attaching
    // again: what holds the process is (but for a reopen in the launch's
    // first two minutes) its own earlier attempt, whose channel it has
    // given up on and the daemon has not yet seen end. It would otherwise
    // get BUSY for a lease.
    actions->push_back({Action::kDisplaced});
  } else if (p_.held) {
    return absl::UnavailableError(absl::StrCat(
        "busy: attachment generation ", p_.generation, " holds this process; it is freed by its disconnect or after ",
        p_.lease_ms(), " ms without requests"));
  }
  p_.held = true;
  p_.holder_handle = h.handle();
  generation_ = ++p_.generation;
  actions->push_back({Action::kAttached});
  authenticated_ = true;
  sender_.Start(h.zstd(), h.window_bytes());

  QueueWelcome(env.request_id(), kStdinWindowBytes, now_s);

  for (int i = 0; i < kNumStreams; ++i) {
    OutputRing& r = p_.rings[i];
    std::uint64_t from = resume[i];
    if (from < r.begin()) {
      wire::Envelope gap;
      gap.mutable_output_gap()->set_stream(StreamOf(i, pty));
      gap.mutable_output_gap()->set_from(from);
      gap.mutable_output_gap()->set_to(r.begin());
      gap.mutable_output_gap()->set_dropped(r.DroppedIn(from, r.begin()));
      Queue(gap);
      from = r.begin();
    }
    r.Release(from);
    actions->push_back({Action::kReleased, i});
    sender_.Resume(i, from);
  }
  return absl::OkStatus();
}

absl::Status AttachmentCore::HandleAck(const wire::Ack& ack, std::vector<Action>* actions) {
  const std::array<std::uint64_t, kNumStreams> offsets = {p_.pty() ? ack.pty_offset() : ack.stdout_offset(),
                                                          ack.stderr_offset()};
  std::array<bool, kNumStreams> released{};
  const absl::Status st = sender_.Ack(offsets, ack.window_bytes(), p_, &released);
  for (int i = 0; i < kNumStreams; ++i) {
    if (released[i]) actions->push_back({Action::kReleased, i});
  }
  RETURN_IF_ERROR(st);
  if (ack.exit()) {
    if (!sender_.exit_sent()) return absl::InvalidArgumentError("ack: exit acknowledged before it was sent");
    actions->push_back({Action::kExitAcknowledged});
  }
  wake_ = true;
  return absl::OkStatus();
}

absl::Status AttachmentCore::Handle(const wire::Envelope& env, std::int64_t now_s, std::vector<Action>* actions) {
  if (closing_) return absl::OkStatus();  // detached or failed: nothing more is read
  if (!authenticated_) {
    if (env.body_case() != wire::Envelope::kHello) {
      return absl::UnauthenticatedError(
          absl::StrCat("expected hello first, got ", std::string(protocol::BodyName(env))));
    }
    return HandleHello(env, now_s, actions);
  }
  if (env.generation() != generation_) {
    QueueError(wire::ERROR_STALE_GENERATION,
               absl::StrCat(std::string(protocol::BodyName(env)), " of generation ", env.generation(),
                            " refused: the current attachment is generation ", generation_),
               env.request_id(), false);
    return absl::OkStatus();
  }
  if (control_ && (env.body_case() == wire::Envelope::kStdinData || env.body_case() == wire::Envelope::kStdinEof ||
                   env.body_case() == wire::Envelope::kAck)) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(protocol::BodyName(env)), " is not allowed on a control attachment"));
  }
  switch (env.body_case()) {
    case wire::Envelope::kStdinData: {
      absl::StatusOr<StdinQueue::Accepted> got = p_.stdin_queue.Accept(env.stdin_data(), p_.stdin_enabled());
      if (absl::IsFailedPrecondition(got.status())) {
        QueueError(wire::ERROR_INPUT_CLOSED, std::string(got.status().message()), env.request_id(), false);
        return absl::OkStatus();
      }
      if (!got.ok()) return got.status();
      if (*got == StdinQueue::Accepted::kQueued) actions->push_back({Action::kStdinReady});
      if (*got == StdinQueue::Accepted::kDropped) QueueStdinAck();  // acknowledged, not written
      return absl::OkStatus();
    }
    case wire::Envelope::kStdinEof: {
      absl::StatusOr<bool> fresh = p_.stdin_queue.AcceptEof(env.stdin_eof());
      if (!fresh.ok()) return fresh.status();
      if (!*fresh) return absl::OkStatus();  // a replay
      actions->push_back({Action::kStdinReady});
      // No pump will deliver it: acknowledge it now.
      if (!p_.stdin_enabled() || p_.stdin_queue.closed()) QueueStdinAck();
      return absl::OkStatus();
    }
    case wire::Envelope::kAck:
      return HandleAck(env.ack(), actions);
    case wire::Envelope::kSignal: {
      const int sig = env.signal().signal();
      if (sig <= 0 || sig >= NSIG) {
        QueueError(wire::ERROR_INVALID_ARGUMENT, absl::StrCat("signal: ", sig, " is not a signal"), env.request_id(),
                   false);
      } else if (p_.pgid <= 1 || p_.exit) {
        QueueError(wire::ERROR_NOT_FOUND, "signal: the process has exited", env.request_id(), false);
      } else {
        actions->push_back({Action::kSignal, sig, {}, env.request_id()});
      }
      return absl::OkStatus();
    }
    case wire::Envelope::kTerminate: {
      actions->push_back({Action::kTerminate, static_cast<int>(env.terminate().grace_ms())});
      // The acknowledgement: the state right after the request took effect
      // (terminating changes no field of it at once).
      wire::Envelope reply;
      reply.set_request_id(env.request_id());
      *reply.mutable_status() = p_.State();
      Queue(reply);
      return absl::OkStatus();
    }
    case wire::Envelope::kResize:
      if (!p_.pty()) {
        QueueError(wire::ERROR_UNSUPPORTED, "resize: this process has no terminal", env.request_id(), false);
      } else {
        actions->push_back({Action::kResize, 0, env.resize().size(), env.request_id()});
      }
      return absl::OkStatus();
    case wire::Envelope::kStatusRequest: {
      wire::Envelope reply;
      reply.set_request_id(env.request_id());
      *reply.mutable_status() = p_.State();
      Queue(reply);
      return absl::OkStatus();
    }
    case wire::Envelope::kPing: {
      wire::Envelope reply;
      reply.set_request_id(env.request_id());
      reply.mutable_pong()->set_nonce(env.ping().nonce());
      *reply.mutable_pong()->mutable_ticket() = p_.tickets.Issue(now_s);
      Queue(reply);
      return absl::OkStatus();
    }
    case wire::Envelope::kDetach:
      // Explicit disconnect: the writer finishes its current frames (so the
      // host never sees half a frame) and then frees the attachment.
      closing_ = true;
      deliberate_end_ = true;
      wake_ = true;
      return absl::OkStatus();
    case wire::Envelope::kHello:
      return absl::InvalidArgumentError("hello: already attached");
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(std::string(protocol::BodyName(env)), " is not a request a host may send"));
  }
}

void AttachmentCore::NextBatch(OutputBatch* batch) {
  batch->Clear();
  batch->Append(queued_);
  queued_.clear();
  if (!authenticated_ || control_ || closing_) return;
  if (stdin_ack_dirty_) {
    stdin_ack_dirty_ = false;
    wire::Envelope a;
    a.set_generation(generation_);
    a.mutable_stdin_ack()->set_offset(p_.stdin_queue.written());
    a.mutable_stdin_ack()->set_eof(p_.stdin_queue.closed());
    a.mutable_stdin_ack()->set_closed_by_child(p_.stdin_queue.closed_by_child());
    protocol::AppendEnvelope(a, Compression::kNone, batch->owned());
  }
  sender_.Append(p_, generation_, batch);
}

}  // namespace tether::supervisor
