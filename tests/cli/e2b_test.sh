#!/usr/bin/env bash
# End-to-end checks of `tether run --provider e2b` against the E2B emulator
# (tests/emulators/e2b.mjs, over TLS): exact bytes, exit statuses, clear
# errors for a wrong API key (which never appears in them), an unknown
# sandbox and an access token envd keeps refusing, and an old envd (0.5.1: no CloseStdin, multipart uploads).
#
#   tests/cli/e2b_test.sh path/to/tether
#
# Exits 77 (skipped) when the emulator cannot run here (no node or no
# tests/emulators/node_modules).
set -euo pipefail

here=$(dirname "${BASH_SOURCE[0]}")
# shellcheck source=../lib/cli_provider.sh
source "$here/../lib/cli_provider.sh"
# shellcheck source=../lib/e2b_emulator.sh
source "$here/../lib/e2b_emulator.sh"
cli_provider_init e2b "$@"

start() {  # start NAME [EMULATOR ARGS...]: sets FLAGS for `tether run`
  local name=$1
  shift
  cli_provider_start e2b E2B "$WORK/$name" --tls "$@"
}

# The bytes 0..255, and checks of one emulator.
all_bytes "$WORK/all.bin" 3
basic_checks() {  # basic_checks LABEL
  local label=$1
  STDIN=$WORK/all.bin
  run "$label-cat" run "${FLAGS[@]}" -- cat
  STDIN=/dev/null
  same_file "$label: every byte value comes back through cat" "$WORK/$label-cat.out" "$WORK/all.bin"
  expect_status "$label: cat exits 0" 0 "$label-cat"
  exit_checks "$label-exit" "$label"
}

start current
basic_checks envd-current

# A wrong API key: a clear error that does not repeat the key.
expect_key_refused E2B_API_KEY
# No API key at all.
expect_key_named "API key" E2B_API_KEY

# An unknown sandbox.
expect_not_found nosandbox "an unknown sandbox is reported as not found" "$e2b_sandbox" no-such-sandbox-42

# envd refusing its access token: a rotation under one call is refreshed
# through the control plane (conformance.e2b-faults, chaos.e2b); one that
# refuses every token it is given is a clear error after a bounded number
# of refreshes, without the token in it.
start rotating --faults seed=1,rotate=1
run rotating run "${FLAGS[@]}" -- true
connects=$(grep -c 'POST /v2/sandboxes/.*/connect' "$WORK/rotating/requests.log" || true)
rotations=$(grep -c 'FAULT rotate' "$WORK/rotating/requests.log" || true)
if [[ $STATUS -ne 0 ]] && grep -q 'envd refused its access token' "$WORK/rotating.err" &&
   ! grep -q 'envd_' "$WORK/rotating.err" && ((connects >= 2 && connects <= 8)); then
  pass "an access token envd always refuses: a clear error after $connects connects ($rotations refused)"
else
  fail "an access token envd always refuses is a clear error after a few refreshes" \
    "status $STATUS, $connects connects, $rotations rotations" "stderr: $(head -c 500 "$WORK/rotating.err")"
fi

# An old envd: no CloseStdin, uploads as multipart.
start old --envd-version 0.5.1
basic_checks envd-0.5.1

echo "$((CHECKS - FAILED))/$CHECKS checks passed"
[[ $FAILED -eq 0 ]]
