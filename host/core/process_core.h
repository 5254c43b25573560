// ProcessCore: the host's protocol state for one process, without I/O.
//
// It takes every envelope the supervisor sends on an attachment and updates
// the output receiver, the input sender, the pending requests, the exit
// record and the reference ticket; what it returns is the verdict (a
// protocol violation ends the attachment) and what changed. Process (the
// API, host/process/process.cc) owns the I/O around it: the session that carries
// the frames, timers, waiting callers, reattaching through a tunnel.
//
//   ProcessCore core(config, /*stdin_pipe=*/true, /*keep_copies=*/false);
//   core.Attached(welcome);                 // after the handshake
//   Effects fx;
//   absl::Status st = core.Handle(env, generation, &fx);  // per envelope
//   if (core.output.AckDue()) send(core.output.MakeAck(false));
#pragma once

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "host/core/input_sender.h"
#include "host/core/output_receiver.h"
#include "host/core/requests.h"
#include "tether/process_types.h"
#include "tether/protocol/tether.pb.h"

namespace tether::core {

// What an envelope changed, beyond the parts' own state.
struct Effects {
  bool exit_arrived = false;     // the exit record arrived (first time)
  bool terminate_settled = false;  // the terminate request was acknowledged
};

class ProcessCore {
 public:
  ProcessCore(OutputConfig output_config, bool stdin_pipe, bool keep_copies)
      : output(output_config), input(stdin_pipe, keep_copies) {}

  // The handshake's Welcome: pid, ticket and stdin window (kDataLoss when
  // the window cannot hold one write).
  absl::Status Attached(const wire::Welcome& welcome);

  // One envelope from the supervisor on the attachment of `generation`.
  // Envelopes of earlier generations (a text channel's replay) are ignored;
  // anything else unexpected is kDataLoss, a fatal Error its Status.
  absl::Status Handle(wire::Envelope& env, std::uint64_t generation, Effects* fx);

  OutputReceiver output;
  InputSender input;
  Requests requests;
  std::optional<ExitStatus> exit;
  wire::Ticket ticket;  // the newest reference ticket (Welcome, Pong)
  std::int32_t pid = -1;
};

// The exit record as the API reports it.
ExitStatus ToExitStatus(const wire::Exit& e);
// Why a launch failed (Welcome phase FAILED), as a Status.
absl::Status LaunchFailure(const wire::Exit& e);

}  // namespace tether::core
