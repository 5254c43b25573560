// Connecting the CLI's own stdio to a process until its exit, and the event
// loop every command runs on.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <array>
#include <cstdint>
#include <functional>
#include <optional>

#include "absl/status/status.h"
#include "host/cli/commands.h"
#include "host/cli/signals.h"
#include "tether/process.h"
#include "tether/transport.h"

namespace tether::cli {

inline constexpr unsigned kTerminateGraceMs = 2000;  // when our own output has gone away

// Who the CLI is to the process it shows.
enum class Role {
  kOwner,     // `run`: the job lives for this terminal; a dead stdout ends it
  kObserver,  // `attach`, `wait`: a dead stdout only ends the observation
};

// Where `attach` or `wait` asked each stream to resume (--stdout-from,
// --stderr-from; index 0 is stdout or the terminal, 1 stderr).
using ResumeFrom = std::array<std::optional<std::uint64_t>, 2>;

// Connects the CLI's stdio to `p` until the exit; returns the CLI status.
// Says on stderr how many bytes were dropped while nobody was attached, and
// which bytes asked for by `from` were no longer kept.
boost::asio::awaitable<int> Interact(Process& p, bool forward_stdin, Role role, CliSignals& signals,
                                     ResumeFrom from);

// Runs `body` on a fresh io_context with the chosen provider's transport and
// returns its status. The loop ends when every handle has finished in the
// background (exit acknowledgements delivered).
int RunLoop(const ProviderArgs& provider,
            std::function<boost::asio::awaitable<int>(Transport&, CliSignals&)> body);

// "tether: message" on stderr.
void PrintError(const absl::Status& st);
// The CLI status for a failed call: 127 not found, 126 cannot execute,
// 2 invalid argument, else 125.
int ExitForError(const absl::Status& st);

}  // namespace tether::cli
