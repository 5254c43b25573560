// Reference tickets (wire::Ticket): proof that a Hello comes from someone
// who was welcomed before, issued with every Welcome and Pong and checked
// on every attachment after the first.
//
// Owns the daemon's ticket key (in memory only, so that a reference cannot
// outlive the daemon that issued it). Never reads a clock or the random
// source: the key and the wall-clock time are passed in.
//
//   TicketAuthority tickets(key, launch.launch_id());
//   wire::Ticket t = tickets.Issue(::time(nullptr));
//   absl::Status ok = tickets.Check(t, ::time(nullptr));
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "tether/protocol/tether.pb.h"

namespace tether::supervisor {

inline constexpr std::int64_t kTicketLifetimeSeconds = 24 * 3600;  // a reference lives at most this long
inline constexpr std::size_t kTicketKeyBytes = 32;

class TicketAuthority {
 public:
  // `key`: kTicketKeyBytes random bytes; `launch_id` binds the tickets to this launch.
  TicketAuthority(std::string key, std::string launch_id);

  // A ticket valid until `now_s` (seconds since the epoch) + kTicketLifetimeSeconds.
  wire::Ticket Issue(std::int64_t now_s) const;
  // kDeadlineExceeded (the host reports EXPIRED) for a missing, forged,
  // altered or expired ticket.
  absl::Status Check(const wire::Ticket& t, std::int64_t now_s) const;

 private:
  std::string Mac(std::uint64_t expires_at) const;

  std::string key_;
  std::string launch_id_;
};

}  // namespace tether::supervisor
