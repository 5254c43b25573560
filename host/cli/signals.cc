#include "host/cli/signals.h"

#include <sys/ioctl.h>

#include "host/cli/commands.h"

namespace tether::cli {

sigset_t JobSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  return set;
}

void BlockJobSignals() {
  const sigset_t set = JobSignals();
  ::sigprocmask(SIG_BLOCK, &set, nullptr);
}

// Our own terminal's size, if stdin or stdout is one.
std::optional<std::pair<unsigned, unsigned>> OwnTerminalSize() {
  struct winsize ws {};
  for (int fd : {0, 1, 2}) {
    if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
      return std::make_pair(static_cast<unsigned>(ws.ws_col), static_cast<unsigned>(ws.ws_row));
    }
  }
  return std::nullopt;
}

}  // namespace tether::cli
