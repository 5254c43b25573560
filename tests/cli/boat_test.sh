#!/usr/bin/env bash
# End-to-end checks of `tether run --provider boat` against the Boat emulator
# (tests/emulators/boat.mjs, over TLS; one-shot commands, so the exchange
# tunnel): exact bytes both ways, exit statuses, clear errors for an unknown
# sandbox, a wrong API key (which never appears in them) and no key.
#
#   tests/cli/boat_test.sh path/to/tether
#
# Exits 77 (skipped) when the emulator cannot run here (no node 20).
set -euo pipefail

if [[ $# -ne 1 || ! -x $1 ]]; then
  echo "usage: $0 PATH_TO_TETHER" >&2
  exit 2
fi
TETHER=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tether-boat-test.XXXXXX")
emulators=()

# Processes started from this run's directories (the emulator's sandbox
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
# shellcheck source=../lib/boat_emulator.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/boat_emulator.sh"

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

rc=0
start_boat_emulator "$WORK/emu" --tls || rc=$?
[[ -z ${boat_pid:-} ]] || emulators+=("$boat_pid")
if [[ $rc -eq 77 ]]; then
  echo "skipped: cannot run the Boat emulator here"
  exit 77
fi
[[ $rc -eq 0 ]] || exit 1
mapfile -t FLAGS < <(boat_flags)

# Every byte value, printed by printf in the sandbox (Boat's own output is
# text only: the exchange tunnel's armor carries the bytes).
fmt=
for i in $(seq 0 255); do fmt+=$(printf '\\%03o' "$i"); done
python3 -c 'import sys; sys.stdout.buffer.write(bytes(range(256)))' >"$WORK/all.bin"
run printf run "${FLAGS[@]}" -- sh -c "printf '$fmt'"
same_file "every byte value printed in the sandbox arrives exactly" "$WORK/printf.out" "$WORK/all.bin"
expect_status "printf exits 0" 0 printf

# And every byte value on stdin, through cat.
cat "$WORK/all.bin" "$WORK/all.bin" "$WORK/all.bin" >"$WORK/all3.bin"
STDIN=$WORK/all3.bin
run cat run "${FLAGS[@]}" -- cat
STDIN=/dev/null
same_file "every byte value on stdin comes back through cat" "$WORK/cat.out" "$WORK/all3.bin"
expect_status "cat exits 0" 0 cat

run exit run "${FLAGS[@]}" -- sh -c 'printf out; echo err >&2; exit 7'
printf out >"$WORK/out.want"
printf 'err\n' >"$WORK/err.want"
same_file "stdout passes through" "$WORK/exit.out" "$WORK/out.want"
same_file "stderr passes through" "$WORK/exit.err" "$WORK/err.want"
expect_status "the child's exit status 7 passes through" 7 exit

# An unknown sandbox.
mapfile -t other < <(printf '%s\n' "${FLAGS[@]}" | sed "s/^$boat_sandbox\$/no-such-sandbox-42/")
run nosandbox run "${other[@]}" -- true
if [[ $STATUS -ne 0 ]] && grep -qi 'not found' "$WORK/nosandbox.err" && grep -q 'no-such-sandbox-42' "$WORK/nosandbox.err"; then
  pass "an unknown sandbox is reported as not found"
else
  fail "an unknown sandbox is reported as not found" "status $STATUS" "stderr: $(head -c 500 "$WORK/nosandbox.err")"
fi

# A wrong API key: a clear error that does not repeat the key.
good_key=$BOAT_API_KEY
bad_key=tether-wrong-key-$RANDOM$RANDOM
BOAT_API_KEY=$bad_key run badkey run "${FLAGS[@]}" -- true
if [[ $STATUS -ne 0 ]] && grep -qi 'api key' "$WORK/badkey.err" && ! grep -q "$bad_key" "$WORK/badkey.err" &&
   ! grep -q "$good_key" "$WORK/badkey.err"; then
  pass "a wrong API key is a clear error without the key in it"
else
  fail "a wrong API key is a clear error without the key in it" "status $STATUS" \
    "stderr: $(head -c 500 "$WORK/badkey.err")"
fi

# No API key at all.
(unset BOAT_API_KEY; run nokey run "${FLAGS[@]}" -- true; echo "$STATUS" >"$WORK/nokey.status")
if [[ $(cat "$WORK/nokey.status") -ne 0 ]] && grep -q 'BOAT_API_KEY' "$WORK/nokey.err"; then
  pass "no API key: the error names BOAT_API_KEY"
else
  fail "no API key: the error names BOAT_API_KEY" "stderr: $(head -c 500 "$WORK/nokey.err")"
fi

echo "$((CHECKS - FAILED))/$CHECKS checks passed"
[[ $FAILED -eq 0 ]]
