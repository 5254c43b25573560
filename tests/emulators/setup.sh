#!/usr/bin/env bash
# Installs the emulators' pinned npm packages (package-lock.json) into
# tests/emulators/node_modules, only when that folder is missing or older than
# the lockfile. Idempotent; safe to run before every test.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "setup.sh: node and npm are required" >&2
  exit 77
fi
stamp="node_modules/.package-lock.json"
if [[ -d node_modules && -f "$stamp" && ! "$stamp" -ot package-lock.json ]]; then
  exit 0
fi
# One installer at a time (ctest may start both emulator tests together).
exec 9>"$here/.setup.lock"
flock 9
if [[ -d node_modules && -f "$stamp" && ! "$stamp" -ot package-lock.json ]]; then
  exit 0
fi
npm ci --no-audit --no-fund
touch "$stamp"
