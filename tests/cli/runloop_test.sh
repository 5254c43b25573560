#!/usr/bin/env bash
# End-to-end exactness of `tether run --provider runloop` against the Runloop
# emulator (tests/emulators/runloop.mjs, over TLS; text only, so the text
# tunnel over execute_async + SSE): all 256 byte values, NUL and invalid
# UTF-8 and 1 MiB of random bytes through stdin and stdout, stdin EOF, exit
# codes, a signal, a pty; then the same core checks on an emulator where
# sending stdin kills the execution (--stdin-kills): tether detects it and
# runs the exchange tunnel over execute; and clear errors for an unknown
# devbox, a wrong API key (never shown) and no key.
#
#   tests/cli/runloop_test.sh path/to/tether
#
# Exits 77 (skipped) when the emulator cannot run here (no node 20).
set -euo pipefail

if [[ $# -ne 1 || ! -x $1 ]]; then
  echo "usage: $0 PATH_TO_TETHER" >&2
  exit 2
fi
TETHER=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tether-runloop-test.XXXXXX")
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
# shellcheck source=../lib/runloop_emulator.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/runloop_emulator.sh"

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


python3 -c 'import sys; sys.stdout.buffer.write(bytes(range(256)))' >"$WORK/all.bin"
head -c 1048576 /dev/urandom >"$WORK/random.bin"
printf 'a\000b\377\376c\300\200d\355\240\200e' >"$WORK/odd.bin"
fmt=
for i in $(seq 0 255); do fmt+=$(printf '\\%03o' "$i"); done

# exactness LABEL: the checks, against the emulator in $FLAGS.
exactness() {
  local l=$1
  run "$l.printf" run "${FLAGS[@]}" -- sh -c "printf '$fmt'"
  same_file "$l: every byte value printed in the sandbox arrives exactly" "$WORK/$l.printf.out" "$WORK/all.bin"
  expect_status "$l: printf exits 0" 0 "$l.printf"

  cat "$WORK/all.bin" "$WORK/odd.bin" "$WORK/all.bin" >"$WORK/$l.in"
  STDIN=$WORK/$l.in run "$l.cat" run "${FLAGS[@]}" -- cat
  same_file "$l: all byte values, NUL and invalid UTF-8 on stdin come back through cat" "$WORK/$l.cat.out" "$WORK/$l.in"

  STDIN=$WORK/random.bin run "$l.random" run "${FLAGS[@]}" -- cat
  same_file "$l: 1 MiB of random bytes through stdin and stdout" "$WORK/$l.random.out" "$WORK/random.bin"

  printf 'abc' >"$WORK/$l.eof.in"
  STDIN=$WORK/$l.eof.in run "$l.eof" run "${FLAGS[@]}" -- sh -c 'wc -c; echo after-eof'
  printf '3\nafter-eof\n' >"$WORK/$l.eof.want"
  same_file "$l: stdin EOF reaches the child (wc ends, the script goes on)" "$WORK/$l.eof.out" "$WORK/$l.eof.want"

  run "$l.exit" run "${FLAGS[@]}" -- sh -c 'printf out; echo err >&2; exit 7'
  printf out >"$WORK/out.want"
  printf 'err\n' >"$WORK/err.want"
  same_file "$l: stdout passes through" "$WORK/$l.exit.out" "$WORK/out.want"
  same_file "$l: stderr passes through apart" "$WORK/$l.exit.err" "$WORK/err.want"
  expect_status "$l: the child's exit status 7 passes through" 7 "$l.exit"

  run "$l.slow" run "${FLAGS[@]}" -- sh -c 'for i in 1 2 3 4; do echo "$i"; sleep 0.7; done'
  printf '1\n2\n3\n4\n' >"$WORK/$l.slow.want"
  same_file "$l: output spread over 2.8 s arrives once, in order" "$WORK/$l.slow.out" "$WORK/$l.slow.want"

  run "$l.sig" run "${FLAGS[@]}" -- sh -c 'kill -TERM $$'
  expect_status "$l: a child ended by SIGTERM exits 143" 143 "$l.sig"

  run "$l.pty" run "${FLAGS[@]}" --pty --cols 100 --rows 30 -- sh -c 'test -t 0 && test -t 1 && echo tty; stty size; exit 3'
  printf 'tty\r\n30 100\r\n' >"$WORK/$l.pty.want"
  same_file "$l: --pty gives the child a terminal of the requested size" "$WORK/$l.pty.out" "$WORK/$l.pty.want"
  expect_status "$l: --pty passes the child's status" 3 "$l.pty"
}

rc=0
start_runloop_emulator "$WORK/emu" --tls --sse-ms 1000 || rc=$?
[[ -z ${runloop_pid:-} ]] || emulators+=("$runloop_pid")
if [[ $rc -eq 77 ]]; then
  echo "skipped: cannot run the Runloop emulator here"
  exit 77
fi
[[ $rc -eq 0 ]] || exit 1
mapfile -t FLAGS < <(runloop_flags)
exactness stream
if grep -q 'execute_async' "$WORK/emu/requests.log" && grep -q 'stream ends with 408' "$WORK/emu/requests.log"; then
  pass "stream: the runs used execute_async and SSE streams that ended with 408 and resumed"
else
  fail "stream: the runs used execute_async and SSE streams that ended with 408 and resumed"
fi

# An unknown devbox.
mapfile -t other < <(printf '%s\n' "${FLAGS[@]}" | sed "s/^$runloop_devbox\$/dbx_no_such_42/")
run nodevbox run "${other[@]}" -- true
if [[ $STATUS -ne 0 ]] && grep -qi 'not found' "$WORK/nodevbox.err" && grep -q 'dbx_no_such_42' "$WORK/nodevbox.err"; then
  pass "an unknown devbox is reported as not found"
else
  fail "an unknown devbox is reported as not found" "status $STATUS" "stderr: $(head -c 500 "$WORK/nodevbox.err")"
fi

# A wrong API key: a clear error that does not repeat the key.
good_key=$RUNLOOP_API_KEY
bad_key=tether-wrong-key-$RANDOM$RANDOM
RUNLOOP_API_KEY=$bad_key run badkey run "${FLAGS[@]}" -- true
if [[ $STATUS -ne 0 ]] && grep -qi 'api key' "$WORK/badkey.err" && ! grep -q "$bad_key" "$WORK/badkey.err" &&
   ! grep -q "$good_key" "$WORK/badkey.err"; then
  pass "a wrong API key is a clear error without the key in it"
else
  fail "a wrong API key is a clear error without the key in it" "status $STATUS" \
    "stderr: $(head -c 500 "$WORK/badkey.err")"
fi

# No API key at all.
(unset RUNLOOP_API_KEY; run nokey run "${FLAGS[@]}" -- true; echo "$STATUS" >"$WORK/nokey.status")
if [[ $(cat "$WORK/nokey.status") -ne 0 ]] && grep -q 'RUNLOOP_API_KEY' "$WORK/nokey.err"; then
  pass "no API key: the error names RUNLOOP_API_KEY"
else
  fail "no API key: the error names RUNLOOP_API_KEY" "stderr: $(head -c 500 "$WORK/nokey.err")"
fi

run badmode run "${FLAGS[@]}" --runloop-exec sometimes -- true
expect_status "--runloop-exec with an unknown value is a usage error" 2 badmode

# A service where stdin kills the execution: detected, then the exchange tunnel.
kill -TERM "$runloop_pid" 2>/dev/null || true
wait "$runloop_pid" 2>/dev/null || true
rc=0
start_runloop_emulator "$WORK/emu2" --tls --stdin-kills || rc=$?
[[ -z ${runloop_pid:-} ]] || emulators+=("$runloop_pid")
[[ $rc -eq 0 ]] || exit 1
mapfile -t FLAGS < <(runloop_flags)
exactness stdin-kills
if grep -q 'stdin-kills: killing' "$WORK/emu2/requests.log" && grep -q 'POST /v1/devboxes/[^/]*/execute -> 200' "$WORK/emu2/requests.log"; then
  pass "stdin-kills: tether detected it and polled through execute"
else
  fail "stdin-kills: tether detected it and polled through execute"
fi
kills=$(grep -c 'stdin-kills: killing' "$WORK/emu2/requests.log" || true)
echo "stdin-kills: $kills executions were killed by stdin (one probe per tether run)"

echo "$((CHECKS - FAILED))/$CHECKS checks passed"
[[ $FAILED -eq 0 ]]
