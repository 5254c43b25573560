#!/usr/bin/env bash
# ctest entry point: run_test.sh LIBTETHER_C OUT_DIR
# Builds @tether/node's addon against this build's libtether_c (node/build.sh)
# into OUT_DIR, installs this integration's own dependencies (@mastra/core,
# pinned in package-lock.json) once per lockfile, as node/build.sh does for
# node/, then runs its node:test suite on the local provider with the real
# static supervisor (TETHER_SUPERVISOR_DIR from ctest), in a scratch TMPDIR.
# Exit 77 (skipped) without node >= 20, npm or a C compiler; under CI=true
# ./dev test fails a skip.
set -euo pipefail
lib=$1 out=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
pkg=$(cd "$here/.." && pwd)
for tool in node npm "${CC:-cc}"; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "$tool not found: skipping the Mastra integration's tests"
    exit 77
  fi
done
major=$(node -p 'process.versions.node.split(".")[0]')
if ((major < 20)); then
  echo "node $(node --version) is older than 20: skipping the Mastra integration's tests"
  exit 77
fi
TETHER_NODE_BUILD_DIR=$out "$pkg/../../build.sh" "$lib"
export TETHER_NODE_ADDON=$out/tether.node
# @mastra/core and what it pulls in (152 packages, 133 MB), once per lockfile.
cd "$pkg"
stamp=node_modules/.tether-installed
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if ! [[ -f $stamp && $(<"$stamp") == "$want" ]]; then
  exec 9>"$pkg/.setup.lock"
  flock 9
  if ! [[ -f $stamp && $(<"$stamp") == "$want" ]]; then
    npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
    echo "$want" >"$stamp.tmp" && mv "$stamp.tmp" "$stamp"
  fi
  exec 9>&-
fi
scratch=$(mktemp -d "${TMPDIR:-/tmp}/tether-mastra-test-XXXXXX")
trap 'rm -rf "$scratch"' EXIT
export TMPDIR=$scratch
cd "$here"
node --test ./*.test.mjs
