# Sourced by each emulator's starter (e2b, daytona, modal, kubernetes).
#
#   emulator_modules DIR   makes DIR/node_modules whole (DIR/setup.sh)
#
# Returns 0 once the pinned packages are installed, 77 when they cannot be
# (no npm, no registry). It always goes through setup.sh, never by whether
# node_modules exists: that folder exists, empty, while another test's
# `npm ci` fills it, and ctest -j4 once started the kubernetes emulator
# against such a tree ("Cannot find package .../ws/index.js"). setup.sh
# returns at once on a whole install and waits for one under way.
emulator_modules() {
  bash "$1/setup.sh" >&2 || {
    echo "tests/emulators/setup.sh could not install node_modules" >&2
    return 77
  }
}
