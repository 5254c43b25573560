#!/usr/bin/env bash
# Installs the emulators' pinned npm packages (package-lock.json) into
# tests/emulators/node_modules. Idempotent and safe to run from many tests at
# once: every user of node_modules calls it first, not just when the folder is
# missing, because a folder that exists may be one that another test's
# `npm ci` is still filling (ctest -j4 once started the kubernetes emulator
# against a half-installed tree: "Cannot find package .../ws/index.js").
# An install counts only when node_modules/.tether-installed holds the
# lockfile's sha256: written after `npm ci` returned, removed by the next
# `npm ci` (which empties node_modules first), so a reader that finds it
# finds a whole tree. Installs take turns under a lock.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "setup.sh: node and npm are required" >&2
  exit 77
fi
stamp=node_modules/.tether-installed
want=$(sha256sum package-lock.json | cut -d' ' -f1)
installed() { [[ -f $stamp && $(<"$stamp") == "$want" ]]; }
installed && exit 0
exec 9>"$here/.setup.lock"
flock 9
installed && exit 0
npm ci --no-audit --no-fund
echo "$want" >"$stamp.tmp" && mv "$stamp.tmp" "$stamp"
