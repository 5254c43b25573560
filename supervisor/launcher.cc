#include "supervisor/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "protocol/armor.h"
#include "protocol/command_line.h"
#include "protocol/envelope.h"
#include "protocol/sha256.h"
#include "supervisor/bridge.h"
#include "supervisor/child.h"
#include "supervisor/daemon.h"
#include "supervisor/daemonize.h"
#include "supervisor/exchange.h"
#include "supervisor/proc_scrub.h"
#include "supervisor/state_dir.h"

namespace tether::supervisor {
namespace {

// What a copy of a launch that found the launch's directory made does.
struct FirstCopy {
  absl::StatusOr<int> sock = absl::UnknownError("not looked");  // the first copy's daemon
  // >= 0: the directory's lock, free and now ours, with no daemon mark: the
  // copy that made the directory died before its daemon ran (killed with
  // its exec call), and none ever will run. This copy starts it.
  int take_over_lock = -1;
};

// Connects to the daemon of the first copy of a launch, whose directory
// exists. Its socket may not be listening yet (that copy is between its
// mkdir and its listen, which load can stretch): waits for it, up to
// kCopyWaitsForDaemonMs, while the directory stands, its lock is held and
// no cancellation marker stands. (ConnectInDir reports a socket not there
// yet, and one nobody listens on, as NOT_FOUND.) A free lock ends the wait
// at once (state_dir.h TryLockDir): no daemon ever comes.
FirstCopy ConnectToFirstCopy(const std::string& dir) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kCopyWaitsForDaemonMs);
  std::chrono::milliseconds pause(5);
  while (true) {
    FirstCopy r;
    r.sock = ConnectInDir(dir);
    if (r.sock.ok() || !absl::IsNotFound(r.sock.status())) return r;
    struct stat st;
    if (::lstat(dir.c_str(), &st) != 0 || LaunchCancelled(dir)) return r;
    if (absl::StatusOr<int> lock = TryLockDir(dir); lock.ok()) {
      if (!HasDaemonMark(dir)) {
        r.take_over_lock = *lock;
        return r;
      }
      ::close(*lock);
      r.sock = absl::NotFoundError(absl::StrCat(
          "the daemon of launch ", dir.substr(dir.rfind('/') + 1),
          " is gone without a record (killed?) after it may have started the process: it is not started again"));
      return r;
    }
    if (std::chrono::steady_clock::now() >= until) return r;
    ::usleep(static_cast<useconds_t>(pause.count() * 1000));
    pause = std::min(pause * 2, std::chrono::milliseconds(100));
  }
}

bool IdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

using protocol::LaunchTunnel;

// Errors go out armored where the host reads lines: the text tunnel, and the
// exchange tunnel's one-shot output.
bool ArmoredReplies(const protocol::LaunchCommand& cmd) {
  return cmd.tunnel == LaunchTunnel::kText || cmd.tunnel == LaunchTunnel::kExchange;
}

int Report(const protocol::LaunchCommand& cmd, wire::ErrorCode code, const absl::Status& st) {
  wire::Envelope env;
  env.mutable_error()->set_code(code);
  env.mutable_error()->set_message(std::string(st.message()));
  env.mutable_error()->set_fatal(true);
  WriteFrameToHost(protocol::EncodeEnvelope(env), ArmoredReplies(cmd));
  std::fprintf(stderr, "tether-supervisor launch: %s\n", std::string(st.message()).c_str());
  return 1;
}

// The launch's directory is gone and its tombstone, a cancellation marker,
// stands in for it (the daemon that held it has ended): this copy starts
// nothing.
int ReportRecordGone(const protocol::LaunchCommand& cmd) {
  return Report(cmd, wire::ERROR_CANCELLED,
                absl::CancelledError("launch cancelled: its record is gone and a cancellation "
                                     "marker stands in for it; nothing was started"));
}

// Reads exactly one Launch envelope from stdin (armored lines when `text`);
// bytes after it are returned in *rest.
absl::StatusOr<wire::Launch> ReadLaunch(bool text, std::string* rest) {
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
    if (text) {
      // Lines until one holds a frame; what follows it is the bridge's.
      std::string frame;
      const absl::StatusOr<protocol::DecodeResult> got = armor.Next(&in, &frame);
      if (!got.ok()) {
        // The channel damaged a frame line (most likely the Launch itself):
        // never guess past it. Nothing was started.
        return absl::DataLossError(absl::StrCat("launch: before the Launch, ", got.status().message(),
                                                "; nothing was started"));
      }
      if (*got != protocol::DecodeResult::kFrame) continue;
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

// --expect-sha256: this executable's own hash, checked before anything is
// read, so that a start script can trust a content-addressed name without
// hashing 1 MB in shell on every start (a corrupt or replaced file answers
// "need corrupt" and the host installs it again).
absl::Status CheckOwnHash(const std::string& expected) {
  const int fd = ::open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::FailedPreconditionError(absl::StrCat("open /proc/self/exe: ", std::strerror(errno)));
  protocol::Sha256 h;
  char buf[64 * 1024];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return absl::FailedPreconditionError(absl::StrCat("read /proc/self/exe: ", std::strerror(err)));
    }
    if (n == 0) break;
    h.Update(std::string_view(buf, static_cast<std::size_t>(n)));
  }
  ::close(fd);
  const std::array<std::uint8_t, 32> d = h.Finish();
  const std::string got = absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(d.data()), d.size()));
  if (got != expected) return absl::DataLossError(absl::StrCat("sha256 ", got, ", expected ", expected));
  return absl::OkStatus();
}

std::string OwnPath() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf);
  return n > 0 && static_cast<std::size_t>(n) < sizeof buf ? std::string(buf, static_cast<std::size_t>(n)) : "";
}

}  // namespace

std::string CancelMarkerPath(const std::string& state_dir) { return state_dir + ".cancel"; }

bool LaunchCancelled(const std::string& state_dir) {
  struct stat st;
  return ::lstat(CancelMarkerPath(state_dir).c_str(), &st) == 0;
}

void LeaveCancelMarker(const std::string& state_dir) {
  const int fd = ::open(CancelMarkerPath(state_dir).c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd >= 0) ::close(fd);
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

// Exchange mode: the Launch frame from the host's private file (never argv);
// the frames after it (the host's Hello) are returned in *rest for the relay.
absl::StatusOr<wire::Launch> LaunchFromFile(const std::string& init_file, std::string* rest) {
  absl::StatusOr<std::string> data = TakeInitFile(init_file);
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

// The bridge, or in exchange mode the relay; with --direct nothing (the host
// connects itself).
int Attach(const protocol::LaunchCommand& cmd, int sock, const std::string& dir, std::string rest) {
  switch (cmd.tunnel) {
    case LaunchTunnel::kDirect:
      ::close(sock);  // the daemon is there and listening
      return 0;
    case LaunchTunnel::kExchange:
      return StartRelay(sock, dir, cmd.relay_id, std::move(rest));
    case LaunchTunnel::kBinary:
    case LaunchTunnel::kText:
      break;
  }
  return RunBridge(sock, std::move(rest), cmd.tunnel == LaunchTunnel::kText);
}
}  // namespace

int LaunchMain(const protocol::LaunchCommand& cmd, std::vector<std::string> ambient_env) {
  const pid_t launcher_parent = ::getppid();
  if (!cmd.expect_sha256.empty()) {
    if (absl::Status st = CheckOwnHash(cmd.expect_sha256); !st.ok()) {
      // Nothing was read or written yet: the host reads this line instead
      // of frames.
      std::printf("%scorrupt %s\n", std::string(protocol::kStartNeedPrefix).c_str(), OwnPath().c_str());
      std::fflush(stdout);
      std::fprintf(stderr, "tether-supervisor launch: this binary is not the one its name promises: %s\n",
                   std::string(st.message()).c_str());
      return 1;
    }
  }
  std::string rest;
  absl::StatusOr<wire::Launch> launch = cmd.tunnel == LaunchTunnel::kExchange
                                            ? LaunchFromFile(cmd.init_file, &rest)
                                            : ReadLaunch(cmd.tunnel == LaunchTunnel::kText, &rest);
  if (!launch.ok() && cmd.tunnel == LaunchTunnel::kText && absl::IsDataLoss(launch.status())) {
    // A damaged channel gets no reply it could damage again: the host sees
    // the channel end (UNAVAILABLE, so OUTCOME_UNKNOWN and a cancellation
    // marker), and this message in the channel's diagnostics.
    std::fprintf(stderr, "%s\n", std::string(launch.status().message()).c_str());
    return 1;
  }
  if (!launch.ok()) return Report(cmd, wire::ERROR_PROTOCOL, launch.status());
  if (!cmd.state_root.empty()) {
    // The directory comes from the sandbox's side (a start script), the
    // launch id from the host: the Launch names no directory itself.
    if (!launch->state_dir().empty()) {
      return Report(cmd, wire::ERROR_INVALID_ARGUMENT,
                    absl::InvalidArgumentError("launch: --state-root with a Launch that names its own state_dir"));
    }
    launch->set_state_dir(absl::StrCat(cmd.state_root, "/", launch->launch_id()));
  }
  if (absl::Status st = ValidateLaunch(*launch); !st.ok()) return Report(cmd, wire::ERROR_INVALID_ARGUMENT, st);
  const std::string dir = launch->state_dir();
  if (LaunchCancelled(dir)) {
    // (The marker stays: another copy of this launch may still come.)
    return Report(cmd, wire::ERROR_CANCELLED,
                  absl::CancelledError("launch cancelled: the host abandoned its setup and left a "
                                       "cancellation marker; nothing was started"));
  }

  absl::Status created = CreatePrivateDir(dir);
  int lock_fd = -1;  // the directory's lock, held until the daemon holds it too
  if (created.ok()) {
    absl::StatusOr<int> lock = TryLockDir(dir);
    if (lock.ok()) {
      lock_fd = *lock;
    } else if (absl::IsUnavailable(lock.status())) {
      // Another copy found the directory between our mkdir and our lock,
      // took it for a dead copy's and starts the daemon: it is the first.
      created = absl::AlreadyExistsError("taken over");
    } else {
      RemovePrivateDir(dir);
      return Report(cmd, wire::ERROR_INTERNAL, lock.status());
    }
  }
  if (absl::IsAlreadyExists(created)) {
    // The same launch id never starts a second child: attach to the first.
    FirstCopy first = ConnectToFirstCopy(dir);
    if (first.take_over_lock < 0) {
      EraseStrings(&ambient_env);
      if (!first.sock.ok() && LaunchCancelled(dir)) {
        // (the first copy's daemon ended and left its tombstone meanwhile)
        return ReportRecordGone(cmd);
      }
      if (!first.sock.ok()) return Report(cmd, wire::ERROR_NOT_FOUND, first.sock.status());
      return Attach(cmd, *first.sock, dir, std::move(rest));
    }
    // The copy that made the directory was killed before its daemon ran
    // (what it left: the directory, perhaps a socket nobody listens on).
    lock_fd = first.take_over_lock;
    std::fprintf(stderr, "tether-supervisor launch: the copy that made %s ended before its daemon began; this one starts it\n",
                 dir.c_str());
    ::unlink(absl::StrCat(dir, "/", kSocketName).c_str());
    created = absl::OkStatus();
  }
  if (!created.ok()) {
    // A file system that is full or out of inodes is the sandbox's limit
    // (the CLI's 125), not a bad request (a state directory that is not a
    // private one of ours, exit 2).
    return Report(cmd, absl::IsResourceExhausted(created) ? wire::ERROR_RESOURCE_EXHAUSTED : wire::ERROR_INVALID_ARGUMENT,
                  created);
  }
  // Litter from abandoned setups whose launch never came (best effort).
  RemoveStaleCancelMarkers(dir.substr(0, dir.rfind('/')), kStaleMarkerSeconds);
  // (A few per launch: dead daemons are rare, live ones are woken by a probe.)
  RemoveDeadStateDirs(dir.substr(0, dir.rfind('/')), 8);
  absl::StatusOr<int> listen_fd = ListenInDir(dir);
  if (!listen_fd.ok()) {
    RemovePrivateDir(dir);
    ::close(lock_fd);
    return Report(cmd, wire::ERROR_INTERNAL, listen_fd.status());
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
  const Forked forked = Daemonize({.keep = {*listen_fd, lock_fd}, .subreaper = true});
  const int fork_errno = errno;
  if (forked == Forked::kDaemon) {
    DaemonConfig config;
    config.child_env = std::move(child_env);
    config.launch = *std::move(launch);
    config.state_dir = dir;
    config.listen_fd = *listen_fd;
    config.lock_fd = lock_fd;
    config.launcher_parent = launcher_parent;
    config.supervisor_path = OwnPath();
    ::_exit(RunDaemon(std::move(config)));
  }
  ::close(*listen_fd);
  if (forked == Forked::kFailed) {
    // Nothing runs: leave nothing behind either.
    RemovePrivateDir(dir);
    ::close(lock_fd);
    return Report(cmd, wire::ERROR_INTERNAL,
                  absl::ResourceExhaustedError(absl::StrCat("cannot start the daemon: fork: ",
                                                            std::strerror(fork_errno), "; nothing was started")));
  }
  if (cmd.tunnel == LaunchTunnel::kDirect) {
    ::close(lock_fd);
    return 0;  // the daemon listens; the host connects itself
  }
  absl::StatusOr<int> sock = ConnectInDir(dir);
  // (Held until now: a daemon that died unseen before its mark, e.g. its
  // fork killed, leaves a directory that a copy may start again only
  // once we cannot report on it any more.)
  const bool marked = HasDaemonMark(dir);
  ::close(lock_fd);
  if (!sock.ok() && LaunchCancelled(dir)) {
    // A resent copy's daemon ended and left its tombstone between our look
    // for a marker and our mkdir: the daemon forked above saw it before it
    // started anything, and left.
    return ReportRecordGone(cmd);
  }
  if (!sock.ok()) {
    return Report(cmd, wire::ERROR_INTERNAL,
                  absl::Status(sock.status().code(),
                               absl::StrCat(sock.status().message(),
                                            marked ? " (its daemon ended after it began: it may have started the process)"
                                                   : " (its daemon never began: nothing was started)")));
  }
  return Attach(cmd, *sock, dir, std::move(rest));
}

}  // namespace tether::supervisor
