#!/usr/bin/env bash
# End-to-end checks of `tether run --provider e2b` against the E2B emulator
# (tests/emulators/e2b.mjs, over TLS): exact bytes, exit statuses, clear
# errors for a wrong API key (which never appears in them) and an unknown
# sandbox, and an old envd (0.5.1: no CloseStdin, multipart uploads).
#
#   tests/cli/e2b_test.sh path/to/tether
#
# Exits 77 (skipped) when the emulator cannot run here (no node or no
# tests/emulators/node_modules).
set -euo pipefail

if [[ $# -ne 1 || ! -x $1 ]]; then
  echo "usage: $0 PATH_TO_TETHER" >&2
  exit 2
fi
TETHER=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tether-e2b-test.XXXXXX")
emulators=()

# Processes started from this run's directories (the emulators' sandbox
# processes, the supervisors' daemons among them).
our_pids() {
  local d argv
  for d in /proc/[0-9]*; do
    argv=$( { tr '\0' ' ' <"$d/cmdline"; } 2>/dev/null || true)
    [[ $argv == *"$WORK/"* ]] && echo "${d#/proc/}"
  done
}
cleanup() {
  set +e # (a failing step of the cleanup never changes the exit status)
  local p
  for p in "${emulators[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  sleep 0.3
  for p in $(our_pids); do [[ $p == "$$" ]] || kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

# shellcheck source=../lib/checks.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/checks.sh"
# shellcheck source=../lib/e2b_emulator.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/e2b_emulator.sh"

# run NAME [ARGS...]: `tether ARGS...` with stdin from $STDIN, stdout to
# $WORK/NAME.out, stderr to $WORK/NAME.err; sets STATUS. Time-limited.
STDIN=/dev/null
run() {
  local name=$1
  shift
  STATUS=0
  timeout -k 5 120 "$TETHER" "$@" <"$STDIN" >"$WORK/$name.out" 2>"$WORK/$name.err" || STATUS=$?
}
expect_status() {  # expect_status NAME WANT RUN
  if [[ $STATUS -eq $2 ]]; then
    pass "$1"
  else
    fail "$1" "exit status $STATUS, want $2" "stderr: $(head -c 500 "$WORK/$3.err" 2>/dev/null || true)"
  fi
}
same_file() {  # same_file NAME GOT WANT
  if cmp -s "$2" "$3"; then
    pass "$1"
  else
    fail "$1" "got:  $(od -An -c "$2" | head -c 300)" "want: $(od -An -c "$3" | head -c 300)"
  fi
}

start() {  # start NAME [EMULATOR ARGS...]: sets FLAGS for `tether run`
  local name=$1 rc=0
  shift
  start_e2b_emulator "$WORK/$name" --tls "$@" || rc=$?
  [[ -z ${e2b_pid:-} ]] || emulators+=("$e2b_pid")
  if [[ $rc -eq 77 ]]; then
    echo "skipped: cannot run the E2B emulator here"
    exit 77
  fi
  [[ $rc -eq 0 ]] || exit 1
  mapfile -t FLAGS < <(e2b_flags)
}

# The bytes 0..255, and checks of one emulator.
python3 -c 'import sys; sys.stdout.buffer.write(bytes(range(256)) * 3)' >"$WORK/all.bin"
basic_checks() {  # basic_checks LABEL
  local label=$1
  STDIN=$WORK/all.bin
  run "$label-cat" run "${FLAGS[@]}" -- cat
  STDIN=/dev/null
  same_file "$label: every byte value comes back through cat" "$WORK/$label-cat.out" "$WORK/all.bin"
  expect_status "$label: cat exits 0" 0 "$label-cat"

  run "$label-exit" run "${FLAGS[@]}" -- sh -c 'printf out; echo err >&2; exit 7'
  printf out >"$WORK/out.want"
  printf 'err\n' >"$WORK/err.want"
  same_file "$label: stdout passes through" "$WORK/$label-exit.out" "$WORK/out.want"
  same_file "$label: stderr passes through" "$WORK/$label-exit.err" "$WORK/err.want"
  expect_status "$label: the child's exit status 7 passes through" 7 "$label-exit"
}

start current
basic_checks envd-current

# A wrong API key: a clear error that does not repeat the key.
good_key=$E2B_API_KEY
bad_key=tether-wrong-key-$RANDOM$RANDOM
E2B_API_KEY=$bad_key run badkey run "${FLAGS[@]}" -- true
if [[ $STATUS -ne 0 ]] && grep -qi 'api key' "$WORK/badkey.err" && ! grep -q "$bad_key" "$WORK/badkey.err" &&
   ! grep -q "$good_key" "$WORK/badkey.err"; then
  pass "a wrong API key is a clear error without the key in it"
else
  fail "a wrong API key is a clear error without the key in it" "status $STATUS" \
    "stderr: $(head -c 500 "$WORK/badkey.err")"
fi

# No API key at all.
(unset E2B_API_KEY; run nokey run "${FLAGS[@]}" -- true; echo "$STATUS" >"$WORK/nokey.status")
if [[ $(cat "$WORK/nokey.status") -ne 0 ]] && grep -q 'E2B_API_KEY' "$WORK/nokey.err"; then
  pass "no API key: the error names E2B_API_KEY"
else
  fail "no API key: the error names E2B_API_KEY" "stderr: $(head -c 500 "$WORK/nokey.err")"
fi

# An unknown sandbox.
mapfile -t other < <(printf '%s\n' "${FLAGS[@]}" | sed "s/^$e2b_sandbox\$/no-such-sandbox-42/")
run nosandbox run "${other[@]}" -- true
if [[ $STATUS -ne 0 ]] && grep -qi 'not found' "$WORK/nosandbox.err" && grep -q 'no-such-sandbox-42' "$WORK/nosandbox.err"; then
  pass "an unknown sandbox is reported as not found"
else
  fail "an unknown sandbox is reported as not found" "status $STATUS" "stderr: $(head -c 500 "$WORK/nosandbox.err")"
fi

# An old envd: no CloseStdin, uploads as multipart.
start old --envd-version 0.5.1
basic_checks envd-0.5.1

echo "$((CHECKS - FAILED))/$CHECKS checks passed"
[[ $FAILED -eq 0 ]]
