#include "host/process/launch_by_script.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <functional>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "host/support/cancelled.h"
#include "tether/errors.h"
#include "tether/shell_setup.h"
#include "tether/supervisor_binary.h"

namespace tether::internal {

namespace asio = boost::asio;

namespace {
// On a start-by-script status: the failure came between launches (an
// upload), so no launch is in flight and no cancellation marker is needed.
constexpr char kNotDispatched[] = "tether.dev/not-dispatched";
constexpr auto kMarkerTimeout = std::chrono::seconds(5);  // a cancellation marker's own native call
}  // namespace

bool NotDispatched(const absl::Status& status) { return status.GetPayload(kNotDispatched).has_value(); }

absl::Status NotDispatchedStatus(absl::Status status) {
  status.SetPayload(kNotDispatched, absl::Cord());
  return status;
}

namespace {
// (internal::Cancelled(): a cancellation between two native calls is only
// recorded, so each launch and upload asks first.)
absl::Status CancelledBetweenLaunches() {
  return NotDispatchedStatus(absl::CancelledError("the start was cancelled before the supervisor was installed"));
}
}  // namespace

// The supervisors this host can install, for the start script: every
// architecture whose binary is at hand (or only the one the transport
// forces). Loaded and hashed once per process (LoadSupervisor).
asio::awaitable<std::vector<tunnel::UploadableSupervisor>> OurSupervisors(std::string forced_arch) {
  std::vector<std::string> arches;
  if (forced_arch.empty()) {
    arches.push_back("x86_64");
    arches.push_back("aarch64");
  } else {
    arches.push_back(forced_arch == "arm64" ? "aarch64" : forced_arch == "amd64" ? "x86_64" : forced_arch);
  }
  std::vector<tunnel::UploadableSupervisor> out;
  for (const std::string& arch : arches) {
    absl::StatusOr<std::shared_ptr<const SupervisorImage>> image = co_await LoadSupervisor(arch);
    if (!image.ok()) continue;  // not at hand: the script says "arch" if the sandbox needs it
    tunnel::UploadableSupervisor u;
    u.arch = arch;
    u.name = SupervisorInstallName(arch, (*image)->sha256);
    u.sha256 = (*image)->sha256;
    u.size = (*image)->bytes.size();
    u.bytes = std::shared_ptr<const std::string>(*image, &(*image)->bytes);  // (cached: no copy)
    out.push_back(std::move(u));
  }
  co_return out;
}

// Runs the start script until it launches: each "need" it answers is met
// (an upload into the directory it found) and the script runs again, at
// most twice. With the supervisor in place this is one native call; cold,
// one too over a binary tunnel whose sandbox has an exact dd (the binary
// goes inline, start_script.h), else three (the script, the upload, the
// script).
// *in_flight tells the caller, when it gives up, whether a launch may be
// running: false between a need line and the next launch.
asio::awaitable<absl::StatusOr<wire::Welcome>> LaunchByScript(Process::State& state, Transport& transport,
                                                              bool upload, std::string launch_frame,
                                                              wire::Hello hello, bool* in_flight) {
  using Kind = tunnel::StartNeed::Kind;
  for (int attempt = 0;; ++attempt) {
    if (attempt > 0 && co_await Cancelled()) co_return CancelledBetweenLaunches();
    *in_flight = true;
    absl::StatusOr<wire::Welcome> welcome = co_await state.tunnel->Launch(state.target, launch_frame, hello,
                                                                          state.session);
    std::optional<std::string> line = tunnel::StartNeedLineOf(welcome.status());
    if (!line) co_return welcome;
    *in_flight = false;  // the script answered instead of launching
    if (co_await Cancelled()) co_return CancelledBetweenLaunches();
    absl::StatusOr<tunnel::StartNeed> need = tunnel::ParseStartNeed(*line);
    if (!need.ok()) co_return need.status();
    switch (need->kind) {
      case Kind::kUpload:
      case Kind::kCorrupt:
        break;
      case Kind::kArch:
        co_return absl::UnimplementedError(absl::StrCat(
            "sandbox architecture '", need->detail,
            "' has no tether supervisor on this host and none compatible is preinstalled in the sandbox"));
      case Kind::kNoExec:
        co_return absl::FailedPreconditionError(absl::StrCat(
            "no private directory in the sandbox can hold an executable supervisor (", need->detail,
            "); mount one of them with exec, or preinstall the supervisor in the image "
            "(/usr/libexec/tether/tether-supervisor)"));
      case Kind::kNoState:
        co_return absl::FailedPreconditionError(
            "no private directory can be made in the sandbox: $TMPDIR, /tmp, /var/tmp, /dev/shm and $HOME/.cache "
            "are all read-only, not writable or not ours");
      case Kind::kNoPreinstalled:
        co_return absl::FailedPreconditionError(absl::StrCat(
            "supervisor uploads are off and no compatible supervisor is preinstalled in the sandbox",
            need->detail.empty() ? std::string(" (none at /usr/local/libexec/tether/, /usr/libexec/tether/ or on PATH)")
                                 : absl::StrCat(" (", need->detail, ")")));
      case Kind::kRefused:
      case Kind::kGone:
        co_return absl::FailedPreconditionError(absl::StrCat("the start script refused: ", need->detail));
    }
    if (!upload) {
      co_return absl::FailedPreconditionError(absl::StrCat(
          "supervisor uploads are off and the sandbox's supervisor ",
          need->kind == Kind::kCorrupt ? absl::StrCat(need->path, " does not match its name") : "is missing"));
    }
    if (attempt >= 2) {
      co_return absl::FailedPreconditionError(absl::StrCat(
          "the sandbox still needs a supervisor after it was installed twice: ", need->detail));
    }
    std::string arch = need->arch, path;
    if (need->kind == Kind::kCorrupt) {
      // Ours by name (the script ran it): its architecture is in the name.
      path = need->path;
      if (path.find("-x86_64-") != std::string::npos) arch = "x86_64";
      if (path.find("-aarch64-") != std::string::npos) arch = "aarch64";
    }
    absl::StatusOr<std::shared_ptr<const SupervisorImage>> image = co_await LoadSupervisor(arch);
    if (!image.ok()) co_return image.status();
    const std::string name = absl::StrCat("/", SupervisorInstallName(arch, (*image)->sha256));
    if (path.empty()) path = need->path + name;
    if (path.size() <= name.size() || path.compare(path.size() - name.size(), std::string::npos, name) != 0) {
      co_return absl::DataLossError(absl::StrCat("the sandbox named a corrupt supervisor that is not ours: ", path));
    }
    if (co_await Cancelled()) co_return CancelledBetweenLaunches();
    absl::Status put = co_await transport.PutNewFile(path, (*image)->bytes, 0700);
    if (!put.ok()) {
      put.SetPayload(kNotDispatched, absl::Cord());
      co_return put;
    }
  }
}

// Closes `channel` when `timer` expires (it ignored cancellation).
static asio::awaitable<void> CloseWhenDue(asio::steady_timer& timer, Channel& channel) {
  auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
  if (!ec) channel.Close();
}

// Each way of writing a marker is idempotent (an empty file; the script
// makes the same one), so a channel cut (UNAVAILABLE) or a lost answer
// (OUTCOME_UNKNOWN: the call may or may not have written it) is tried again
// while kMarkerTimeout lasts: on a cut-prone channel one lost call must not
// leave a delayed launch free to start.
namespace {
constexpr auto kMarkerFirstBackoff = std::chrono::milliseconds(50);

// One PutFile of the marker, bounded by `deadline`.
asio::awaitable<absl::Status> PutMarkerOnce(Transport& transport, const std::string& path,
                                            std::chrono::steady_clock::time_point deadline) {
  using namespace asio::experimental::awaitable_operators;
  asio::steady_timer timer(transport.executor(), deadline);
  std::string p = path;
  auto put = co_await (transport.PutFile(std::move(p), std::string_view(), 0600) ||
                       timer.async_wait(asio::as_tuple(asio::use_awaitable)));
  if (put.index() == 1) co_return absl::UnavailableError("writing the cancellation marker did not finish in time");
  co_return std::get<0>(std::move(put));
}

// One run of the marker script, bounded by `deadline`.
asio::awaitable<absl::Status> RunMarkerScriptOnce(Transport& transport, const std::string& launch_id,
                                                  std::chrono::steady_clock::time_point deadline) {
  using namespace asio::experimental::awaitable_operators;
  asio::steady_timer timer(transport.executor(), deadline);
  std::vector<std::string> argv;
  argv.push_back("/bin/sh");
  argv.push_back("-c");
  argv.push_back(tunnel::CancelScript(launch_id));
  auto exec = co_await (transport.Exec(std::move(argv)) || timer.async_wait(asio::as_tuple(asio::use_awaitable)));
  if (exec.index() == 1) co_return absl::UnavailableError("running the marker script did not start in time");
  absl::StatusOr<std::unique_ptr<Channel>> channel = std::get<0>(std::move(exec));
  if (!channel.ok()) co_return channel.status();
  const std::function<void(std::size_t, std::size_t)> no_progress;
  auto ran = co_await (RunScriptOn(**channel, std::string_view(), no_progress) || CloseWhenDue(timer, **channel));
  if (ran.index() == 1) co_return absl::UnavailableError("the marker script did not finish in time");
  absl::StatusOr<ScriptResult> out = std::get<0>(std::move(ran));
  if (!out.ok()) co_return out.status();
  if (out->out.find("tether-cancel-ok") == std::string::npos) {
    co_return absl::UnavailableError(absl::StrCat("the sandbox said: ", absl::CHexEscape(out->out.substr(0, 256))));
  }
  co_return absl::OkStatus();
}

// Runs `once` until it ends in anything but UNAVAILABLE or OUTCOME_UNKNOWN,
// or kMarkerTimeout has no room for another try (50 ms backoff, doubling).
asio::awaitable<absl::Status> RetryWhileCut(
    Transport& transport,
    std::function<asio::awaitable<absl::Status>(std::chrono::steady_clock::time_point)> once) {
  const auto deadline = std::chrono::steady_clock::now() + kMarkerTimeout;
  auto backoff = kMarkerFirstBackoff;
  while (true) {
    absl::Status st = co_await once(deadline);
    const bool again = absl::IsUnavailable(st) || ErrorCodeOf(st) == ErrorCode::kOutcomeUnknown;
    if (!again || std::chrono::steady_clock::now() + backoff >= deadline) co_return st;
    asio::steady_timer pause(transport.executor(), backoff);
    co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
    backoff *= 2;
  }
}
}  // namespace

asio::awaitable<absl::Status> PutCancelMarker(Transport& transport, std::string path) {
  co_return co_await RetryWhileCut(transport, [&transport, &path](std::chrono::steady_clock::time_point deadline) {
    return PutMarkerOnce(transport, path, deadline);
  });
}

// Writes the cancellation marker of `launch_id` wherever a start script
// may have put its directory: in the one root the transport names, or by a
// script (start_script.h CancelScript) within kMarkerTimeout.
asio::awaitable<absl::Status> WriteCancelMarker(Transport& transport, std::string launch_id) {
  const std::string root = transport.script_overrides().private_root;
  if (!root.empty()) co_return co_await PutCancelMarker(transport, absl::StrCat(root, "/run/", launch_id, ".cancel"));
  co_return co_await RetryWhileCut(transport, [&transport, &launch_id](std::chrono::steady_clock::time_point deadline) {
    return RunMarkerScriptOnce(transport, launch_id, deadline);
  });
}

// What a start by script learns from the Welcome: where the process lives.
absl::Status TakeWelcomePaths(const wire::Welcome& w, const std::string& launch_id, tunnel::Target* target) {
  const std::string& dir = w.state_dir();
  const std::string& sup = w.supervisor_path();
  if (dir.empty() || dir[0] != '/' || sup.empty() || sup[0] != '/' ||
      dir.size() <= launch_id.size() + 1 || dir.compare(dir.size() - launch_id.size() - 1, std::string::npos,
                                                        absl::StrCat("/", launch_id)) != 0) {
    return absl::DataLossError(absl::StrCat("the supervisor's welcome names no usable directory ('",
                                            absl::CHexEscape(dir), "') or binary ('", absl::CHexEscape(sup), "')"));
  }
  target->state_dir = dir;
  target->supervisor = sup;
  target->start_script.clear();
  target->upload_token.clear();
  target->uploadable.clear();
  return absl::OkStatus();
}

// The reference's paths, checked for shape here (the sandbox checks where
// they lead: start_script.h ReattachScript).
absl::Status CheckReferenceShape(const ProcessReference& ref) {
  const auto clean = [](const std::string& p) { return tunnel::CleanAbsolute(p); };
  const std::size_t slash = ref.state_dir.rfind('/');
  const std::string id = slash == std::string::npos ? "" : ref.state_dir.substr(slash + 1);
  bool id_ok = !id.empty() && id.size() <= 64;
  for (char c : id) id_ok = id_ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                                      c == '-' || c == '_');
  if (!clean(ref.state_dir) || !id_ok || slash < 4 || ref.state_dir.compare(slash - 4, 4, "/run") != 0) {
    return absl::InvalidArgumentError(absl::StrCat("process reference: state_dir '", absl::CEscape(ref.state_dir),
                                                   "' is not a process directory (the reference was altered)"));
  }
  const std::string base = ref.supervisor.substr(ref.supervisor.rfind('/') + 1);
  if (!clean(ref.supervisor) || base.rfind("tether-supervisor", 0) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("process reference: supervisor '", absl::CEscape(ref.supervisor),
                                                   "' is not a tether supervisor (the reference was altered)"));
  }
  return absl::OkStatus();
}

}  // namespace tether::internal
