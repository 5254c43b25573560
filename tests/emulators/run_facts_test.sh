#!/usr/bin/env bash
# ctest entry point: run_facts_test.sh TEST_FILE.mjs
# Runs a node:test file that needs no node modules (an emulator's own facts).
# Exit 77 (skipped) when node >= 20 is not available.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if ! command -v node >/dev/null 2>&1; then
  echo "node not found: skipping $1"
  exit 77
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if ((major < 20)); then
  echo "node $(node --version) is older than 20: skipping $1"
  exit 77
fi
exec node --test "$here/$1"
