#!/usr/bin/env bash
# ctest entry point: run_e2b_test.sh LIBTETHER_C OUT_DIR
# The package's process and lines tests again, through tether.connect("e2b")
# against the E2B emulator (tests/emulators/e2b.mjs, over TLS, judged by the
# official e2b SDK in emulator_sdk.e2b): the Node package over a native
# provider, the real static supervisor uploaded through envd. Exit 77
# (skipped) as run_test.sh, or when the emulator cannot run here.
set -euo pipefail
lib=$1 out=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../../tests/lib/e2b_emulator.sh
source "$here/../../tests/lib/e2b_emulator.sh"
command -v node >/dev/null 2>&1 || { echo "node not found: skipped"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/tmp}/tether-node-e2b-XXXXXX")
e2b_pid=
cleanup() {
  [[ -z $e2b_pid ]] || kill "$e2b_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
rc=0
start_e2b_emulator "$work/emulator" --tls || rc=$?
if ((rc == 77)); then
  echo "skipped: cannot run the E2B emulator here"
  exit 77
fi
((rc == 0)) || exit 1
TETHER_NODE_TEST_PROVIDER=e2b \
  TETHER_NODE_TEST_OPTIONS=$(node -e 'console.log(JSON.stringify({sandbox: process.argv[1], endpoint: process.argv[2], sandboxUrl: process.argv[2], caFile: process.argv[3]}))' "$e2b_sandbox" "$e2b_url" "$e2b_ca") \
  TETHER_NODE_TESTS="process.test.mjs lines.test.mjs" \
  bash "$here/run_test.sh" "$lib" "$out"
# The runs went through envd, not this machine's local provider: every
# start is a Start call the emulator saw (a floor, not an exact count).
starts=$(grep -c 'process.Process/Start' "$work/emulator/requests.log" || true)
echo "the E2B emulator saw $starts process starts"
if ((starts < 30)); then
  echo "FAILED: fewer than 30 process starts reached the E2B emulator" >&2
  exit 1
fi
