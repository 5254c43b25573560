#include "supervisor/supervised.h"

#include <algorithm>
#include <utility>

namespace tether::supervisor {
namespace {

std::size_t RingBytes(const wire::Launch& l) {
  const std::size_t cap = l.ring_bytes() ? l.ring_bytes() : kDefaultRingBytes;
  return std::clamp(cap, kMinRingBytes, kMaxRingBytes);
}

}  // namespace

wire::Stream StreamOf(int i, bool pty) {
  if (pty) return i == 0 ? wire::STREAM_PTY : wire::STREAM_STDERR;
  return i == 0 ? wire::STREAM_STDOUT : wire::STREAM_STDERR;
}

Supervised::Supervised(wire::Launch launch_request, std::string ticket_key)
    : launch(std::move(launch_request)),
      rings{OutputRing(RingBytes(launch)), OutputRing(RingBytes(launch))},
      tickets(std::move(ticket_key), launch.launch_id()) {}

wire::ProcessState Supervised::State() const {
  wire::ProcessState s;
  s.set_phase(phase);
  s.set_pid(pid);
  s.set_pgid(pgid);
  s.set_stdin_acked(stdin_queue.written());
  s.set_stdin_closed(stdin_queue.closed());
  s.set_stdin_received(stdin_queue.received());
  s.set_stdin_eof_received(stdin_queue.eof_requested());
  if (exit) *s.mutable_exit() = *exit;
  return s;
}

}  // namespace tether::supervisor
