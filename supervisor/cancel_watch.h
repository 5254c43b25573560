// Watches for a launch's cancellation marker ("<state_dir>.cancel",
// launcher.h) for the whole life of its daemon.
//
// A host writes the marker only once it has given up on a start whose
// launch was dispatched (an abort such as Ctrl-C, a setup timeout, an
// answer lost past its resends): from then on no handle to the process
// exists anywhere, so nobody will ever attach to it, read its output or
// terminate it. The daemon checks for the marker before it starts the
// child; this catches a marker that comes after, so that the child the host
// abandoned ends at once instead of running out its lease (issue 32, item
// 5; docs/process-api.md "Aborting a start").
//
// inotify on the state root (IN_CREATE, IN_MOVED_TO: a marker written in
// place or renamed into place) when the kernel gives an instance (a user
// has 128 by default, fewer than a large fan-out's daemons); otherwise a
// poll every kPollInterval. Either way it costs no wake-up while nothing
// happens in the state root (inotify) or one lstat per interval (poll).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace tether::supervisor {

class CancelWatch {
 public:
  static constexpr std::chrono::milliseconds kPollInterval{250};

  // `on_cancel` runs once, on the loop, when the marker of `state_dir`
  // exists; never after Stop().
  CancelWatch(boost::asio::io_context& io, std::string state_dir, std::function<void()> on_cancel);
  ~CancelWatch();
  CancelWatch(const CancelWatch&) = delete;
  CancelWatch& operator=(const CancelWatch&) = delete;

  // Arms the watch; a marker already there fires on the loop at once.
  // `force_poll` skips inotify (tests of the fallback).
  void Start(bool force_poll = false);
  void Stop();
  bool polling() const { return polling_; }

 private:
  void ReadEvents();
  void Poll();
  void Fire();

  boost::asio::io_context& io_;
  std::string state_dir_;
  std::string marker_name_;  // the marker's file name in the state root
  std::function<void()> on_cancel_;
  boost::asio::posix::stream_descriptor inotify_;
  boost::asio::steady_timer poll_timer_;
  std::unique_ptr<char[]> buf_;
  bool polling_ = false;
  bool done_ = false;
};

}  // namespace tether::supervisor
