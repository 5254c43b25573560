#include "supervisor/exchange.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <list>

#include "absl/strings/str_cat.h"
#include "protocol/exchange_format.h"
#include "protocol/status_macros.h"
#include "supervisor/daemonize.h"
#include "supervisor/state_dir.h"

namespace tether::supervisor {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string RelayDir(const std::string& state_dir, const std::string& id) { return state_dir + ".x-" + id; }

void SetNonBlocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

int MsUntil(Clock::time_point t) {
  const auto ms = std::chrono::duration_cast<milliseconds>(t - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(ms, 0, kRelayIdleMs));
}

// One `exchange` poll's connection to the relay.
struct Conn {
  enum class Phase {
    kReading,  // until its request is whole
    kParked,   // waiting (kExchangeWaitMs at most) for daemon output to answer with
    kWriting,  // its reply is going out
  };
  int fd = -1;
  Phase phase = Phase::kReading;
  protocol::RelayRequestDecoder decoder;
  std::string reply;
  std::size_t sent = 0;
  std::uint64_t out_offset = 0;  // kParked: the poll's OUT_OFFSET
  Clock::time_point deadline;    // kReading / kWriting: dropped then; kParked: answered then
};

class Relay {
 public:
  Relay(int daemon, int listen, std::string initial) : daemon_(daemon), listen_(listen), in_(std::move(initial)) {}

  int Run() {
    char buf[64 * 1024];
    while (true) {
      if (closing_) return 0;
      const bool answering = std::any_of(conns_.begin(), conns_.end(),
                                         [](const Conn& c) { return c.phase != Conn::Phase::kReading; });
      if (!answering && daemon_eof_ && out_.empty()) return 0;  // all delivered
      if (!answering && Clock::now() - last_poll_ > milliseconds(kRelayIdleMs)) return 0;

      std::vector<pollfd> p;
      p.push_back({daemon_, 0, 0});
      if (!daemon_eof_ && out_.size() < kRelayBufferBytes) p[0].events |= POLLIN;
      if (!daemon_eof_ && !in_.empty()) p[0].events |= POLLOUT;
      if (p[0].events == 0) p[0].fd = -1;
      p.push_back({listen_, POLLIN, 0});
      Clock::time_point wake = Clock::now() + milliseconds(1000);
      for (const Conn& c : conns_) {
        // A parked poll is only waited on (its deadline); a hangup there
        // would end every poll() at once.
        const short ev = c.phase == Conn::Phase::kReading   ? POLLIN
                         : c.phase == Conn::Phase::kWriting ? POLLOUT
                                                            : 0;
        p.push_back({ev ? c.fd : -1, ev, 0});
        wake = std::min(wake, c.deadline);
      }
      if (::poll(p.data(), p.size(), MsUntil(wake)) < 0 && errno != EINTR) return 1;

      if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
        const ssize_t n = ::read(daemon_, buf, sizeof buf);
        if (n > 0) {
          out_.append(buf, static_cast<std::size_t>(n));
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          daemon_eof_ = true;
        }
      }
      if ((p[0].revents & POLLOUT) && !in_.empty()) {
        const ssize_t n = ::send(daemon_, in_.data(), in_.size(), MSG_NOSIGNAL);
        if (n > 0) in_.erase(0, static_cast<std::size_t>(n));
        if (n < 0 && errno != EAGAIN && errno != EINTR) daemon_eof_ = true;
      }
      // Connections first (their pollfds are in `p` in list order), then new ones.
      std::size_t i = 2;
      for (auto it = conns_.begin(); it != conns_.end(); ++i) {
        it = Serve(it, p[i].revents, buf, sizeof buf);
      }
      if (p[1].revents & POLLIN) AcceptAll();
    }
  }

 private:
  using ConnIt = std::list<Conn>::iterator;

  ConnIt Drop(ConnIt it) {
    ::close(it->fd);
    return conns_.erase(it);
  }

  // One step of a connection; returns the next one.
  ConnIt Serve(ConnIt it, short revents, char* buf, std::size_t size) {
    Conn& c = *it;
    const Clock::time_point now = Clock::now();
    switch (c.phase) {
      case Conn::Phase::kReading: {
        if (revents & (POLLIN | POLLHUP | POLLERR)) {
          const ssize_t n = ::recv(c.fd, buf, size, MSG_DONTWAIT);
          if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return Drop(it);
          if (n > 0) {
            std::string_view in(buf, static_cast<std::size_t>(n));
            protocol::RelayRequest req;
            absl::StatusOr<bool> got = c.decoder.Next(&in, &req);
            // A bad request, or bytes after the request: not an `exchange` of ours.
            if (!got.ok() || (*got && !in.empty())) return Drop(it);
            if (*got) return Handle(it, std::move(req));
          }
        }
        if (now >= c.deadline) return Drop(it);  // a peer that stalls gets no more of our time
        return std::next(it);
      }
      case Conn::Phase::kParked:
        if (out_base_ + out_.size() > c.out_offset || daemon_eof_ || now >= c.deadline) Answer(c);
        return std::next(it);
      case Conn::Phase::kWriting:
        if (revents & (POLLOUT | POLLHUP | POLLERR)) {
          const ssize_t n = ::send(c.fd, c.reply.data() + c.sent, c.reply.size() - c.sent, MSG_NOSIGNAL | MSG_DONTWAIT);
          if (n < 0 && errno != EAGAIN && errno != EINTR) return Drop(it);
          if (n > 0) c.sent += static_cast<std::size_t>(n);
        }
        if (c.sent == c.reply.size() || now >= c.deadline) return Drop(it);
        return std::next(it);
    }
    return std::next(it);
  }

  void AcceptAll() {
    while (true) {
      const int fd = ::accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) return;
      if (conns_.size() >= kMaxRelayConnections) {
        ::close(fd);
        continue;
      }
      Conn& c = conns_.emplace_back();
      c.fd = fd;
      c.deadline = Clock::now() + milliseconds(kRelayPeerTimeoutMs);
    }
  }

  ConnIt Handle(ConnIt it, protocol::RelayRequest req) {
    if (req.close) {
      // The host is done with this relay: let the attachment go (the daemon
      // keeps backpressure for a lease, as for any lost attachment).
      closing_ = true;
      return Drop(it);
    }
    last_poll_ = Clock::now();
    for (Conn& other : conns_) {
      if (other.phase == Conn::Phase::kParked) Answer(other);  // a newer poll supersedes a parked one
    }
    // Input: only what extends what we have (a repeated poll adds nothing).
    const std::uint64_t len = req.data.size();
    if (req.in_offset <= in_received_ && req.in_offset + len > in_received_ && in_.size() < kRelayBufferBytes) {
      in_.append(req.data, static_cast<std::size_t>(in_received_ - req.in_offset), std::string::npos);
      in_received_ = req.in_offset + len;
    }
    // Output below out_offset reached the host.
    if (req.out_offset > out_base_) {
      const auto drop = static_cast<std::size_t>(std::min<std::uint64_t>(req.out_offset - out_base_, out_.size()));
      out_.erase(0, drop);
      out_base_ += drop;
    }
    Conn& c = *it;
    c.phase = Conn::Phase::kParked;
    c.out_offset = req.out_offset;
    c.deadline = Clock::now() + milliseconds(kExchangeWaitMs);
    if (out_base_ + out_.size() > c.out_offset || daemon_eof_ || !in_.empty()) Answer(c);
    return std::next(it);
  }

  // Starts the reply to a parked poll: what the daemon sent from its
  // OUT_OFFSET, at most kMaxExchangeReplyDataBytes (the host asks again for
  // the rest: `from` + the length tell it where it is).
  void Answer(Conn& c) {
    protocol::ExchangeReply r;
    r.in_received = in_received_;
    r.from = std::max(c.out_offset, out_base_);
    r.flags = daemon_eof_ ? protocol::kExchangeDaemonEnded : 0;
    const auto skip = static_cast<std::size_t>(r.from - out_base_);
    if (skip < out_.size()) r.data.assign(out_, skip, protocol::kMaxExchangeReplyDataBytes);
    absl::StatusOr<std::string> payload = protocol::EncodeExchangeReply(r);
    TETHER_CHECK(payload.ok());  // within the cap by construction
    c.reply = protocol::EncodeRelayReply(*payload);
    c.sent = 0;
    c.phase = Conn::Phase::kWriting;
    c.deadline = Clock::now() + milliseconds(kRelayPeerTimeoutMs);
  }

  int daemon_, listen_;
  std::string in_;                 // host bytes not yet written to the daemon
  std::uint64_t in_received_ = 0;  // host bytes accepted (offset)
  std::string out_;                // daemon bytes from out_base_ not yet acknowledged
  std::uint64_t out_base_ = 0;
  bool daemon_eof_ = false;
  bool closing_ = false;
  std::list<Conn> conns_;
  Clock::time_point last_poll_ = Clock::now();
};

// Sends `request` and reads one reply payload, all within `deadline`.
absl::StatusOr<std::string> AskRelay(int fd, std::string_view request, Clock::time_point deadline) {
  SetNonBlocking(fd);
  protocol::RelayReplyDecoder decoder;
  char buf[64 * 1024];
  while (true) {
    pollfd p{fd, static_cast<short>(request.empty() ? POLLIN : POLLOUT), 0};
    const int r = ::poll(&p, 1, MsUntil(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return absl::DeadlineExceededError("the relay did not answer in time");
    if (r < 0) return absl::InternalError(std::strerror(errno));
    if (!request.empty()) {
      const ssize_t n = ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) return absl::UnavailableError("the relay closed the connection");
      request.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    // (after the whole request: the relay read it; a close request is
    // answered this way)
    if (n <= 0) return absl::AbortedError("the relay closed the connection before its reply");
    std::string_view in(buf, static_cast<std::size_t>(n));
    std::string payload;
    ASSIGN_OR_RETURN(bool got, decoder.Next(&in, &payload));
    if (got) return payload;
  }
}

void Print(std::string_view line) {
  while (!line.empty()) {
    const ssize_t n = ::write(1, line.data(), line.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    line.remove_prefix(static_cast<std::size_t>(n));
  }
}

}  // namespace

absl::StatusOr<std::string> TakeInitFile(const std::string& path) {
  if (path.empty() || path[0] != '/') {
    return absl::InvalidArgumentError("expected the absolute path of the host's private frames");
  }
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
  TETHER_CHECK(protocol::ValidRelayId(id));  // the command line was parsed
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
  switch (Daemonize({.keep = {daemon_sock, *listen}})) {
    case Forked::kFailed:
      // No relay runs: nothing of it stays behind.
      ::close(*listen);
      RemovePrivateDir(dir);
      std::fprintf(stderr, "tether-supervisor relay: cannot start the relay: fork failed\n");
      return 1;
    case Forked::kCaller:
      std::puts("tether-relay-ok");
      std::fflush(stdout);
      return 0;
    case Forked::kDaemon:
      break;
  }
  SetNonBlocking(daemon_sock);
  SetNonBlocking(*listen);
  const int rc = Relay(daemon_sock, *listen, std::move(initial)).Run();  // the Hello: before any polled byte
  RemovePrivateDir(dir);
  ::_exit(rc);
}

int RelayMain(const protocol::RelayCommand& cmd) {
  absl::StatusOr<std::string> initial = TakeInitFile(cmd.init_file);
  if (!initial.ok()) {
    std::fprintf(stderr, "tether-supervisor relay: %s\n", std::string(initial.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<int> sock = ConnectInDir(cmd.state_dir);
  if (!sock.ok()) {
    std::fprintf(stderr, "tether-supervisor relay: %s\n", std::string(sock.status().message()).c_str());
    std::puts("tether-relay-gone");
    return 1;
  }
  return StartRelay(*sock, cmd.state_dir, cmd.relay_id, *std::move(initial));
}

int ExchangeCloseMain(const protocol::ExchangeCloseCommand& cmd) {
  // The line goes out only when the relay is known to be ending: it read
  // the request and hung up, or there is none. Without it the host asks
  // again (a close cut on its way must not hold the attachment for a lease).
  absl::StatusOr<int> sock = ConnectInDir(RelayDir(cmd.state_dir, cmd.relay_id));
  if (!sock.ok() && absl::IsNotFound(sock.status())) {
    Print(absl::StrCat(protocol::kRelayClosedLine, "\n"));
    return 0;
  }
  if (!sock.ok()) {
    std::fprintf(stderr, "tether-supervisor exchange: %s\n", std::string(sock.status().message()).c_str());
    return 1;
  }
  protocol::RelayRequest close;
  close.close = true;
  const std::string req = protocol::EncodeRelayRequest(close);
  const absl::Status st = AskRelay(*sock, req, Clock::now() + milliseconds(kExchangeReplyTimeoutMs)).status();
  ::close(*sock);
  if (absl::IsAborted(st)) {
    Print(absl::StrCat(protocol::kRelayClosedLine, "\n"));
    return 0;
  }
  std::fprintf(stderr, "tether-supervisor exchange: close: %s\n",
               st.ok() ? "the relay answered a close request" : std::string(st.message()).c_str());
  return 1;
}

int ExchangeMain(const protocol::ExchangePollCommand& cmd) {
  absl::StatusOr<int> sock = ConnectInDir(RelayDir(cmd.state_dir, cmd.relay_id));
  if (!sock.ok()) {
    protocol::ExchangeReply gone;
    gone.flags = protocol::kExchangeNoRelay;
    Print(protocol::ArmorExchangeReply(*protocol::EncodeExchangeReply(gone)));
    return 1;
  }
  const std::string req = protocol::EncodeRelayRequest(
      {.in_offset = cmd.in_offset, .out_offset = cmd.out_offset, .data = cmd.data});
  absl::StatusOr<std::string> payload = AskRelay(*sock, req, Clock::now() + milliseconds(kExchangeReplyTimeoutMs));
  ::close(*sock);
  if (payload.ok()) {
    // Only a well-formed reply goes out; the host repeats a poll without one.
    if (absl::Status st = protocol::DecodeExchangeReply(*payload).status(); !st.ok()) payload = st;
  }
  if (!payload.ok()) {
    std::fprintf(stderr, "tether-supervisor exchange: %s\n", std::string(payload.status().message()).c_str());
    return 1;
  }
  Print(protocol::ArmorExchangeReply(*payload));
  return 0;
}

}  // namespace tether::supervisor
