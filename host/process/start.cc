// Process::Start and Process::Reopen: validating the request, installing
// the supervisor, and attaching through the tunnel the transport's
// capabilities choose (host/tunnel/).
#include <algorithm>
#include <csignal>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tether/errors.h"
#include "host/support/cancelled.h"
#include "host/process/state.h"
#include "host/support/random.h"
#include "host/support/trace.h"
#include "host/process/reference.h"
#include "tether/shell_setup.h"
#include "tether/supervisor_binary.h"
#include "host/process/launch_by_script.h"
#include "host/process/start_flow.h"
#include "host/tunnel/start_script.h"
#include "protocol/limits.h"

namespace tether {

namespace asio = boost::asio;

namespace {

constexpr std::size_t kSecretBytes = 32;
using protocol::kDefaultLeaseMs;
constexpr std::size_t kLaunchIdBytes = 16;
// Resending a launch whose answer was lost (PROTOCOL.md 4.1).
constexpr int kMaxLaunchResends = 4;
constexpr std::chrono::milliseconds kFirstResendDelay{100};  // doubled per resend
constexpr std::chrono::milliseconds kMaxResendWindow{60 * 1000};
constexpr unsigned kDefaultLingerMs = 10 * 60 * 1000;  // the supervisor's (supervisor/daemon.h)
constexpr std::size_t kMinOutputWindowBytes = 16 * 1024;
constexpr std::size_t kMaxOutputWindowBytes = 64u << 20;
using protocol::kMaxRingBytes;
using protocol::kMinRingBytes;
// The public API's limits that the wire fixes.
static_assert(kMaxTerminalCells == protocol::kMaxPtyCells);
static_assert(kMaxChunkBytes == protocol::kMaxOutputChunkBytes);

using internal::RandomBytes;

absl::Status ValidateOptions(const StartOptions& o) {
  if (o.argv.empty()) return absl::InvalidArgumentError("argv is empty: nothing to run");
  if (o.argv[0].empty()) return absl::InvalidArgumentError("argv[0] is empty");
  for (std::size_t i = 0; i < o.argv.size(); ++i) {
    if (o.argv[i].find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("argv[", i, "] contains a NUL byte"));
    }
  }
  if (o.cwd.find('\0') != std::string::npos) return absl::InvalidArgumentError("cwd contains a NUL byte");
  if (!o.cwd.empty() && o.cwd[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "cwd '", absl::CEscape(o.cwd), "' is relative; give an absolute path inside the sandbox"));
  }
  for (const auto& [k, v] : o.env) {
    if (k.empty()) return absl::InvalidArgumentError("environment variable with an empty name");
    if (k.find('=') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("environment name '", k, "' contains '='"));
    }
    if (k.find('\0') != std::string::npos || v.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("environment variable '", absl::CEscape(k), "' contains a NUL byte"));
    }
  }
  if (o.pty) {
    if (absl::Status st = CheckTerminalSize(o.pty->cols, o.pty->rows); !st.ok()) return st;
  }
  if (o.setup_timeout_ms == 0) return absl::InvalidArgumentError("setup_timeout_ms must be positive");
  if (o.reconnect_timeout_ms == 0) return absl::InvalidArgumentError("reconnect_timeout_ms must be positive");
  if (o.output_window_bytes < kMinOutputWindowBytes || o.output_window_bytes > kMaxOutputWindowBytes) {
    return absl::InvalidArgumentError(absl::StrCat("output_window_bytes must be ", kMinOutputWindowBytes,
                                                   "..", kMaxOutputWindowBytes));
  }
  if (o.output_mode == OutputMode::kStream && o.max_output_bytes != 0) {
    return absl::InvalidArgumentError("max_output_bytes limits finite output; it cannot be combined with stream mode");
  }
  if (o.max_output_bytes > kMaxFiniteOutputBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_output_bytes must be 1..", kMaxFiniteOutputBytes, " (or 0 for the maximum)"));
  }
  if (o.ring_bytes != 0 && (o.ring_bytes < kMinRingBytes || o.ring_bytes > kMaxRingBytes)) {
    return absl::InvalidArgumentError(absl::StrCat("ring_bytes must be ", kMinRingBytes, "..", kMaxRingBytes,
                                                   " (or 0 for 1 MiB)"));
  }
  return absl::OkStatus();
}

// kNotFound and kPermissionDenied from Start mean the child's executable or
// cwd (the CLI's 127 and 126); a setup step that fails that way (a missing
// supervisor binary, a refused directory) is tether's failure instead.
absl::Status SetupError(absl::Status st) {
  if (absl::IsNotFound(st) || absl::IsPermissionDenied(st)) {
    return absl::FailedPreconditionError(st.message());
  }
  return st;
}

// Runs `op` until `deadline`; past it the operation is cancelled (every
// channel stops at cancellation) and the result is kUnavailable.
template <typename T>
asio::awaitable<absl::StatusOr<T>> WithDeadline(asio::awaitable<absl::StatusOr<T>> op,
                                                std::chrono::steady_clock::time_point deadline,
                                                std::string_view what) {
  using namespace asio::experimental::awaitable_operators;
  asio::steady_timer timer(co_await asio::this_coro::executor, deadline);
  auto raced = co_await (std::move(op) || timer.async_wait(asio::as_tuple(asio::use_awaitable)));
  if (raced.index() == 0) co_return std::get<0>(std::move(raced));
  co_return absl::UnavailableError(absl::StrCat(std::string(what), " did not finish within the time limit"));
}

// Checks that a reference names this sandbox's own private paths: the state
// directory directly under the private state root with a launch id for its
// name, and a supervisor installed in the private bin directory. A holder
// who edits the JSON cannot make the host run another program or touch
// another directory.
absl::Status CheckReferencePaths(const ProcessReference& ref, const SandboxInfo& info) {
  const auto split = [](const std::string& path) {
    const std::size_t slash = path.rfind('/');
    if (slash == std::string::npos) return std::make_pair(std::string(), path);
    return std::make_pair(path.substr(0, slash), path.substr(slash + 1));
  };
  const auto name_ok = [](const std::string& name, std::size_t max) {
    if (name.empty() || name.size() > max || name == "." || name == "..") return false;
    for (char c : name) {
      if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
            c == '_' || c == '.')) {
        return false;
      }
    }
    return true;
  };
  const auto [state_parent, launch_id] = split(ref.state_dir);
  if (state_parent != info.state_root || !name_ok(launch_id, 64) || launch_id.find('.') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "process reference: state_dir '", absl::CEscape(ref.state_dir), "' is not a process directory under ",
        info.state_root, " (the reference was altered or is for another sandbox)"));
  }
  const auto [bin_parent, bin_name] = split(ref.supervisor);
  if (bin_parent != info.bin_dir || !name_ok(bin_name, 200) ||
      bin_name.rfind("tether-supervisor-", 0) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "process reference: supervisor '", absl::CEscape(ref.supervisor), "' is not a supervisor installed in ",
        info.bin_dir, " (the reference was altered or is for another sandbox)"));
  }
  return absl::OkStatus();
}

// The shared_ptr that owns `transport` (the handle keeps it alive), or why
// there is none.
absl::StatusOr<std::shared_ptr<Transport>> Owner(Transport& transport) {
  std::shared_ptr<Transport> owner = transport.weak_from_this().lock();
  if (!owner) {
    return absl::InvalidArgumentError(
        "the transport is not owned by a std::shared_ptr (make it with its factory or std::make_shared): a "
        "process handle keeps its transport alive");
  }
  return owner;
}

using internal::Cancelled;

wire::Envelope LaunchEnvelope(const StartOptions& options, const std::string& launch_id, const std::string& secret,
                              const std::string& state_dir) {
  wire::Envelope launch_env;
  wire::Launch* l = launch_env.mutable_launch();
  l->set_launch_id(launch_id);
  l->set_secret(secret);
  for (const std::string& a : options.argv) l->add_argv(a);
  l->set_cwd(options.cwd);
  for (const auto& [k, v] : options.env) {
    wire::EnvVar* e = l->add_env();
    e->set_name(k);
    e->set_value(v);
  }
  l->set_inherit_env(options.inherit_env);
  l->set_stdin_mode(options.stdin_pipe ? wire::STDIN_PIPE : wire::STDIN_CLOSED);
  if (options.pty) {
    l->mutable_pty()->set_cols(options.pty->cols);
    l->mutable_pty()->set_rows(options.pty->rows);
  }
  l->set_state_dir(state_dir);
  l->set_lease_ms(options.lease_ms);
  l->set_linger_ms(options.linger_ms);
  l->set_ring_bytes(options.ring_bytes);
  l->set_end_with_host(options.end_with_host);
  return launch_env;
}

// How long after the first dispatch the same Launch may be sent again: the
// first launch's record must be certain to live (an unattached daemon with
// end_with_host ends after a lease; an exit record lasts a linger) and the
// supervisor takes a resend Hello without a ticket for 120 s.
std::chrono::milliseconds ResendWindow(const StartOptions& o) {
  const std::chrono::milliseconds lease(o.lease_ms ? o.lease_ms : kDefaultLeaseMs);
  const std::chrono::milliseconds linger(o.linger_ms ? o.linger_ms : kDefaultLingerMs);
  return std::min({kMaxResendWindow, lease / 2, linger / 2});
}

core::OutputConfig OutputConfigOf(const StartOptions& options) {
  core::OutputConfig c;
  c.pty = options.pty.has_value();
  c.text = options.output_format == OutputFormat::kText;
  c.backpressure = options.backpressure;
  c.window = options.output_window_bytes;
  c.unread_limit = options.output_window_bytes;
  if (options.ring_bytes != 0) c.ring = options.ring_bytes;
  if (options.output_mode == OutputMode::kFinite) {
    c.finite_limit = options.max_output_bytes ? options.max_output_bytes : kMaxFiniteOutputBytes;
  }
  return c;
}

}  // namespace

absl::StatusOr<int> SignalNumber(std::string_view s) {
  static constexpr std::pair<std::string_view, int> kNames[] = {
      {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"KILL", SIGKILL}, {"USR1", SIGUSR1},
      {"USR2", SIGUSR2}, {"TERM", SIGTERM}, {"CONT", SIGCONT}, {"STOP", SIGSTOP}, {"TSTP", SIGTSTP},
      {"ALRM", SIGALRM}, {"PIPE", SIGPIPE}, {"WINCH", SIGWINCH}, {"ABRT", SIGABRT}, {"TTIN", SIGTTIN},
      {"TTOU", SIGTTOU}};
  int n = 0;
  if (absl::SimpleAtoi(std::string(s), &n) && n > 0 && n < 65) return n;
  const std::string_view name = s.substr(0, 3) == "SIG" ? s.substr(3) : s;
  for (const auto& [k, v] : kNames) {
    if (name == k) return v;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown signal '", absl::CEscape(std::string(s)), "'"));
}

absl::Status CheckTerminalSize(unsigned cols, unsigned rows) {
  if (cols == 0 || rows == 0 || cols > kMaxTerminalCells || rows > kMaxTerminalCells) {
    return absl::InvalidArgumentError(
        absl::StrCat("terminal size ", cols, "x", rows, " is outside 1..", kMaxTerminalCells));
  }
  return absl::OkStatus();
}

asio::awaitable<absl::StatusOr<std::unique_ptr<Process>>> Process::Start(Transport& transport,
                                                                           StartOptions options) {
  if (absl::Status st = ValidateOptions(options); !st.ok()) co_return st;
  // Setup runs as its own coroutine so that an abort (the caller's
  // cancellation, forwarded by co_spawn) can be answered without touching
  // the caller's cancellation settings.
  auto ex = co_await asio::this_coro::executor;
  co_return co_await asio::co_spawn(ex, StartSetup(transport, std::move(options)), asio::use_awaitable);
}

asio::awaitable<absl::StatusOr<std::unique_ptr<Process>>> Process::StartSetup(Transport& transport,
                                                                                StartOptions options) {
  co_await asio::this_coro::throw_if_cancelled(false);
  const auto aborted_before_dispatch = [] {
    return WaitAbortedError("start was aborted before the launch was dispatched; nothing was started");
  };
  absl::StatusOr<std::shared_ptr<Transport>> owner = Owner(transport);
  if (!owner.ok()) co_return owner.status();
  internal::Trace("start.begin", transport.name());
  // (a sandbox not found, a key or certificate refused: tether's failure,
  // not the child's 127 or 126)
  if (absl::Status st = co_await transport.Prepare(); !st.ok()) co_return SetupError(st);
  internal::Trace("start.prepared");
  absl::StatusOr<std::unique_ptr<tunnel::Tunnel>> tun = tunnel::MakeTunnel(transport);
  if (!tun.ok()) co_return tun.status();
  // Every native call of the setup (probe, upload, launch, handshake) is
  // inside the one setup timeout.
  const auto setup_deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options.setup_timeout_ms);
  const bool by_script = (*tun)->starts_by_script();
  const std::string launch_id = absl::BytesToHexString(RandomBytes(kLaunchIdBytes));
  const Transport::ScriptOverrides overrides = transport.script_overrides();
  const std::string named = options.supervisor_path.empty() ? overrides.supervisor_path : options.supervisor_path;
  const bool upload = options.upload_supervisor && overrides.upload_supervisor;
  tunnel::Target target;
  target.named = named;
  if (by_script) {
    // One native call finds the directory and the supervisor and launches.
    tunnel::StartScriptOptions so;
    if (upload) so.ours = co_await internal::OurSupervisors(overrides.arch);
    so.named = named;
    so.allow_upload = upload;
    so.text = (*tun)->choice().mode == TunnelMode::kText;
    so.arch = overrides.arch;
    so.emulator = overrides.emulator;
    so.private_root = overrides.private_root;
    if (upload && (*tun)->choice().mode == TunnelMode::kBinary && !so.ours.empty()) {
      // Cold: the binary goes on this same call's stdin (start_script.h).
      so.upload_token = absl::BytesToHexString(RandomBytes(16));
      target.upload_token = so.upload_token;
      target.uploadable = so.ours;
    }
    target.start_script = tunnel::StartScript(so);
  } else {
    if (!upload || !named.empty()) {
      co_return absl::InvalidArgumentError(absl::StrCat(
          "a preinstalled supervisor and uploads off are for exec channels with live stdio; the ",
          std::string(transport.name()), " provider's ",
          (*tun)->choice().mode == TunnelMode::kExchange ? "one-shot" : "direct", " tunnel installs its own"));
    }
    absl::StatusOr<SandboxInfo> info =
        co_await WithDeadline(transport.Probe(), setup_deadline, "probing the sandbox");
    if (co_await Cancelled()) co_return aborted_before_dispatch();
    if (!info.ok()) co_return SetupError(info.status());
    internal::Trace("start.probed");
    absl::StatusOr<std::string> supervisor =
        co_await WithDeadline(InstallSupervisor(transport, *info), setup_deadline, "installing the supervisor");
    if (co_await Cancelled()) co_return aborted_before_dispatch();
    if (!supervisor.ok()) co_return SetupError(supervisor.status());
    internal::Trace("start.installed");
    target.supervisor = *supervisor;
    target.state_dir = absl::StrCat(info->state_root, "/", launch_id);
  }

  const std::string secret = RandomBytes(kSecretBytes);
  const wire::Envelope launch_env = LaunchEnvelope(options, launch_id, secret, target.state_dir);
  if (launch_env.ByteSizeLong() + 64 > protocol::kMaxPayloadBytes) {
    co_return absl::InvalidArgumentError(absl::StrCat(
        "argv, cwd and environment take ", launch_env.ByteSizeLong(), " bytes; the limit is ",
        protocol::kMaxPayloadBytes - 64));
  }

  const bool stdin_pipe = options.stdin_pipe || options.pty.has_value();
  auto state = std::make_shared<State>(*owner, OutputConfigOf(options), stdin_pipe);
  state->provider = std::string(transport.name());
  state->sandbox = transport.sandbox_id();
  state->target = target;
  state->secret = secret;
  state->tunnel = *std::move(tun);
  wire::Hello hello;
  hello.set_secret(secret);
  hello.set_handle(state->handle_id);
  hello.set_window_bytes(options.output_window_bytes);  // shared by both streams
  // Setup deadline: the attach races a timer; whichever loses is cancelled
  // (the channel's pending read with it), so a stuck channel cannot hold us.
  // What follows each attempt, and the outcome, is StartFlow's to say
  // (start_flow.h); here only the I/O.
  absl::StatusOr<wire::Welcome> welcome = absl::UnavailableError("setup not finished");
  internal::StartFlow flow(kMaxLaunchResends);
  bool launch_in_flight = true;  // by script: false while installing between launches
  // A launch whose channel ended or whose answer was lost before the
  // Welcome is sent again, the same Launch with a resend Hello: the
  // supervisor starts a launch id once and attaches any copy to it
  // (PROTOCOL.md 4.1), while the first launch's record is certain to live.
  const auto resend_until = std::min(setup_deadline, std::chrono::steady_clock::now() + ResendWindow(options));
  std::chrono::milliseconds resend_delay = kFirstResendDelay;
  for (int attempt = 0;; ++attempt) {
    wire::Hello h = hello;
    if (attempt > 0) {
      h.set_resend(true);
      // A resent script says so: to the provider it is a new call (an
      // emulator that flags a command sent again after its answer was lost
      // sees that it is one on purpose), to the sandbox the same launch id.
      if (by_script) state->target.start_script = absl::StrCat("# resend ", attempt, "\n", target.start_script);
    }
    bool timed_out = false;
    {
      using namespace asio::experimental::awaitable_operators;
      asio::steady_timer deadline(transport.executor(), setup_deadline);
      asio::awaitable<absl::StatusOr<wire::Welcome>> launch =
          by_script ? internal::LaunchByScript(*state, transport, upload, protocol::EncodeEnvelope(launch_env),
                                               std::move(h), &launch_in_flight)
                    : state->tunnel->Launch(state->target, protocol::EncodeEnvelope(launch_env), std::move(h),
                                            state->session);
      auto raced = co_await (std::move(launch) || state->CloseSessionAt(deadline));
      if (raced.index() == 0) {
        welcome = std::get<0>(std::move(raced));
      } else {
        timed_out = true;
        welcome = absl::UnavailableError("setup did not finish");
      }
    }
    const bool aborted = co_await Cancelled();
    const bool in_time = std::chrono::steady_clock::now() + resend_delay < resend_until;
    if (flow.Attempted(welcome.status(), timed_out, aborted, in_time) == internal::StartFlow::Next::kDone) break;
    internal::Trace("start.resend", ErrorCodeName(ErrorCodeOf(welcome.status())));
    if (state->session) state->session->Close();
    asio::steady_timer pause(transport.executor(), resend_delay);
    co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
    resend_delay *= 2;
    if (co_await Cancelled()) {
      flow.AbortedWhilePausing();
      break;
    }
  }
  if (flow.aborted()) {
    // Abandoned after dispatch: the marker below must still be written.
    co_await asio::this_coro::reset_cancellation_state();
  }
  if ((flow.timed_out() || flow.aborted()) && state->session) state->session->Close();
  switch (flow.outcome(launch_in_flight)) {
    case internal::StartFlow::Outcome::kAttached:
      break;
    case internal::StartFlow::Outcome::kAbortedBeforeDispatch:
      co_return aborted_before_dispatch();
    case internal::StartFlow::Outcome::kTimedOutInstalling:
      co_return absl::UnavailableError(absl::StrCat("setup did not finish within ", options.setup_timeout_ms,
                                                    " ms while installing the supervisor; nothing was started"));
    case internal::StartFlow::Outcome::kNotDispatched:  // an upload failed between launches
    case internal::StartFlow::Outcome::kFailed:
      co_return SetupError(flow.status());
    case internal::StartFlow::Outcome::kUnknown: {
      // The Launch was dispatched and its fate is unknown: make sure a
      // delayed one never starts the child. Never launch again.
      absl::Status marker;
      if (by_script) {
        marker = co_await internal::WriteCancelMarker(transport, launch_id);
      } else {
        marker = co_await internal::PutCancelMarker(transport, target.state_dir + ".cancel");
      }
      co_return OutcomeUnknownError(absl::StrCat(
          "setup ", flow.UnknownReason(options.setup_timeout_ms),
          marker.ok() ? "; a cancellation marker stops a delayed launch from starting the process"
                      : absl::StrCat("; the cancellation marker could not be written: ", std::string(marker.message())),
          "; it was not started again"));
    }
  }
  if (by_script) {
    if (absl::Status st = internal::TakeWelcomePaths(*welcome, launch_id, &state->target); !st.ok()) {
      state->session->Close();
      co_return st;
    }
  }

  if (welcome->state().phase() == wire::ProcessState::PHASE_FAILED) {
    // Nothing runs; acknowledge the record so the daemon cleans up now.
    wire::Envelope ack;
    ack.mutable_ack()->set_exit(true);
    while (true) {
      absl::StatusOr<wire::Envelope> env = co_await state->session->Receive();
      if (!env.ok()) break;
      if (env->has_exit()) {
        state->session->Send(ack);
        co_await state->session->Drain(std::chrono::duration_cast<std::chrono::milliseconds>(kCloseAfterExitTimeout));
        break;
      }
    }
    co_return core::LaunchFailure(welcome->state().exit());
  }
  state->reconnect = options.reconnect || state->tunnel->choice().always_reconnect;
  state->reconnect_timeout = std::chrono::milliseconds(options.reconnect_timeout_ms);
  state->core.input.set_keep_copies(state->reconnect);
  state->ping_interval = std::chrono::milliseconds((options.lease_ms ? options.lease_ms : kDefaultLeaseMs) / 3);
  if (absl::Status st = state->Begin(*welcome); !st.ok()) co_return st;
  internal::Trace("start.attached");
  co_return std::unique_ptr<Process>(new Process(std::move(state)));
}

asio::awaitable<absl::StatusOr<std::unique_ptr<Process>>> Process::Reopen(Transport& transport,
                                                                            std::string_view reference) {
  return Reopen(transport, reference, ReopenOptions());
}

asio::awaitable<absl::StatusOr<std::unique_ptr<Process>>> Process::Reopen(Transport& transport,
                                                                            std::string_view reference,
                                                                            ReopenOptions options) {
  // A caller's abort (per-operation cancellation) is answered with
  // WAIT_ABORTED, never an exception.
  co_await asio::this_coro::throw_if_cancelled(false);
  const std::int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                               std::chrono::system_clock::now().time_since_epoch()).count();
  absl::StatusOr<ProcessReference> ref = ParseReference(reference, now);
  if (!ref.ok()) co_return ref.status();
  if (ref->provider != transport.name() || ref->sandbox != transport.sandbox_id()) {
    co_return absl::InvalidArgumentError(absl::StrCat(
        "process reference is for provider '", ref->provider, "' sandbox '", ref->sandbox,
        "', not '", std::string(transport.name()), "' sandbox '", transport.sandbox_id(), "'"));
  }
  if (options.timeout_ms == 0) co_return absl::InvalidArgumentError("reopen: timeout_ms must be positive");
  absl::StatusOr<std::shared_ptr<Transport>> owner = Owner(transport);
  if (!owner.ok()) co_return owner.status();
  if (absl::Status st = co_await transport.Prepare(); !st.ok()) co_return st;
  absl::StatusOr<std::unique_ptr<tunnel::Tunnel>> tun = tunnel::MakeTunnel(transport);
  if (!tun.ok()) co_return tun.status();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(options.timeout_ms);
  // The sandbox's own layout decides what may run and where: never the
  // reference's paths alone. By script, the sandbox checks them in the
  // same native call as the attach (start_script.h ReattachScript);
  // otherwise a probe first.
  if ((*tun)->starts_by_script()) {
    if (absl::Status st = internal::CheckReferenceShape(*ref); !st.ok()) co_return st;
  } else {
    absl::StatusOr<SandboxInfo> info = co_await WithDeadline(transport.Probe(), deadline, "probing the sandbox");
    if (co_await Cancelled()) co_return WaitAbortedError("reopen was aborted; nothing was attached");
    if (!info.ok()) co_return info.status();
    if (absl::Status st = CheckReferencePaths(*ref, *info); !st.ok()) co_return st;
  }
  core::OutputConfig output;
  output.pty = ref->pty;
  output.text = ref->text;
  output.backpressure = ref->backpressure;
  output.window = output.unread_limit = ref->window_bytes ? ref->window_bytes : kDefaultOutputWindowBytes;
  if (ref->output_left >= 0) output.finite_limit = static_cast<std::uint64_t>(ref->output_left);
  auto state = std::make_shared<State>(*owner, output, ref->stdin_pipe && !options.control);
  if (ref->output_left >= 0) state->core.output.SetOutputLeft(static_cast<std::uint64_t>(ref->output_left));
  state->core.output.Resume(options.stdout_from.value_or(ref->stdout_offset),
                            options.stderr_from.value_or(ref->stderr_offset));
  state->control = options.control;
  state->provider = ref->provider;
  state->sandbox = ref->sandbox;
  state->target.supervisor = ref->supervisor;
  state->target.state_dir = ref->state_dir;
  state->target.named =
      options.supervisor_path.empty() ? transport.script_overrides().supervisor_path : options.supervisor_path;
  state->secret = ref->secret;
  state->tunnel = *std::move(tun);
  state->core.ticket.set_expires_at(static_cast<std::uint64_t>(ref->expires_at));
  state->core.ticket.set_mac(ref->ticket_mac);
  wire::Hello hello = state->ResumeHello();
  hello.set_control(options.control);
  const std::string limit = absl::StrCat("timeout_ms ", options.timeout_ms);
  // The connection ended without an answer: a supervisor that was ending
  // (it removes its directory first) or had just died, one that could not
  // take the connection, or a transport that lost the answer to the call
  // that ran the reattach (OUTCOME_UNKNOWN: a reattach is safe to run
  // again, and this handle's next Hello takes the process from an attempt
  // of its own that did arrive: Hello.handle). Tried again, backing off,
  // until the time limit: gone (NOT_FOUND), refused by the supervisor
  // itself (BUSY, EXPIRED, a wrong secret) and attached all end it. Each
  // attempt gets a share of the time left, the last all of it, so that a
  // channel that opens and never answers cannot take the whole limit.
  const auto share = std::max(std::chrono::milliseconds(options.timeout_ms) / kReconnectAttemptShare,
                              std::chrono::milliseconds(1));
  absl::StatusOr<wire::Welcome> welcome = absl::UnavailableError("reopen: no attempt made");
  auto backoff = std::chrono::milliseconds(100);
  for (int attempt = 0;; ++attempt) {
    const auto now = std::chrono::steady_clock::now();
    const auto attempt_deadline = deadline - now <= 2 * share ? deadline : now + share;
    welcome = co_await state->ReattachUntil(hello, attempt_deadline, limit);
    if (welcome.ok() || co_await Cancelled()) break;
    const bool again = (absl::IsUnavailable(welcome.status()) ||
                        ErrorCodeOf(welcome.status()) == ErrorCode::kOutcomeUnknown) &&
                       ErrorCodeOf(welcome.status()) != ErrorCode::kBusy;
    if (state->session) state->session->Close();
    const auto left = deadline - std::chrono::steady_clock::now();
    if (!again || left <= std::chrono::steady_clock::duration::zero()) break;
    asio::steady_timer pause(transport.executor(), std::min<std::chrono::steady_clock::duration>(backoff, left));
    co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
  if (co_await Cancelled()) {
    if (state->session) state->session->Close();
    co_return WaitAbortedError("reopen was aborted; nothing was attached");
  }
  if (!welcome.ok()) {
    if (state->session) state->session->Close();
    if (absl::IsNotFound(welcome.status())) {
      co_return absl::NotFoundError(absl::StrCat("the process is gone (it exited and was cleaned up, or its sandbox was reset): ",
                                                 std::string(welcome.status().message())));
    }
    if (ErrorCodeOf(welcome.status()) == ErrorCode::kBusy || absl::IsDeadlineExceeded(welcome.status()) ||
        absl::IsUnauthenticated(welcome.status()) || absl::IsInvalidArgument(welcome.status())) {
      // BUSY, EXPIRED, a wrong secret: the supervisor's own answer; a
      // reference the sandbox refused.
      co_return welcome.status();
    }
    // Refused or unreachable: the process may well be alive. Never "gone".
    co_return absl::Status(welcome.status().code(),
                           absl::StrCat("could not reach the process's supervisor: ",
                                        std::string(welcome.status().message())));
  }
  if (options.control) {
    // Requests only: no stdin, no output, no exit record, no reattach.
    state->core.pid = welcome->state().pid();
    state->reconnect = false;
    state->pumping = true;  // (before the keepalive's first look)
    asio::co_spawn(state->close_timer.get_executor(), state->Pump(), asio::detached);
    asio::co_spawn(state->close_timer.get_executor(), state->Keepalive(), asio::detached);
    co_return std::unique_ptr<Process>(new Process(std::move(state)));
  }
  // Input continues where the supervisor's stdin stands: after every byte
  // it accepted (some may still wait for the child), and EOF may be sent.
  state->core.input.Resume(welcome->state());
  state->reconnect = state->tunnel->choice().always_reconnect;
  state->core.input.set_keep_copies(state->reconnect);
  if (absl::Status st = state->Begin(*welcome); !st.ok()) co_return st;
  co_return std::unique_ptr<Process>(new Process(std::move(state)));
}

}  // namespace tether
