// CancelWatch (supervisor/cancel_watch.h): a launch's cancellation marker
// fires the callback once however it appears (written in place, renamed
// into place, already there), through inotify and through the poll that
// stands in when the kernel gives no inotify instance; another launch's
// marker, other files and a stopped watch fire nothing.
#include "supervisor/cancel_watch.h"

#include <stdio.h>
#include <sys/stat.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include <doctest.h>

#include "supervisor/launcher.h"
#include "tests/supervisor/test_util.h"

namespace tether::supervisor {
namespace {

namespace asio = boost::asio;
using std::chrono::milliseconds;

void Touch(const std::string& path) { std::ofstream f(path); }

// Runs the watch's loop until it fired or `limit` passed.
struct Run {
  asio::io_context io;
  int fired = 0;
  void For(milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!fired && std::chrono::steady_clock::now() < deadline) {
      if (io.run_one_for(milliseconds(20)) == 0 && io.stopped()) {
        io.restart();  // (no work: a stopped watch)
        std::this_thread::sleep_for(milliseconds(20));
      }
    }
  }
};

TEST_CASE("a cancellation marker fires the watch once, whether inotify or the poll sees it") {
  for (const bool poll : {false, true}) {
    for (const bool rename_in : {false, true}) {
      CAPTURE(poll);
      CAPTURE(rename_in);
      testing::TempDir tmp;
      const std::string root = tmp / "run";
      REQUIRE(::mkdir(root.c_str(), 0700) == 0);
      const std::string dir = root + "/launch-1";
      Run r;
      CancelWatch w(r.io, dir, [&] { ++r.fired; });
      w.Start(poll);
      CHECK(w.polling() == poll);
      // Neither another launch's marker nor a file of this launch's name
      // fires it.
      Touch(root + "/launch-2.cancel");
      Touch(root + "/launch-1.cancelled");
      REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
      r.For(milliseconds(3 * CancelWatch::kPollInterval.count()));
      CHECK(r.fired == 0);
      if (rename_in) {
        Touch(root + "/.tmp-marker");
        REQUIRE(::rename((root + "/.tmp-marker").c_str(), CancelMarkerPath(dir).c_str()) == 0);
      } else {
        Touch(CancelMarkerPath(dir));
      }
      r.For(milliseconds(10000));
      CHECK(r.fired == 1);
      // Once: more events change nothing.
      ::unlink(CancelMarkerPath(dir).c_str());
      Touch(CancelMarkerPath(dir));
      r.For(milliseconds(3 * CancelWatch::kPollInterval.count()));
      CHECK(r.fired == 1);
    }
  }
}

TEST_CASE("a marker already there when the watch starts fires it; a stopped watch never fires") {
  testing::TempDir tmp;
  const std::string root = tmp / "run";
  REQUIRE(::mkdir(root.c_str(), 0700) == 0);
  const std::string dir = root + "/launch-1";
  Touch(CancelMarkerPath(dir));
  {
    Run r;
    CancelWatch w(r.io, dir, [&] { ++r.fired; });
    w.Start();
    r.For(milliseconds(10000));
    CHECK(r.fired == 1);
  }
  for (const bool poll : {false, true}) {
    CAPTURE(poll);
    const std::string other = root + (poll ? "/launch-3" : "/launch-2");
    Run r;
    CancelWatch w(r.io, other, [&] { ++r.fired; });
    w.Start(poll);
    w.Stop();
    Touch(CancelMarkerPath(other));
    r.For(milliseconds(3 * CancelWatch::kPollInterval.count()));
    CHECK(r.fired == 0);
  }
}

}  // namespace
}  // namespace tether::supervisor
