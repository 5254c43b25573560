#include "host/core/requests.h"

namespace tether::core {

std::optional<wire::ProcessState> Requests::StatusReply(std::uint64_t id) const {
  auto it = status_.find(id);
  if (it == status_.end() || it->second.phase() == wire::ProcessState::PHASE_UNSPECIFIED) return std::nullopt;
  return it->second;
}

std::vector<std::uint64_t> Requests::StatusPending() const {
  std::vector<std::uint64_t> out;
  for (const auto& [id, reply] : status_) {
    if (reply.phase() == wire::ProcessState::PHASE_UNSPECIFIED) out.push_back(id);
  }
  return out;
}

std::optional<absl::Status> Requests::Acted(std::uint64_t request_id) const {
  auto it = acted_.find(request_id);
  if (it == acted_.end()) return std::nullopt;
  return it->second;
}

void Requests::ForgetActed(std::uint64_t request_id) {
  acted_.erase(request_id);
  std::erase_if(acted_ping_, [request_id](const auto& p) { return p.second == request_id; });
}

void Requests::OnPong(std::uint64_t request_id) {
  auto p = acted_ping_.find(request_id);
  if (p == acted_ping_.end()) return;  // a keepalive's
  if (auto it = acted_.find(p->second); it != acted_.end() && !it->second) it->second = absl::OkStatus();
  acted_ping_.erase(p);
}

void Requests::OnError(std::uint64_t request_id, absl::Status st) {
  if (auto it = acted_.find(request_id); it != acted_.end() && !it->second) it->second = std::move(st);
}

bool Requests::OnStatus(std::uint64_t request_id, const wire::ProcessState& state) {
  if (auto a = alias_.find(request_id); a != alias_.end()) {
    if (auto it = status_.find(a->second); it != status_.end()) it->second = state;
  }
  if (auto it = status_.find(request_id); it != status_.end()) it->second = state;
  if (terminate_id_ && request_id == *terminate_id_ && !terminate_result_) {
    terminate_result_ = absl::OkStatus();
    return true;
  }
  return false;
}

}  // namespace tether::core
