#include "host/core/process_core.h"

#include "absl/strings/str_cat.h"
#include "tether/errors.h"
#include "protocol/envelope.h"

namespace tether::core {

ExitStatus ToExitStatus(const wire::Exit& e) {
  ExitStatus s;
  if (e.how_case() == wire::Exit::kSignal) {
    s.signal = e.signal();
  } else {
    s.code = e.code();
  }
  s.core_dumped = e.core_dumped();
  s.output_cut = e.output_cut();
  s.user_us = e.rusage().user_us();
  s.system_us = e.rusage().system_us();
  s.max_rss_kib = e.rusage().max_rss_kib();
  return s;
}

absl::Status LaunchFailure(const wire::Exit& e) {
  const std::string msg = e.message().empty() ? "the process could not be started" : e.message();
  switch (e.failure()) {
    case wire::ERROR_INVALID_ARGUMENT: return absl::InvalidArgumentError(msg);
    case wire::ERROR_CANCELLED: return absl::CancelledError(msg);
    case wire::ERROR_RESOURCE_EXHAUSTED: return absl::ResourceExhaustedError(msg);
    default: return e.code() == 126 ? absl::PermissionDeniedError(msg) : absl::NotFoundError(msg);
  }
}

absl::Status ProcessCore::Attached(const wire::Welcome& welcome) {
  pid = welcome.state().pid();
  if (welcome.has_ticket()) ticket = welcome.ticket();
  return input.SetWindow(welcome.stdin_window_bytes());
}

absl::Status ProcessCore::Handle(wire::Envelope& env, std::uint64_t generation, Effects* fx) {
  if (env.generation() < generation) return absl::OkStatus();  // replayed from an earlier attachment
  if (env.generation() != generation) {
    return absl::DataLossError(
        absl::StrCat("frame of generation ", env.generation(), " on attachment ", generation));
  }
  switch (env.body_case()) {
    case wire::Envelope::kOutput:
      return output.OnOutput(*env.mutable_output());
    case wire::Envelope::kStdinAck:
      return input.OnAck(env.stdin_ack());
    case wire::Envelope::kExit:
      if (!output.ended()) return absl::DataLossError("exit before the end of output");
      if (!exit) {
        exit = ToExitStatus(env.exit());
        fx->exit_arrived = true;
      }
      return absl::OkStatus();
    case wire::Envelope::kOutputGap:
      return output.OnGap(env.output_gap());
    case wire::Envelope::kError:
      if (env.error().fatal()) return StatusFromWireError(env.error());
      if (env.error().code() == wire::ERROR_INPUT_CLOSED) input.OnClosedByChild();
      requests.OnError(env.request_id(), StatusFromWireError(env.error()));
      return absl::OkStatus();
    case wire::Envelope::kStatus:
      fx->terminate_settled = requests.OnStatus(env.request_id(), env.status()) || fx->terminate_settled;
      return absl::OkStatus();
    case wire::Envelope::kPong:
      requests.OnPong(env.request_id());
      if (env.pong().ticket().expires_at() > ticket.expires_at()) ticket = env.pong().ticket();
      return absl::OkStatus();
    case wire::Envelope::kWelcome:
      return absl::OkStatus();  // this attachment's welcome again: a text channel's replay
    default:
      return absl::DataLossError(
          absl::StrCat("unexpected ", std::string(protocol::BodyName(env)), " from the supervisor"));
  }
}

}  // namespace tether::core
