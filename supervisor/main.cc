// tether-supervisor: launch | bridge DIR | --version. See launcher.h, bridge.h.
#include <cstdio>
#include <cstring>

#include "supervisor/bridge.h"
#include "supervisor/launcher.h"
#include "tether/protocol/version.h"

int main(int argc, char** argv) {
  if (argc == 2 && (std::strcmp(argv[1], "--version") == 0 || std::strcmp(argv[1], "version") == 0)) {
    std::printf("tether-supervisor %s (protocol %u)\n", tether::kTetherVersion, tether::kProtocolVersion);
    return 0;
  }
  // --text: the channel carries armored lines (duplex-text tunnel mode).
  const bool text = argc >= 3 && std::strcmp(argv[2], "--text") == 0;
  if (argc == 2 + text && std::strcmp(argv[1], "launch") == 0) return tether::supervisor::LaunchMain(text);
  if (argc == 3 + text && std::strcmp(argv[1], "bridge") == 0) {
    return tether::supervisor::BridgeMain(argv[2 + text], text);
  }
  std::fprintf(stderr,
               "usage: tether-supervisor launch [--text]           (reads a Launch frame on stdin)\n"
               "       tether-supervisor bridge [--text] STATE_DIR\n"
               "       tether-supervisor --version\n");
  return 2;
}
