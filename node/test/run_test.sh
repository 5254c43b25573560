#!/usr/bin/env bash
# ctest entry point: run_test.sh LIBTETHER_C OUT_DIR
# Builds @tether/node's addon against this build's libtether_c with the
# README's command (node/build.sh) into OUT_DIR, then runs the package's
# node:test suite on the local provider with the real static supervisor
# (TETHER_SUPERVISOR_DIR from ctest), in a scratch TMPDIR. Exit 77 (skipped)
# without node >= 20, npm or a C compiler; under CI=true ./dev test fails a
# skip.
set -euo pipefail
lib=$1 out=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
for tool in node npm "${CC:-cc}"; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "$tool not found: skipping the Node package's tests"
    exit 77
  fi
done
major=$(node -p 'process.versions.node.split(".")[0]')
if ((major < 20)); then
  echo "node $(node --version) is older than 20: skipping the Node package's tests"
  exit 77
fi
TETHER_NODE_BUILD_DIR=$out "$here/../build.sh" "$lib"
export TETHER_NODE_ADDON=$out/tether.node
scratch=$(mktemp -d "${TMPDIR:-/tmp}/tether-node-test-XXXXXX")
trap 'rm -rf "$scratch"' EXIT
export TMPDIR=$scratch
cd "$here"
# (TETHER_NODE_TESTS: which files, for run_native_test.sh)
# shellcheck disable=SC2086
node --test ${TETHER_NODE_TESTS:-./*.test.mjs}
