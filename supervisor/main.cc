// tether-supervisor: launch | bridge DIR | --version. See launcher.h, bridge.h.
#include <cstdio>
#include <cstring>

#include "supervisor/bridge.h"
#include "supervisor/exchange.h"
#include "supervisor/launcher.h"
#include "tether/protocol/version.h"

int main(int argc, char** argv) {
  if (argc == 2 && (std::strcmp(argv[1], "--version") == 0 || std::strcmp(argv[1], "version") == 0)) {
    std::printf("tether-supervisor %s (protocol %u)\n", tether::kTetherVersion, tether::kProtocolVersion);
    return 0;
  }
  // Exchange mode (exchange.h): one-shot commands only.
  if (argc == 5 && std::strcmp(argv[1], "launch") == 0 && std::strcmp(argv[2], "--exchange") == 0) {
    return tether::supervisor::LaunchExchangeMain(argv[3], argv[4]);
  }
  if (argc == 5 && std::strcmp(argv[1], "relay") == 0) {
    return tether::supervisor::RelayMain(argv[2], argv[3], argv[4]);
  }
  if ((argc == 6 || argc == 7) && std::strcmp(argv[1], "exchange") == 0) {
    return tether::supervisor::ExchangeMain(argv[2], argv[3], argv[4], argv[5], argc == 7 ? argv[6] : "");
  }
  // --direct: start the daemon and exit; the host connects to its socket
  // itself (it shares this machine: the local provider).
  if (argc == 3 && std::strcmp(argv[1], "launch") == 0 && std::strcmp(argv[2], "--direct") == 0) {
    return tether::supervisor::LaunchDirectMain();
  }
  // --text: the channel carries armored lines (duplex-text tunnel mode).
  const bool text = argc >= 3 && std::strcmp(argv[2], "--text") == 0;
  if (argc == 2 + text && std::strcmp(argv[1], "launch") == 0) return tether::supervisor::LaunchMain(text);
  if (argc == 3 + text && std::strcmp(argv[1], "bridge") == 0) {
    return tether::supervisor::BridgeMain(argv[2 + text], text);
  }
  std::fprintf(stderr,
               "usage: tether-supervisor launch [--text|--direct]  (reads a Launch frame on stdin)\n"
               "       tether-supervisor bridge [--text] STATE_DIR\n"
               "       tether-supervisor launch --exchange RELAY_ID @LAUNCH_FILE\n"
               "       tether-supervisor relay STATE_DIR RELAY_ID @HELLO_FILE\n"
               "       tether-supervisor exchange STATE_DIR RELAY_ID IN_OFFSET OUT_OFFSET [BASE85]\n"
               "       tether-supervisor --version\n");
  return 2;
}
