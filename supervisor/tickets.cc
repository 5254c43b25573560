#include "supervisor/tickets.h"

#include <array>
#include <utility>

#include "protocol/sha256.h"

namespace tether::supervisor {

TicketAuthority::TicketAuthority(std::string key, std::string launch_id)
    : key_(std::move(key)), launch_id_(std::move(launch_id)) {}

std::string TicketAuthority::Mac(std::uint64_t expires_at) const {
  std::string msg = "tether-ticket-v1";
  msg += launch_id_;
  for (int i = 7; i >= 0; --i) msg.push_back(static_cast<char>(expires_at >> (8 * i)));
  const std::array<std::uint8_t, 32> mac = protocol::HmacSha256(key_, msg);
  return std::string(reinterpret_cast<const char*>(mac.data()), mac.size());
}

wire::Ticket TicketAuthority::Issue(std::int64_t now_s) const {
  wire::Ticket t;
  const auto expires = static_cast<std::uint64_t>(now_s + kTicketLifetimeSeconds);
  t.set_expires_at(expires);
  t.set_mac(Mac(expires));
  return t;
}

absl::Status TicketAuthority::Check(const wire::Ticket& t, std::int64_t now_s) const {
  if (t.expires_at() == 0 || t.mac().empty()) {
    return absl::DeadlineExceededError("hello: no reference ticket (EXPIRED): reopen with a reference from this process");
  }
  if (!protocol::ConstantTimeEqual(t.mac(), Mac(t.expires_at()))) {
    return absl::DeadlineExceededError(
        "hello: the reference's ticket was not issued by this supervisor or its expiry was altered (EXPIRED)");
  }
  if (static_cast<std::int64_t>(t.expires_at()) <= now_s) {
    return absl::DeadlineExceededError("hello: the reference has expired (EXPIRED)");
  }
  return absl::OkStatus();
}

}  // namespace tether::supervisor
