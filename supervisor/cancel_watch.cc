#include "supervisor/cancel_watch.h"

#include <limits.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <cstring>

#include "supervisor/launcher.h"

namespace tether::supervisor {

namespace asio = boost::asio;

namespace {
// Room for many events at once (each at most its header and a NAME_MAX name).
constexpr std::size_t kEventBufferBytes = 16 * (sizeof(struct inotify_event) + NAME_MAX + 1);
}  // namespace

CancelWatch::CancelWatch(asio::io_context& io, std::string state_dir, std::function<void()> on_cancel)
    : io_(io),
      state_dir_(std::move(state_dir)),
      on_cancel_(std::move(on_cancel)),
      inotify_(io),
      poll_timer_(io) {
  const std::string marker = CancelMarkerPath(state_dir_);
  marker_name_ = marker.substr(marker.rfind('/') + 1);
}

CancelWatch::~CancelWatch() { Stop(); }

void CancelWatch::Start(bool force_poll) {
  const std::size_t slash = state_dir_.rfind('/');
  const std::string root = slash == std::string::npos ? "." : state_dir_.substr(0, slash);
  const int fd = force_poll ? -1 : ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd >= 0 && ::inotify_add_watch(fd, root.c_str(), IN_CREATE | IN_MOVED_TO | IN_ONLYDIR) >= 0) {
    inotify_.assign(fd);
    buf_ = std::make_unique<char[]>(kEventBufferBytes);
    ReadEvents();
  } else {
    if (fd >= 0) ::close(fd);
    polling_ = true;
    Poll();
  }
  // A marker written before the watch was armed (after the daemon's own
  // check before it started the child) produces no event: look once.
  if (LaunchCancelled(state_dir_)) asio::post(io_, [this] { Fire(); });
}

void CancelWatch::Stop() {
  done_ = true;
  boost::system::error_code ec;
  inotify_.close(ec);
  poll_timer_.cancel();
}

void CancelWatch::ReadEvents() {
  inotify_.async_read_some(asio::buffer(buf_.get(), kEventBufferBytes),
                           [this](boost::system::error_code ec, std::size_t n) {
                             if (done_ || ec == asio::error::operation_aborted) return;
                             if (ec) {
                               // (an overflow or a lost descriptor: poll instead)
                               boost::system::error_code ignored;
                               inotify_.close(ignored);
                               polling_ = true;
                               return Poll();
                             }
                             for (std::size_t at = 0; at + sizeof(struct inotify_event) <= n;) {
                               struct inotify_event ev;
                               std::memcpy(&ev, buf_.get() + at, sizeof ev);
                               const char* name = buf_.get() + at + sizeof ev;
                               // (events lost to an overflow may have been the marker's)
                               const bool ours = ev.len > 0 && marker_name_ == name;
                               if ((ours || (ev.mask & IN_Q_OVERFLOW)) && LaunchCancelled(state_dir_)) {
                                 return Fire();
                               }
                               at += sizeof ev + ev.len;
                             }
                             ReadEvents();
                           });
}

void CancelWatch::Poll() {
  poll_timer_.expires_after(kPollInterval);
  poll_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || done_) return;
    if (LaunchCancelled(state_dir_)) return Fire();
    Poll();
  });
}

void CancelWatch::Fire() {
  if (done_) return;
  Stop();
  on_cancel_();
}

}  // namespace tether::supervisor
