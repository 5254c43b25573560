#include "supervisor/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "protocol/envelope.h"
#include "supervisor/bridge.h"
#include "supervisor/child.h"
#include "protocol/armor.h"
#include "supervisor/bridge.h"
#include "supervisor/daemon.h"
#include "supervisor/exchange.h"
#include "supervisor/proc_scrub.h"
#include "supervisor/state_dir.h"

namespace tether::supervisor {
namespace {

bool IdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

bool g_text = false;  // the channel carries armored lines (launch --text)

int Report(wire::ErrorCode code, const absl::Status& st) {
  wire::Envelope env;
  env.mutable_error()->set_code(code);
  env.mutable_error()->set_message(std::string(st.message()));
  env.mutable_error()->set_fatal(true);
  WriteFrameToHost(protocol::EncodeEnvelope(env), g_text);
  std::fprintf(stderr, "tether-supervisor launch: %s\n", std::string(st.message()).c_str());
  return 1;
}

// Reads exactly one Launch envelope; bytes after it are returned in *rest.
absl::StatusOr<wire::Launch> ReadLaunch(std::string* rest) {
  protocol::EnvelopeDecoder decoder;
  protocol::ArmorDecoder armor(protocol::ArmorDirection::kToSupervisor);
  wire::Envelope env;
  char buf[64 * 1024];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kLaunchReadTimeoutMs);
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return absl::DeadlineExceededError("launch: no Launch frame within 30 s");
    pollfd p{0, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    const ssize_t n = ::read(0, buf, sizeof(buf));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return absl::InvalidArgumentError("launch: stdin ended before a Launch frame");
    std::string_view in(buf, static_cast<std::size_t>(n));
    if (g_text) {
      // Lines until one holds a frame; what follows it is the bridge's.
      std::string frame;
      const protocol::DecodeResult got = armor.Decode(&in, &frame);
      if (armor.damaged_lines() > 0) {
        // The channel damaged a frame line (most likely the Launch itself):
        // never guess past it. Nothing was started.
        return absl::DataLossError("launch: the channel damaged a frame line before the Launch; nothing was started");
      }
      if (got != protocol::DecodeResult::kFrame) continue;
      absl::StatusOr<std::string> payload = protocol::DecodeWholeFrame(frame);
      if (!payload.ok()) return payload.status();
      absl::StatusOr<wire::Envelope> parsed = protocol::ParseEnvelope(*payload);
      if (!parsed.ok()) return parsed.status();
      env = *std::move(parsed);
    } else {
      absl::StatusOr<bool> got = decoder.Next(&in, &env);
      if (!got.ok()) return got.status();
      if (!*got) continue;
    }
    if (env.body_case() != wire::Envelope::kLaunch) {
      return absl::InvalidArgumentError(
          absl::StrCat("launch: expected a launch frame, got ", std::string(protocol::BodyName(env))));
    }
    rest->assign(in);
    return std::move(*env.mutable_launch());
  }
}

void CloseFdsExcept(int keep) {
  for (int fd = 3; fd < keep; ++fd) ::close(fd);
#ifdef SYS_close_range
  if (::syscall(SYS_close_range, keep + 1, ~0U, 0) == 0) return;
#endif
  for (int fd = keep + 1; fd < 65536; ++fd) ::close(fd);
}

enum class Forked {
  kDaemon,    // we are the daemon
  kLauncher,  // we are the launch call, and the daemon runs
  kFailed,    // no daemon: a fork failed (errno is the first fork's, or EAGAIN)
};

// Double fork: the daemon is reparented away from the launch call, in its
// own session.
Forked Daemonize(int listen_fd) {
  const pid_t p = ::fork();
  if (p < 0) return Forked::kFailed;
  if (p > 0) {
    int st = 0;
    while (::waitpid(p, &st, 0) < 0 && errno == EINTR) {
    }
    // Status 1: its fork failed. (Killed by a signal, it may have forked
    // first: then the connect below tells.)
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 1) return Forked::kLauncher;
    errno = EAGAIN;
    return Forked::kFailed;
  }
  ::setsid();  // leave the exec call's session: its hangup never reaches us
  const pid_t daemon = ::fork();
  if (daemon != 0) ::_exit(daemon > 0 ? 0 : 1);
  const int null = ::open("/dev/null", O_RDWR);
  ::dup2(null, 0);
  ::dup2(null, 1);
  ::dup2(null, 2);
  if (null > 2) ::close(null);
  CloseFdsExcept(listen_fd);
  (void)!::chdir("/");
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  ::signal(SIGPIPE, SIG_IGN);
  ::signal(SIGHUP, SIG_IGN);
  return Forked::kDaemon;
}

}  // namespace

std::string CancelMarkerPath(const std::string& state_dir) { return state_dir + ".cancel"; }

bool LaunchCancelled(const std::string& state_dir) {
  struct stat st;
  return ::lstat(CancelMarkerPath(state_dir).c_str(), &st) == 0;
}

absl::Status ValidateLaunch(const wire::Launch& l) {
  if (l.launch_id().empty() || l.launch_id().size() > kMaxLaunchIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat("launch id must be 1..", kMaxLaunchIdBytes, " bytes"));
  }
  for (char c : l.launch_id()) {
    if (!IdChar(c)) return absl::InvalidArgumentError("launch id may hold only [A-Za-z0-9_-]");
  }
  if (l.secret().size() < kMinSecretBytes || l.secret().size() > kMaxSecretBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("secret must be ", kMinSecretBytes, "..", kMaxSecretBytes, " bytes"));
  }
  if (l.argv().empty()) return absl::InvalidArgumentError("argv is empty");
  if (static_cast<std::size_t>(l.argv_size()) > kMaxArgs) {
    return absl::InvalidArgumentError(absl::StrCat("argv has more than ", kMaxArgs, " entries"));
  }
  if (l.argv(0).empty()) return absl::InvalidArgumentError("argv[0] is empty");
  for (int i = 0; i < l.argv_size(); ++i) {
    if (l.argv(i).find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("argv[", i, "] contains a NUL byte"));
    }
  }
  if (l.cwd().find('\0') != std::string::npos) return absl::InvalidArgumentError("cwd contains a NUL byte");
  if (l.state_dir().empty() || l.state_dir()[0] != '/' || l.state_dir().find('\0') != std::string::npos) {
    return absl::InvalidArgumentError("state_dir must be an absolute path");
  }
  if (l.has_pty() && (l.pty().cols() == 0 || l.pty().rows() == 0 || l.pty().cols() > kMaxPtyCells ||
                      l.pty().rows() > kMaxPtyCells)) {
    return absl::InvalidArgumentError(absl::StrCat("pty size ", l.pty().cols(), "x", l.pty().rows(),
                                                   " is outside 1..", kMaxPtyCells));
  }
  return absl::OkStatus();
}

namespace {
std::string g_exchange_relay;  // exchange mode: the relay that replaces the bridge
std::string g_exchange_init;   // exchange mode: @PATH of the host's private frames

// Exchange mode: the Launch frame from the host's private file (never argv);
// the frames after it (the host's Hello) are returned in *rest for the relay.
absl::StatusOr<wire::Launch> LaunchFromFile(std::string* rest) {
  absl::StatusOr<std::string> data = TakeInitFile(g_exchange_init);
  if (!data.ok()) return data.status();
  protocol::EnvelopeDecoder decoder;
  std::string_view in = *data;
  wire::Envelope env;
  absl::StatusOr<bool> got = decoder.Next(&in, &env);
  if (!got.ok()) return got.status();
  if (!*got || env.body_case() != wire::Envelope::kLaunch) {
    return absl::InvalidArgumentError("launch: the host's file does not start with a launch frame");
  }
  rest->assign(in);
  return std::move(*env.mutable_launch());
}

bool g_direct = false;  // launch --direct: no bridge, the host connects itself

// The bridge, or in exchange mode the relay.
int Attach(int sock, const std::string& dir, std::string rest, bool text) {
  if (g_direct) {
    ::close(sock);  // the daemon is there and listening
    return 0;
  }
  if (!g_exchange_relay.empty()) return StartRelay(sock, dir, g_exchange_relay, std::move(rest));
  return RunBridge(sock, std::move(rest), text);
}
}  // namespace

int LaunchExchangeMain(const std::string& relay_id, const std::string& init,
                       std::vector<std::string> ambient_env) {
  g_exchange_relay = relay_id;
  g_exchange_init = init;
  return LaunchMain(true, std::move(ambient_env));
}

int LaunchDirectMain(std::vector<std::string> ambient_env) {
  g_direct = true;
  return LaunchMain(false, std::move(ambient_env));
}

int LaunchMain(bool text, std::vector<std::string> ambient_env) {
  g_text = text;
  const pid_t launcher_parent = ::getppid();
  std::string rest;
  absl::StatusOr<wire::Launch> launch = g_exchange_relay.empty() ? ReadLaunch(&rest) : LaunchFromFile(&rest);
  if (!launch.ok() && text && absl::IsDataLoss(launch.status())) {
    // A damaged channel gets no reply it could damage again: the host sees
    // the channel end (UNAVAILABLE, so OUTCOME_UNKNOWN and a cancellation
    // marker), and this message in the channel's diagnostics.
    std::fprintf(stderr, "%s\n", std::string(launch.status().message()).c_str());
    return 1;
  }
  if (!launch.ok()) return Report(wire::ERROR_PROTOCOL, launch.status());
  if (absl::Status st = ValidateLaunch(*launch); !st.ok()) return Report(wire::ERROR_INVALID_ARGUMENT, st);
  const std::string dir = launch->state_dir();
  if (LaunchCancelled(dir)) {
    ::unlink(CancelMarkerPath(dir).c_str());
    return Report(wire::ERROR_CANCELLED,
                  absl::CancelledError("launch cancelled: the host abandoned its setup and left a "
                                       "cancellation marker; nothing was started"));
  }

  absl::Status created = CreatePrivateDir(dir);
  if (absl::IsAlreadyExists(created)) {
    EraseStrings(&ambient_env);
    // The same launch id never starts a second child: attach to the first.
    absl::StatusOr<int> sock = ConnectInDir(dir);
    if (!sock.ok()) return Report(wire::ERROR_NOT_FOUND, sock.status());
    return Attach(*sock, dir, std::move(rest), text);
  }
  if (!created.ok()) return Report(wire::ERROR_INVALID_ARGUMENT, created);
  // Litter from abandoned setups whose launch never came (best effort).
  RemoveStaleCancelMarkers(dir.substr(0, dir.rfind('/')), kStaleMarkerSeconds);
  RemoveDeadStateDirs(dir.substr(0, dir.rfind('/')), 256);
  absl::StatusOr<int> listen_fd = ListenInDir(dir);
  if (!listen_fd.ok()) {
    RemovePrivateDir(dir);
    return Report(wire::ERROR_INTERNAL, listen_fd.status());
  }
  if (launch->cwd().empty()) {
    char buf[4096];
    if (::getcwd(buf, sizeof(buf)) != nullptr) launch->set_cwd(buf);
  }
  // The child's environment, while we still have the ambient one; after
  // this no process of ours holds the scrubbed variables (proc_scrub.h).
  std::vector<char*> ambient;
  for (std::string& e : ambient_env) ambient.push_back(e.data());
  ambient.push_back(nullptr);
  absl::StatusOr<std::vector<std::string>> child_env =
      BuildEnvironment(launch->env(), launch->inherit_env(), ambient.data());
  EraseStrings(&ambient_env);
  const Forked forked = Daemonize(*listen_fd);
  const int fork_errno = errno;
  if (forked == Forked::kDaemon) {
    DaemonConfig config;
    config.child_env = std::move(child_env);
    config.launch = *std::move(launch);
    config.state_dir = dir;
    config.listen_fd = *listen_fd;
    config.launcher_parent = launcher_parent;
    ::_exit(RunDaemon(std::move(config)));
  }
  ::close(*listen_fd);
  if (forked == Forked::kFailed) {
    // Nothing runs: leave nothing behind either.
    RemovePrivateDir(dir);
    return Report(wire::ERROR_INTERNAL,
                  absl::ResourceExhaustedError(absl::StrCat("cannot start the daemon: fork: ",
                                                            std::strerror(fork_errno), "; nothing was started")));
  }
  if (g_direct) return 0;  // the daemon listens; the host connects itself
  absl::StatusOr<int> sock = ConnectInDir(dir);
  if (!sock.ok()) return Report(wire::ERROR_INTERNAL, sock.status());
  return Attach(*sock, dir, std::move(rest), text);
}

}  // namespace tether::supervisor
