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

here=$(dirname "${BASH_SOURCE[0]}")
# shellcheck source=../lib/cli_provider.sh
source "$here/../lib/cli_provider.sh"
# shellcheck source=../lib/runloop_emulator.sh
source "$here/../lib/runloop_emulator.sh"
cli_provider_init runloop "$@"

all_bytes "$WORK/all.bin"
head -c 1048576 /dev/urandom >"$WORK/random.bin"
printf 'a\000b\377\376c\300\200d\355\240\200e' >"$WORK/odd.bin"

# exactness LABEL: the checks, against the emulator in $FLAGS.
exactness() {
  local l=$1
  run "$l.printf" run "${FLAGS[@]}" -- sh -c "printf '$all_bytes_fmt'"
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

cli_provider_start runloop Runloop "$WORK/emu" --tls --sse-ms 1000
exactness stream
if grep -q 'execute_async' "$WORK/emu/requests.log" && grep -q 'stream ends with 408' "$WORK/emu/requests.log"; then
  pass "stream: the runs used execute_async and SSE streams that ended with 408 and resumed"
else
  fail "stream: the runs used execute_async and SSE streams that ended with 408 and resumed"
fi

# An unknown devbox.
expect_not_found nodevbox "an unknown devbox is reported as not found" "$runloop_devbox" dbx_no_such_42

# A wrong API key: a clear error that does not repeat the key.
expect_key_refused RUNLOOP_API_KEY
# No API key at all.
expect_key_named "API key" RUNLOOP_API_KEY

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
# Each tether run probes once (its verdict is not kept across runs), and
# only the probe sends stdin: as many kills as runs, no fewer, no more.
kills=$(grep -c 'stdin-kills: killing' "$WORK/emu2/requests.log" || true)
runs=$(find "$WORK" -maxdepth 1 -name 'stdin-kills.*.err' | wc -l)
if [[ $runs -gt 0 && $kills -eq $runs ]]; then
  pass "stdin-kills: stdin killed $kills executions, one probe per tether run ($runs runs)"
else
  fail "stdin-kills: stdin killed $kills executions, one probe per tether run ($runs runs)" \
    "want one kill per run: $runs"
fi

echo "$((CHECKS - FAILED))/$CHECKS checks passed"
[[ $FAILED -eq 0 ]]
