#!/usr/bin/env bash
# The exactness check of `tether run --provider daytona` against the Daytona
# emulator (tests/emulators/daytona.mjs over TLS, text only: the text
# tunnel), whose log stream drops NUL, adds newlines, switches streams on
# marker bytes and decodes nothing: all 256 byte values, NUL, invalid UTF-8
# and the marker bytes, and 1 MiB of random bytes through stdout and through
# stdin, stdin EOF, exit codes, a signal, a pty; clear errors for an unknown
# sandbox, a wrong API key (which never appears in them) and no key.
#
#   tests/cli/daytona_test.sh path/to/tether
#
# Exits 77 (skipped) when the emulator cannot run here (no node 20, no
# tests/emulators/node_modules).
set -euo pipefail

if [[ $# -ne 1 || ! -x $1 ]]; then
  echo "usage: $0 PATH_TO_TETHER" >&2
  exit 2
fi
TETHER=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tether-daytona-test.XXXXXX")
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
# shellcheck source=../lib/daytona_emulator.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/daytona_emulator.sh"

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
start_daytona_emulator "$WORK/emu" --tls || rc=$?
[[ -z ${daytona_pid:-} ]] || emulators+=("$daytona_pid")
if [[ $rc -eq 77 ]]; then
  echo "skipped: cannot run the Daytona emulator here"
  exit 77
fi
[[ $rc -eq 0 ]] || exit 1
mapfile -t FLAGS < <(daytona_flags)

# Every byte value (NUL, 01 01 01, 02 02 02, invalid UTF-8 among them),
# printed by printf in the sandbox.
fmt=
for i in $(seq 0 255); do fmt+=$(printf '\\%03o' "$i"); done
python3 -c 'import sys; sys.stdout.buffer.write(bytes(range(256)))' >"$WORK/all.bin"
run printf run "${FLAGS[@]}" -- sh -c "printf '$fmt'"
same_file "every byte value printed in the sandbox arrives exactly" "$WORK/printf.out" "$WORK/all.bin"
expect_status "printf exits 0" 0 printf

# The bytes the log stream mangles, alone: markers, NUL, a lone 0xff, no newline.
printf 'a\002\002\002b\377c\000\001\001\001' >"$WORK/mangled.want"
run mangled run "${FLAGS[@]}" -- sh -c "printf 'a\\002\\002\\002b\\377c\\000\\001\\001\\001'"
same_file "marker bytes, NUL and invalid UTF-8 arrive exactly, no newline added" "$WORK/mangled.out" "$WORK/mangled.want"

# Every byte value on stdin, through cat; then stdin EOF ends cat.
cat "$WORK/all.bin" "$WORK/all.bin" "$WORK/all.bin" >"$WORK/all3.bin"
STDIN=$WORK/all3.bin
run cat run "${FLAGS[@]}" -- cat
same_file "every byte value on stdin comes back through cat (and EOF ends it)" "$WORK/cat.out" "$WORK/all3.bin"
expect_status "cat exits 0" 0 cat

# 1 MiB of random bytes both ways.
head -c 1048576 /dev/urandom >"$WORK/rand.bin"
STDIN=$WORK/rand.bin
run rand run "${FLAGS[@]}" -- sh -c 'cat; echo done >&2'
same_file "1 MiB of random bytes through stdin and stdout" "$WORK/rand.out" "$WORK/rand.bin"
STDIN=/dev/null
run randout run "${FLAGS[@]}" -- sh -c 'head -c 1048576 /dev/urandom > r.bin && sha256sum r.bin | cut -c1-64 >&2 && cat r.bin && rm r.bin'
if [[ $(wc -c <"$WORK/randout.out") -eq 1048576 && "$(sha256sum <"$WORK/randout.out" | cut -c1-64)" == "$(tr -d '\n' <"$WORK/randout.err")" ]]; then
  pass "1 MiB of random bytes made in the sandbox arrives exactly (sha256 from the sandbox)"
else
  fail "1 MiB of random bytes made in the sandbox arrives exactly" "got $(wc -c <"$WORK/randout.out") bytes" \
    "stderr: $(head -c 300 "$WORK/randout.err")"
fi

# stdin EOF reaches the child (wc counts what came, then ends).
printf 'one\ntwo\nthree' >"$WORK/wc.in"
STDIN=$WORK/wc.in
run wc run "${FLAGS[@]}" -- sh -c 'wc -c; echo after-eof'
STDIN=/dev/null
printf '13\nafter-eof\n' >"$WORK/wc.want"
same_file "stdin EOF reaches the child" "$WORK/wc.out" "$WORK/wc.want"

run exit run "${FLAGS[@]}" -- sh -c 'printf out; echo err >&2; exit 7'
printf out >"$WORK/out.want"
printf 'err\n' >"$WORK/err.want"
same_file "stdout passes through" "$WORK/exit.out" "$WORK/out.want"
same_file "stderr passes through" "$WORK/exit.err" "$WORK/err.want"
expect_status "the child's exit status 7 passes through" 7 exit
run exit0 run "${FLAGS[@]}" -- true
expect_status "exit status 0" 0 exit0
run killed run "${FLAGS[@]}" -- sh -c 'kill -KILL $$'
expect_status "a child killed by SIGKILL: 137" 137 killed

# A signal to tether goes to the child's process group.
STATUS=0
timeout -k 5 120 "$TETHER" run "${FLAGS[@]}" -- sh -c 'echo started; exec sleep 60' </dev/null >"$WORK/sig.out" 2>"$WORK/sig.err" &
tpid=$!
for _ in $(seq 1 200); do grep -q started "$WORK/sig.out" 2>/dev/null && break; sleep 0.1; done
kill -TERM "$tpid"
wait "$tpid" || STATUS=$?
expect_status "SIGTERM to tether ends the child: 143" 143 sig

# A pty of the size asked for.
run pty run "${FLAGS[@]}" --pty --cols 101 --rows 33 -- sh -c 'test -t 0 && test -t 1 && echo tty; stty size'
printf 'tty\r\n33 101\r\n' >"$WORK/pty.want"
same_file "a pty of 101x33" "$WORK/pty.out" "$WORK/pty.want"

# An unknown sandbox.
mapfile -t other < <(printf '%s\n' "${FLAGS[@]}" | sed "s/^$daytona_sandbox\$/no-such-sandbox-42/")
run nosandbox run "${other[@]}" -- true
if [[ $STATUS -ne 0 ]] && grep -qi 'not found' "$WORK/nosandbox.err" && grep -q 'no-such-sandbox-42' "$WORK/nosandbox.err"; then
  pass "an unknown sandbox is reported as not found"
else
  fail "an unknown sandbox is reported as not found" "status $STATUS" "stderr: $(head -c 500 "$WORK/nosandbox.err")"
fi

# A wrong API key: a clear error that does not repeat the key.
good_key=$DAYTONA_API_KEY
bad_key=tether-wrong-key-$RANDOM$RANDOM
DAYTONA_API_KEY=$bad_key run badkey run "${FLAGS[@]}" -- true
if [[ $STATUS -ne 0 ]] && grep -qi 'api key' "$WORK/badkey.err" && ! grep -q "$bad_key" "$WORK/badkey.err" &&
   ! grep -q "$good_key" "$WORK/badkey.err"; then
  pass "a wrong API key is a clear error without the key in it"
else
  fail "a wrong API key is a clear error without the key in it" "status $STATUS" \
    "stderr: $(head -c 500 "$WORK/badkey.err")"
fi

# No API key at all.
(unset DAYTONA_API_KEY; run nokey run "${FLAGS[@]}" -- true; echo "$STATUS" >"$WORK/nokey.status")
if [[ $(cat "$WORK/nokey.status") -ne 0 ]] && grep -q 'DAYTONA_API_KEY' "$WORK/nokey.err"; then
  pass "no API key: the error names DAYTONA_API_KEY"
else
  fail "no API key: the error names DAYTONA_API_KEY" "stderr: $(head -c 500 "$WORK/nokey.err")"
fi

# Nothing left behind: every session tether made was deleted.
sleep 0.5
if ! grep -q 'POST /toolbox/[^ ]*/process/session -> 201' "$WORK/emu/requests.log"; then
  fail "sessions were made and deleted" "no session was made at all"
elif [[ $(grep -c 'POST /toolbox/[^ ]*/process/session -> 201' "$WORK/emu/requests.log") -eq \
        $(grep -c 'DELETE /toolbox/[^ ]*/process/session/[^ ]* -> 204' "$WORK/emu/requests.log") ]]; then
  pass "every session tether made was deleted"
else
  fail "every session tether made was deleted" \
    "$(grep -c 'process/session -> 201' "$WORK/emu/requests.log") made," \
    "$(grep -c 'DELETE .* -> 204' "$WORK/emu/requests.log") deleted"
fi

echo "$((CHECKS - FAILED))/$CHECKS checks passed"
[[ $FAILED -eq 0 ]]
