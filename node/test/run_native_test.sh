#!/usr/bin/env bash
# ctest entry point: run_native_test.sh PROVIDER LIBTETHER_C OUT_DIR
# The package's process, lines and example tests again, through
# tether.connect(PROVIDER) against that provider's emulator over TLS (each
# judged by the provider's official SDK in emulator_sdk.*): the Node package
# over a native channel, the real static supervisor uploaded through it.
#   e2b      tests/emulators/e2b.mjs: envd's process API (Connect streams)
#   runloop  tests/emulators/runloop.mjs: text-only execute_async, SSE logs
#            and send_std_in, so every byte goes through tether's text tunnel
#   command  no emulator: tether.connect("command", {prefix: "sh -c"}), the
#            binary tunnel through a command channel (the examples already
#            run through one in ctest node, so they are not run again)
# Exit 77 (skipped) as run_test.sh, or when the emulator cannot run here.
set -euo pipefail
provider=$1 lib=$2 out=$3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
command -v node >/dev/null 2>&1 || { echo "node not found: skipped"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/tmp}/tether-node-$provider-XXXXXX")
emulator_pid=
cleanup() {
  [[ -z $emulator_pid ]] || kill "$emulator_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
json() { node -e 'const a = process.argv.slice(1); const o = {}; for (let i = 0; i < a.length; i += 2) if (a[i + 1]) o[a[i]] = a[i + 1]; console.log(JSON.stringify(o))' "$@"; }
rc=0
tests="process.test.mjs lines.test.mjs examples.test.mjs"
start_pattern=
case $provider in
  command)
    options='{"prefix":"sh -c"}'
    tests="process.test.mjs lines.test.mjs"
    ;;
  e2b)
    # shellcheck source=../../tests/lib/e2b_emulator.sh
    source "$here/../../tests/lib/e2b_emulator.sh"
    start_e2b_emulator "$work/emulator" --tls || rc=$?
    emulator_pid=${e2b_pid:-}
    ((rc != 0)) || options=$(json sandbox "$e2b_sandbox" endpoint "$e2b_url" sandboxUrl "$e2b_url" caFile "$e2b_ca")
    # Every start is a Start call to envd.
    start_pattern='process.Process/Start'
    ;;
  runloop)
    # shellcheck source=../../tests/lib/runloop_emulator.sh
    source "$here/../../tests/lib/runloop_emulator.sh"
    start_runloop_emulator "$work/emulator" --tls || rc=$?
    emulator_pid=${runloop_pid:-}
    ((rc != 0)) || options=$(json devbox "$runloop_devbox" endpoint "$runloop_url" caFile "$runloop_ca")
    # Every start is an execute_async of the supervisor's bridge.
    start_pattern='POST /v1/devboxes/[^/]*/execute_async'
    ;;
  *) echo "run_native_test.sh: no emulator for provider $provider" >&2; exit 2 ;;
esac
if ((rc == 77)); then
  echo "skipped: cannot run the $provider emulator here"
  exit 77
fi
((rc == 0)) || exit 1
TETHER_NODE_TEST_PROVIDER=$provider TETHER_NODE_TEST_OPTIONS=$options \
  TETHER_NODE_TESTS=$tests \
  bash "$here/run_test.sh" "$lib" "$out"
# The runs went through the emulator, not this machine's local provider:
# a floor of starts it saw (not an exact count), so a run that fell back to
# the local provider cannot pass. (The command channel has no emulator to
# count with: connect("command") has no fallback to take.)
[[ -n $start_pattern ]] || exit 0
starts=$(grep -c "$start_pattern" "$work/emulator/requests.log" || true)
echo "the $provider emulator saw $starts process starts"
if ((starts < 30)); then
  echo "FAILED: fewer than 30 process starts reached the $provider emulator" >&2
  exit 1
fi
