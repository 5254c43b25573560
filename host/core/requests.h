// Requests: the host's pending requests to the supervisor, without I/O.
//
// A handle sends at most one Terminate (concurrent callers share it, and its
// outcome is kept) and any number of StatusRequests (one per waiting
// caller). Replies match by request id; a request sent again after a
// reconnect answers under its first id (an alias). Signal and Resize have
// no reply of their own on success: each is followed by a Ping on the same
// attachment, whose Pong says the supervisor acted on it (it handles frames
// in order and answers in request order; a refusal is an Error carrying
// the request's id, before the Pong).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "tether/protocol/tether.pb.h"

namespace tether::core {

class Requests {
 public:
  // Terminate.
  bool terminate_sent() const { return terminate_id_.has_value(); }
  bool terminate_pending() const { return terminate_id_ && !terminate_result_; }
  unsigned terminate_grace_ms() const { return terminate_grace_ms_; }
  const std::optional<absl::Status>& terminate_result() const { return terminate_result_; }
  void TerminateSent(std::uint64_t id, unsigned grace_ms) {
    terminate_id_ = id;
    terminate_grace_ms_ = grace_ms;
  }
  void TerminateResent(std::uint64_t id) { terminate_id_ = id; }
  // The first verdict stands (later ones are ignored).
  void SetTerminateResult(absl::Status st) {
    if (!terminate_result_) terminate_result_ = std::move(st);
  }

  // Status.
  void StatusSent(std::uint64_t id) { status_[id]; }
  // The reply to request `id` once it arrived.
  std::optional<wire::ProcessState> StatusReply(std::uint64_t id) const;
  void Forget(std::uint64_t id) { status_.erase(id); }
  // Requests without a reply yet, by first id (to send again).
  std::vector<std::uint64_t> StatusPending() const;
  void StatusResent(std::uint64_t new_id, std::uint64_t first_id) { alias_[new_id] = first_id; }

  // Signal and Resize: `request_id` was sent, then the Ping `ping_id`.
  void ActedSent(std::uint64_t request_id, std::uint64_t ping_id) {
    acted_[request_id];
    acted_ping_[ping_id] = request_id;
  }
  // nullopt while unanswered; OK once the supervisor acted; else its refusal.
  std::optional<absl::Status> Acted(std::uint64_t request_id) const;
  void ForgetActed(std::uint64_t request_id);
  // A Pong (request_id: its Ping's id).
  void OnPong(std::uint64_t request_id);
  // A non-fatal Error refusing request `request_id`.
  void OnError(std::uint64_t request_id, absl::Status st);

  // A Status body from the supervisor answers a status request or
  // acknowledges the terminate request. Returns true when it settled the
  // terminate request.
  bool OnStatus(std::uint64_t request_id, const wire::ProcessState& state);

 private:
  std::optional<std::uint64_t> terminate_id_;
  std::optional<absl::Status> terminate_result_;
  unsigned terminate_grace_ms_ = 0;
  std::map<std::uint64_t, wire::ProcessState> status_;  // first id -> reply (phase UNSPECIFIED: waiting)
  std::map<std::uint64_t, std::uint64_t> alias_;        // resent id -> first id
  std::map<std::uint64_t, std::optional<absl::Status>> acted_;  // signal/resize id -> outcome
  std::map<std::uint64_t, std::uint64_t> acted_ping_;            // its ping's id -> signal/resize id
};

}  // namespace tether::core
