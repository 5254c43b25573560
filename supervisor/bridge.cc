#include "supervisor/bridge.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <limits.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "protocol/armor.h"
#include "protocol/envelope.h"
#include "supervisor/state_dir.h"

namespace tether::supervisor {
namespace {

void SetNonBlocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

// Bytes a write to pipe `fd` can add without blocking; PIPE_BUF when unknown
// (not a pipe) or when the pipe is nearly full (poll said it is writable).
std::size_t PipeSpace(int fd) {
  const int size = ::fcntl(fd, F_GETPIPE_SZ);
  int unread = 0;
  if (size <= 0 || ::ioctl(fd, FIONREAD, &unread) != 0 || unread < 0 || unread >= size) return PIPE_BUF;
  // Pipe pages are not shared between writes that do not fill them: keep a
  // page of slack so that the estimate errs on the safe side.
  static const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t free = static_cast<std::size_t>(size - unread);
  return free > 2 * page ? free - page : PIPE_BUF;
}

// A bounded byte queue in one buffer allocated (and zeroed) once: bytes live
// in [head, tail). Reads go straight into the free end, partial writes only
// move the head, and the live bytes move to the front only when the end is
// reached. Text mode may append a frame bigger than the bound; the buffer then
// grows for it.
struct Pipe {
  std::string buf = std::string(kBridgeBufferBytes, '\0');
  std::size_t head = 0, tail = 0;
  std::size_t size() const { return tail - head; }
  bool empty() const { return size() == 0; }
  std::size_t space() const { return kBridgeBufferBytes > size() ? kBridgeBufferBytes - size() : 0; }
  void Compact() {
    if (head == 0) return;
    std::memmove(buf.data(), buf.data() + head, size());
    tail -= head;
    head = 0;
  }
  void Clear() { head = tail = 0; }
  void Append(std::string_view bytes) {
    if (buf.size() - tail < bytes.size()) Compact();
    if (buf.size() - tail < bytes.size()) buf.resize(tail + bytes.size());
    std::memcpy(buf.data() + tail, bytes.data(), bytes.size());
    tail += bytes.size();
  }
  // Reads up to space() bytes from fd. Returns read's result.
  ssize_t Fill(int fd) {
    if (empty()) Clear();
    if (buf.size() - tail < space()) Compact();
    const ssize_t n = ::read(fd, buf.data() + tail, std::min(space(), buf.size() - tail));
    if (n > 0) tail += static_cast<std::size_t>(n);
    return n;
  }
  // Called after poll() said `fd` is writable. A socket takes a
  // non-blocking send. A pipe gets what its free space holds (its size less
  // the unread bytes), at least PIPE_BUF, which a writable pipe takes
  // without blocking; 4 KiB writes cost ssh channels half their throughput.
  // (Our stdio is never made O_NONBLOCK: it may be shared with other
  // processes of the channel, e.g. a filter in a shell pipeline, and the
  // flag belongs to the shared file description.)
  ssize_t Drain(int fd, bool socket) {
    const ssize_t n = socket ? ::send(fd, buf.data() + head, size(), MSG_NOSIGNAL | MSG_DONTWAIT)
                             : ::write(fd, buf.data() + head, std::min(size(), PipeSpace(fd)));
    if (n > 0) head += static_cast<std::size_t>(n);
    if (empty()) Clear();
    return n;
  }
};

bool Transient(ssize_t n) { return n < 0 && (errno == EAGAIN || errno == EINTR); }

}  // namespace

void WriteFrameToHost(std::string_view frame, bool text) {
  const std::string out = text ? protocol::ArmorLine(frame, protocol::ArmorDirection::kToHost) : std::string(frame);
  for (std::size_t off = 0; off < out.size();) {
    const ssize_t n = ::write(1, out.data() + off, out.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<std::size_t>(n);
  }
}

int RunBridge(int sock, std::string upstream, bool text) {
  ::signal(SIGPIPE, SIG_IGN);
  // stdin and stdout stay blocking (see Pipe::Drain); only our own socket to
  // the daemon is non-blocking.
  SetNonBlocking(sock);
  struct stat out_st {};
  const bool stdout_socket = ::fstat(1, &out_st) == 0 && S_ISSOCK(out_st.st_mode);
  Pipe up, down;
  // Text mode: armored lines in from the host, frames re-armored out to it.
  protocol::ArmorDecoder armor_in(protocol::ArmorDirection::kToSupervisor);
  protocol::FrameSplitter frames_out;
  std::string scratch, scratch_line;
  // A damaged frame line from the host (our marker, bad checksum) means a
  // lost frame: nothing after it is forwarded, and the host side is treated
  // as ended, so the daemon sees the attachment go and the host reattaches
  // from acknowledged offsets instead of waiting on a hole.
  bool damaged = false;
  const auto decode_into_up = [&](std::string_view in) {
    std::string frame;
    while (!damaged) {
      const absl::StatusOr<protocol::DecodeResult> r = armor_in.Next(&in, &frame);
      damaged = !r.ok();
      if (damaged || *r == protocol::DecodeResult::kNeedMore) break;
      up.Append(frame);
    }
  };
  if (text) {
    decode_into_up(upstream);
  } else {
    up.Append(upstream);
  }
  bool in_eof = damaged, sock_eof = false, shut_wr = false;
  // Binary mode with a pipe for stdout (ssh, docker exec, kubectl exec):
  // output moves from the daemon's socket to the pipe inside the kernel
  // (splice), a copy and two system calls less per chunk than through our
  // buffer. The pipe side is non-blocking per call (SPLICE_F_NONBLOCK), so
  // the shared file description's flags stay untouched.
  bool splice_out = !text && S_ISFIFO(out_st.st_mode);
  bool pipe_full = false;  // the last splice found the pipe full: wait for POLLOUT
  while (true) {
    if (in_eof && up.empty() && !shut_wr) {
      ::shutdown(sock, SHUT_WR);  // host gone: the daemon ends this attachment
      shut_wr = true;
    }
    if (sock_eof && down.empty()) return 0;
    const bool splicing = splice_out && down.empty();
    pollfd p[3] = {{0, 0, 0}, {1, 0, 0}, {sock, 0, 0}};
    if (!in_eof && up.space() > 0) p[0].events |= POLLIN;
    if (!down.empty() || (splicing && pipe_full)) p[1].events |= POLLOUT;
    if (!sock_eof && down.space() > 0 && !(splicing && pipe_full)) p[2].events |= POLLIN;
    if (!up.empty() && !shut_wr) p[2].events |= POLLOUT;
    // An fd with nothing to wait for stays out: its POLLHUP or POLLERR would
    // end every poll at once (a busy loop while a slow host drains stdout).
    for (pollfd& q : p) {
      if (q.events == 0) q.fd = -1;
    }
    if (::poll(p, 3, -1) < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    if (p[0].revents && (p[0].events & POLLIN)) {
      ssize_t n;
      if (text) {
        scratch.resize(64 * 1024);
        n = ::read(0, scratch.data(), scratch.size());
        if (n > 0) decode_into_up(std::string_view(scratch.data(), static_cast<std::size_t>(n)));
      } else {
        n = up.Fill(0);
      }
      if (n == 0 || (n < 0 && !Transient(n)) || damaged) in_eof = true;
    }
    if (splicing && pipe_full && (p[1].revents & (POLLOUT | POLLERR | POLLHUP))) pipe_full = false;
    if (p[2].revents & (POLLIN | POLLHUP | POLLERR)) {
      if (p[2].events & POLLIN) {
        ssize_t n;
        if (splicing) {
          n = ::splice(sock, nullptr, 1, nullptr, kBridgeBufferBytes, SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
          if (n < 0 && errno == EAGAIN) {
            int unread = 0;  // data waiting in the socket: it was the pipe that was full
            if (::ioctl(sock, FIONREAD, &unread) == 0 && unread > 0) pipe_full = true;
          } else if (n < 0 && (errno == EINVAL || errno == ENOSYS)) {
            splice_out = false;  // not supported here: the buffered way from now on
            n = down.Fill(sock);
          } else if (n < 0 && errno == EPIPE) {
            return 1;  // the host's side is gone
          }
        } else if (text) {
          scratch.resize(64 * 1024);
          n = ::read(sock, scratch.data(), scratch.size());
          if (n > 0) {
            std::string_view in(scratch.data(), static_cast<std::size_t>(n));
            std::string frame;
            while (true) {
              absl::StatusOr<protocol::DecodeResult> r = frames_out.Next(&in, &frame);
              if (!r.ok()) return 1;  // the daemon never sends a bad frame
              if (*r == protocol::DecodeResult::kNeedMore) break;
              scratch_line.clear();
              protocol::AppendArmoredLine(frame, protocol::ArmorDirection::kToHost, &scratch_line);
              down.Append(scratch_line);
            }
          }
        } else {
          n = down.Fill(sock);
        }
        if (n == 0 || (n < 0 && !Transient(n))) sock_eof = true;
      }
    }
    if ((p[2].revents & POLLOUT) && !up.empty()) {
      const ssize_t n = up.Drain(sock, true);
      if (n < 0 && !Transient(n)) {
        up.Clear();  // the daemon went away; keep draining its last frames
        shut_wr = true;
      }
    }
    if ((p[1].revents & (POLLOUT | POLLERR | POLLHUP)) && !down.empty()) {
      const ssize_t n = down.Drain(1, stdout_socket);
      if (n < 0 && !Transient(n)) return 1;  // the host's side is gone
    }
  }
}

int BridgeMain(const protocol::BridgeCommand& cmd) {
  const bool text = cmd.text;
  absl::StatusOr<int> sock = ConnectInDir(cmd.state_dir);
  if (!sock.ok()) {
    wire::Envelope env;
    env.mutable_error()->set_code(absl::IsNotFound(sock.status()) ? wire::ERROR_NOT_FOUND
                                                                  : wire::ERROR_UNAUTHENTICATED);
    env.mutable_error()->set_message(std::string(sock.status().message()));
    env.mutable_error()->set_fatal(true);
    WriteFrameToHost(protocol::EncodeEnvelope(env), text);
    std::fprintf(stderr, "tether-supervisor bridge: %s\n", std::string(sock.status().message()).c_str());
    return 1;
  }
  return RunBridge(*sock, {}, text);
}

}  // namespace tether::supervisor
