#include "supervisor/exchange.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "protocol/armor.h"
#include "protocol/frame.h"
#include "supervisor/state_dir.h"

namespace tether::supervisor {
namespace {

constexpr std::uint32_t kCloseRequest = 0xFFFFFFFF;  // `exchange DIR ID close`

using Clock = std::chrono::steady_clock;

std::string RelayDir(const std::string& state_dir, const std::string& id) { return state_dir + ".x-" + id; }

bool ValidId(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) return false;
  }
  return true;
}

void PutU64(std::string* out, std::uint64_t v) {
  for (int i = 7; i >= 0; --i) out->push_back(static_cast<char>(v >> (8 * i)));
}
std::uint64_t GetU64(const char* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = v << 8 | static_cast<unsigned char>(p[i]);
  return v;
}

// Reads exactly n bytes (blocking fd), false on EOF or error.
bool ReadFull(int fd, char* p, std::size_t n) {
  while (n > 0) {
    pollfd q{fd, POLLIN, 0};
    if (::poll(&q, 1, 2000) <= 0) return false;
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

bool WriteFull(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t r = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    s.remove_prefix(static_cast<std::size_t>(r));
  }
  return true;
}

void PrintReply(const std::string& payload) {
  const std::string line = protocol::ArmorLine(protocol::EncodeFrame(payload), protocol::ArmorDirection::kToHost);
  (void)!::write(1, line.data(), line.size());
}

struct Relay {
  int daemon = -1, listen = -1;
  std::string in;                 // host bytes not yet written to the daemon
  std::uint64_t in_received = 0;  // host bytes accepted (offset)
  std::string out;                // daemon bytes from out_base not yet acknowledged
  std::uint64_t out_base = 0;
  bool daemon_eof = false;
  bool closing = false;
  // One poll waiting for output.
  int client = -1;
  std::uint64_t client_out = 0;
  Clock::time_point client_deadline;
  Clock::time_point last_poll = Clock::now();

  void Reply() {
    std::string payload;
    PutU64(&payload, in_received);
    const std::uint64_t from = std::max(client_out, out_base);
    PutU64(&payload, from);
    payload.push_back(static_cast<char>(daemon_eof ? kExchangeDaemonEnded : 0));
    const std::size_t skip = static_cast<std::size_t>(from - out_base);
    if (skip < out.size()) payload.append(out, skip, kMaxExchangeReplyBytes);
    std::string msg;
    PutU64(&msg, payload.size());
    msg += payload;
    WriteFull(client, msg);
    ::close(client);
    client = -1;
  }

  // Reads one request from a new connection and applies its input.
  void Accept() {
    const int c = ::accept4(listen, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) return;
    char head[20];
    if (!ReadFull(c, head, sizeof head)) {
      ::close(c);
      return;
    }
    const std::uint64_t in_off = GetU64(head), out_off = GetU64(head + 8);
    const std::uint32_t len = static_cast<std::uint32_t>(static_cast<unsigned char>(head[16])) << 24 |
                              static_cast<std::uint32_t>(static_cast<unsigned char>(head[17])) << 16 |
                              static_cast<std::uint32_t>(static_cast<unsigned char>(head[18])) << 8 |
                              static_cast<std::uint32_t>(static_cast<unsigned char>(head[19]));
    if (len == kCloseRequest) {
      // The host is done with this relay: let the attachment go (the daemon
      // keeps backpressure for a lease, as for any lost attachment).
      ::close(c);
      closing = true;
      return;
    }
    if (len > (1u << 20)) {
      ::close(c);
      return;
    }
    std::string data(len, '\0');
    if (!ReadFull(c, data.data(), len)) {
      ::close(c);
      return;
    }
    last_poll = Clock::now();
    if (client >= 0) Reply();  // a newer poll supersedes a parked one
    // Input: only what extends what we have (a repeated poll adds nothing).
    if (in_off <= in_received && in_off + len > in_received && in.size() < kRelayBufferBytes) {
      const std::size_t skip = static_cast<std::size_t>(in_received - in_off);
      in.append(data, skip, std::string::npos);
      in_received = in_off + len;
    }
    // Output below out_off reached the host.
    if (out_off > out_base) {
      const std::size_t drop = static_cast<std::size_t>(std::min<std::uint64_t>(out_off - out_base, out.size()));
      out.erase(0, drop);
      out_base += drop;
    }
    client = c;
    client_out = out_off;
    client_deadline = Clock::now() + std::chrono::milliseconds(kExchangeWaitMs);
    if (out_base + out.size() > out_off || daemon_eof || !in.empty()) Reply();
  }

  int Run() {
    char buf[64 * 1024];
    while (true) {
      if (client < 0 && daemon_eof && out.empty()) return 0;  // all delivered
      if (closing) return 0;
      if (client < 0 && Clock::now() - last_poll > std::chrono::milliseconds(kRelayIdleMs)) return 0;
      pollfd p[3] = {{daemon, 0, 0}, {listen, POLLIN, 0}, {client, 0, 0}};
      if (!daemon_eof && out.size() < kRelayBufferBytes) p[0].events |= POLLIN;
      if (!daemon_eof && !in.empty()) p[0].events |= POLLOUT;
      if (p[0].events == 0) p[0].fd = -1;
      if (client < 0) p[2].fd = -1;
      int timeout = 1000;
      if (client >= 0) {
        timeout = static_cast<int>(std::max<long>(
            0, std::chrono::duration_cast<std::chrono::milliseconds>(client_deadline - Clock::now()).count()));
      }
      if (::poll(p, 3, timeout) < 0 && errno != EINTR) return 1;
      if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
        const ssize_t n = ::read(daemon, buf, sizeof buf);
        if (n > 0) {
          out.append(buf, static_cast<std::size_t>(n));
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          daemon_eof = true;
        }
      }
      if ((p[0].revents & POLLOUT) && !in.empty()) {
        const ssize_t n = ::send(daemon, in.data(), in.size(), MSG_NOSIGNAL);
        if (n > 0) in.erase(0, static_cast<std::size_t>(n));
        if (n < 0 && errno != EAGAIN && errno != EINTR) daemon_eof = true;
      }
      if (p[1].revents & POLLIN) Accept();
      if (client >= 0 && (out_base + out.size() > client_out || daemon_eof || Clock::now() >= client_deadline)) {
        Reply();
      }
    }
  }
};

}  // namespace

absl::StatusOr<std::string> TakeInitFile(const std::string& at_path) {
  if (at_path.size() < 2 || at_path[0] != '@' || at_path[1] != '/') {
    return absl::InvalidArgumentError("expected @ABSOLUTE_PATH of the host's private frames");
  }
  const std::string path = at_path.substr(1);
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0 ||
      st.st_size < 0 || static_cast<std::uint64_t>(st.st_size) > kMaxInitFileBytes) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a private (0600) file of ours of at most ",
                                                   kMaxInitFileBytes, " bytes"));
  }
  std::string data(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t got = 0;
  while (got < data.size()) {
    const ssize_t n = ::read(fd, data.data() + got, data.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  ::unlink(path.c_str());  // read once: nothing secret stays on disk
  if (got != data.size()) return absl::InvalidArgumentError(absl::StrCat(path, " changed while it was read"));
  return data;
}

int StartRelay(int daemon_sock, const std::string& state_dir, const std::string& id, std::string initial) {
  const std::string dir = RelayDir(state_dir, id);
  if (!ValidId(id)) {
    std::fprintf(stderr, "tether-supervisor relay: bad relay id\n");
    return 2;
  }
  if (absl::Status st = CreatePrivateDir(dir); !st.ok()) {
    std::fprintf(stderr, "tether-supervisor relay: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  absl::StatusOr<int> listen = ListenInDir(dir);
  if (!listen.ok()) {
    RemovePrivateDir(dir);
    std::fprintf(stderr, "tether-supervisor relay: %s\n", std::string(listen.status().message()).c_str());
    return 1;
  }
  const pid_t p = ::fork();
  int st = 0;
  if (p > 0) {
    while (::waitpid(p, &st, 0) < 0 && errno == EINTR) {
    }
  }
  if (p < 0 || (WIFEXITED(st) && WEXITSTATUS(st) == 1)) {
    // No relay runs (a fork failed): nothing of it stays behind.
    ::close(*listen);
    RemovePrivateDir(dir);
    std::fprintf(stderr, "tether-supervisor relay: cannot start the relay: fork failed\n");
    return 1;
  }
  if (p > 0) {
    std::puts("tether-relay-ok");
    std::fflush(stdout);
    return 0;
  }
  ::setsid();
  const pid_t relay = ::fork();
  if (relay != 0) ::_exit(relay > 0 ? 0 : 1);
  const int null = ::open("/dev/null", O_RDWR);
  ::dup2(null, 0), ::dup2(null, 1), ::dup2(null, 2);
  if (null > 2) ::close(null);
  ::signal(SIGPIPE, SIG_IGN);
  ::signal(SIGHUP, SIG_IGN);
  ::fcntl(daemon_sock, F_SETFL, ::fcntl(daemon_sock, F_GETFL) | O_NONBLOCK);
  Relay r;
  r.daemon = daemon_sock;
  r.listen = *listen;
  r.in = std::move(initial);  // the host's Hello: before any polled byte
  const int rc = r.Run();
  RemovePrivateDir(dir);
  ::_exit(rc);
}

int RelayMain(const std::string& state_dir, const std::string& id, const std::string& init) {
  absl::StatusOr<std::string> initial = TakeInitFile(init);
  if (!initial.ok()) {
    std::fprintf(stderr, "tether-supervisor relay: %s\n", std::string(initial.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<int> sock = ConnectInDir(state_dir);
  if (!sock.ok()) {
    std::fprintf(stderr, "tether-supervisor relay: %s\n", std::string(sock.status().message()).c_str());
    std::puts("tether-relay-gone");
    return 1;
  }
  return StartRelay(*sock, state_dir, id, *std::move(initial));
}

int ExchangeMain(const std::string& state_dir, const std::string& id, const std::string& in_offset,
                 const std::string& out_offset, const std::string& data_base85) {
  std::uint64_t in_off = 0, out_off = 0;
  std::string data;
  if (in_offset == "close" && ValidId(id)) {
    absl::StatusOr<int> sock = ConnectInDir(RelayDir(state_dir, id));
    if (!sock.ok()) return 0;
    std::string req(16, '\0');
    for (int i = 0; i < 4; ++i) req.push_back('\xff');
    WriteFull(*sock, req);
    return 0;
  }
  if (!ValidId(id) || !absl::SimpleAtoi(in_offset, &in_off) || !absl::SimpleAtoi(out_offset, &out_off) ||
      !protocol::Base85Decode(data_base85, &data)) {
    std::fprintf(stderr, "tether-supervisor exchange: bad arguments\n");
    return 2;
  }
  absl::StatusOr<int> sock = ConnectInDir(RelayDir(state_dir, id));
  if (!sock.ok()) {
    std::string payload;
    PutU64(&payload, 0);
    PutU64(&payload, 0);
    payload.push_back(static_cast<char>(kExchangeNoRelay));
    PrintReply(payload);
    return 1;
  }
  std::string req;
  PutU64(&req, in_off);
  PutU64(&req, out_off);
  const std::uint32_t len = static_cast<std::uint32_t>(data.size());
  for (int i = 3; i >= 0; --i) req.push_back(static_cast<char>(len >> (8 * i)));
  req += data;
  char head[8];
  if (!WriteFull(*sock, req) || !ReadFull(*sock, head, 8)) return 1;
  const std::uint64_t n = GetU64(head);
  if (n > kMaxExchangeReplyBytes + 64) return 1;
  std::string payload(static_cast<std::size_t>(n), '\0');
  if (!ReadFull(*sock, payload.data(), payload.size())) return 1;
  PrintReply(payload);
  return 0;
}

}  // namespace tether::supervisor
