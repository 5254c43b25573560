// Starting by script (host/tunnel/start_script.h), the parts of
// Process::Start and Process::Reopen that only that path has: the
// supervisors a start script may ask for, the launch-and-install loop, the
// cancellation marker of a launch whose directory the host never learned,
// and the checks of the paths a Welcome or a reference names.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "host/process/state.h"
#include "host/process/reference.h"
#include "host/tunnel/start_script.h"
#include "host/tunnel/tunnel.h"

namespace tether::internal {

// Every architecture whose supervisor this host can upload (or only
// `forced_arch`), named and hashed (LoadSupervisor: once per process).
boost::asio::awaitable<std::vector<tunnel::UploadableSupervisor>> OurSupervisors(std::string forced_arch);

// Runs state.target's start script until it launches, meeting each need
// line it answers (an upload into the directory it found), at most twice:
// one native call with the supervisor in place, three cold. *in_flight is
// false while no launch may be running (between a need line and the next
// launch); a failed upload's status says NotDispatched().
boost::asio::awaitable<absl::StatusOr<wire::Welcome>> LaunchByScript(Process::State& state, Transport& transport,
                                                                     bool upload, std::string launch_frame,
                                                                     wire::Hello hello, bool* in_flight);
bool NotDispatched(const absl::Status& status);
// `status`, marked as a failure between launches (NotDispatched() is true).
absl::Status NotDispatchedStatus(absl::Status status);

// Writes <root>/run/<launch_id>.cancel wherever a start script may have put
// the directory, within a bounded time of its own.
boost::asio::awaitable<absl::Status> WriteCancelMarker(Transport& transport, std::string launch_id);

// Puts the empty marker file `path` (PutFile) within the same bounded time:
// a sandbox whose file call never answers cannot hold the caller.
boost::asio::awaitable<absl::Status> PutCancelMarker(Transport& transport, std::string path);

// The directory and binary a Welcome names, checked (the directory must
// end in /<launch_id>), into *target.
absl::Status TakeWelcomePaths(const wire::Welcome& w, const std::string& launch_id, tunnel::Target* target);

// A reference's paths, checked for shape (the sandbox checks where they
// lead: ReattachScript).
absl::Status CheckReferenceShape(const ProcessReference& ref);

}  // namespace tether::internal
