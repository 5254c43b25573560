#!/usr/bin/env bash
# ctest entry point: run_sdk_test.sh TEST_FILE.mjs
# Installs the pinned SDKs when needed (setup.sh), then runs the node:test
# file. Exit 77 (skipped) when node >= 20 or npm is not available.
set -uo pipefail
src="${BASH_SOURCE[0]}"
[[ "$src" == */* ]] || src="./$src"
here="$(cd "${src%/*}" && pwd)"
if ! command -v node >/dev/null 2>&1; then
  echo "node not found: skipping the emulator SDK test"
  exit 77
fi
major="$(node -p 'process.versions.node.split(".")[0]')"
if (( major < 20 )); then
  echo "node $(node --version) is older than 20: skipping the emulator SDK test"
  exit 77
fi
"$here/setup.sh" || exit $?
exec node --test "$here/$1"
