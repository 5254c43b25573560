// tether-supervisor: launch | bridge DIR | --version. See launcher.h, bridge.h.
#include <cstdio>
#include <string>
#include <vector>

#include "supervisor/bridge.h"
#include "supervisor/exchange.h"
#include "supervisor/launcher.h"
#include "supervisor/proc_scrub.h"
#include "tether/protocol/version.h"

extern char** environ;

int main(int argc, char** argv) {
  using namespace tether::supervisor;
  // First of all: copy the arguments and the environment, then erase them
  // from what /proc shows of us (proc_scrub.h). Only the launch call keeps a
  // copy of the environment, to build the child's from it.
  char** const envp = environ;  // as the kernel laid it out: nothing has changed it yet
  const std::vector<std::string> args(argv, argv + argc);
  std::vector<std::string> ambient = CopyEnvironment(envp);
  ScrubProcessStrings(argc, argv, /*keep_args=*/2, envp);
  const std::string mode = argc >= 2 ? args[1] : "";
  if (mode != "launch") EraseStrings(&ambient);

  if (argc == 2 && (mode == "--version" || mode == "version")) {
    std::printf("tether-supervisor %s (protocol %u)\n", tether::kTetherVersion, tether::kProtocolVersion);
    return 0;
  }
  // Exchange mode (exchange.h): one-shot commands only.
  if (argc == 5 && mode == "launch" && args[2] == "--exchange") {
    return LaunchExchangeMain(args[3], args[4], std::move(ambient));
  }
  if (argc == 5 && mode == "relay") return RelayMain(args[2], args[3], args[4]);
  if ((argc == 6 || argc == 7) && mode == "exchange") {
    return ExchangeMain(args[2], args[3], args[4], args[5], argc == 7 ? args[6] : "");
  }
  // --direct: start the daemon and exit; the host connects to its socket
  // itself (it shares this machine: the local provider).
  if (argc == 3 && mode == "launch" && args[2] == "--direct") return LaunchDirectMain(std::move(ambient));
  // --text: the channel carries armored lines (duplex-text tunnel mode).
  const bool text = argc >= 3 && args[2] == "--text";
  if (argc == 2 + text && mode == "launch") return LaunchMain(text, std::move(ambient));
  if (argc == 3 + text && mode == "bridge") return BridgeMain(args[2 + text], text);
  std::fprintf(stderr,
               "usage: tether-supervisor launch [--text|--direct]  (reads a Launch frame on stdin)\n"
               "       tether-supervisor bridge [--text] STATE_DIR\n"
               "       tether-supervisor launch --exchange RELAY_ID @LAUNCH_FILE\n"
               "       tether-supervisor relay STATE_DIR RELAY_ID @HELLO_FILE\n"
               "       tether-supervisor exchange STATE_DIR RELAY_ID IN_OFFSET OUT_OFFSET [BASE85]\n"
               "       tether-supervisor --version\n");
  return 2;
}
