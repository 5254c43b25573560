#!/usr/bin/env bash
# The exactness check of `tether run --provider modal` against the Modal
# emulator (tests/emulators/modal.mjs over gRPC with TLS: the binary tunnel
# over the task command router, which has no kill, signal or resize of its
# own): all 256 byte values, NUL, invalid UTF-8, 1 MiB of random bytes
# through stdout and through stdin, stdin EOF, exit codes, a signal, a pty
# and its resize; the token from ~/.modal.toml; clear errors for an unknown
# sandbox, a wrong token (which never appears in them) and no token.
#
#   tests/cli/modal_test.sh path/to/tether
#
# Exits 77 (skipped) when the emulator cannot run here (no node 20, no
# tests/emulators/node_modules).
set -euo pipefail

if [[ $# -ne 1 || ! -x $1 ]]; then
  echo "usage: $0 PATH_TO_TETHER" >&2
  exit 2
fi
TETHER=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tether-modal-test.XXXXXX")
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
# shellcheck source=../lib/modal_emulator.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/modal_emulator.sh"

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
start_modal_emulator "$WORK/emu" --tls || rc=$?
[[ -z ${modal_pid:-} ]] || emulators+=("$modal_pid")
if [[ $rc -eq 77 ]]; then
  echo "skipped: cannot run the Modal emulator here"
  exit 77
fi
[[ $rc -eq 0 ]] || exit 1
mapfile -t FLAGS < <(modal_flags)
# No ~/.modal.toml of this machine's user: only what the test sets.
export HOME=$WORK/home
mkdir -p "$HOME"

# Every byte value (NUL and invalid UTF-8 among them), printed in the sandbox.
fmt=
for i in $(seq 0 255); do fmt+=$(printf '\\%03o' "$i"); done
python3 -c 'import sys; sys.stdout.buffer.write(bytes(range(256)))' >"$WORK/all.bin"
run printf run "${FLAGS[@]}" -- sh -c "printf '$fmt'"
same_file "every byte value printed in the sandbox arrives exactly" "$WORK/printf.out" "$WORK/all.bin"
expect_status "printf exits 0" 0 printf

printf 'a\000b\377\376c\300' >"$WORK/odd.want"
run odd run "${FLAGS[@]}" -- sh -c "printf 'a\\000b\\377\\376c\\300'"
same_file "NUL and invalid UTF-8 arrive exactly, no newline added" "$WORK/odd.out" "$WORK/odd.want"

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

# A signal to tether goes to the child's process group (the router has no
# signal call: the supervisor delivers it).
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

# A resize: tether runs in a terminal of 24x80 that becomes 40x120 (and gets
# SIGWINCH); the child's pty follows (the router has no resize call).
TETHER_BIN=$TETHER python3 - "$WORK/resize.out" "${FLAGS[@]}" <<'PY' || true
import fcntl, os, pty, select, signal, struct, sys, termios, time
out_path, flags = sys.argv[1], sys.argv[2:]
tether = os.environ["TETHER_BIN"]
pid, fd = pty.fork()
if pid == 0:
    os.execv(tether, [tether, "run", *flags, "--pty", "--", "sh", "-c",
                      "stty size; echo ready; read x; stty size; echo bye"])
fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
buf = b""
def pump(until, secs):
    global buf
    end = time.time() + secs
    while until not in buf and time.time() < end:
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                d = os.read(fd, 4096)
            except OSError:
                return
            if not d:
                return
            buf += d
pump(b"ready", 60)
fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
os.kill(pid, signal.SIGWINCH)
time.sleep(1.0)
os.write(fd, b"go\r")
pump(b"bye", 30)
try:
    os.kill(pid, signal.SIGKILL)
except ProcessLookupError:
    pass
os.waitpid(pid, 0)
open(out_path, "wb").write(buf)
PY
if grep -q '24 80' "$WORK/resize.out" 2>/dev/null && grep -q '40 120' "$WORK/resize.out"; then
  pass "a pty resized from 24x80 to 40x120 while the child runs"
else
  fail "a pty resized from 24x80 to 40x120 while the child runs" \
    "got: $(od -An -c "$WORK/resize.out" 2>/dev/null | head -c 400)"
fi

# Credentials from ~/.modal.toml (the SDK's file), none in the environment.
cat >"$HOME/.modal.toml" <<TOML
# written by the test
[other]
token_id = "ak-wrong"
token_secret = "as-wrong"

[tether-test]
token_id = "$MODAL_TOKEN_ID"
token_secret = '$MODAL_TOKEN_SECRET'
active = true
TOML
(unset MODAL_TOKEN_ID MODAL_TOKEN_SECRET; run toml run "${FLAGS[@]}" -- sh -c 'echo from-toml'; echo "$STATUS" >"$WORK/toml.status")
if [[ $(cat "$WORK/toml.status") -eq 0 ]] && grep -qx 'from-toml' "$WORK/toml.out"; then
  pass "the token from the active profile of ~/.modal.toml"
else
  fail "the token from the active profile of ~/.modal.toml" "stderr: $(head -c 500 "$WORK/toml.err")"
fi
rm -f "$HOME/.modal.toml"

# An unknown sandbox (a V1 id and a V2 id).
for other_id in sb-NoSuchSandbox00000000001 no-such-sandbox-42; do
  mapfile -t other < <(printf '%s\n' "${FLAGS[@]}" | sed "s/^$modal_sandbox\$/$other_id/")
  run nosandbox run "${other[@]}" -- true
  if [[ $STATUS -ne 0 ]] && grep -qi 'not found' "$WORK/nosandbox.err" && grep -q "$other_id" "$WORK/nosandbox.err"; then
    pass "an unknown sandbox ($other_id) is reported as not found"
  else
    fail "an unknown sandbox ($other_id) is reported as not found" "status $STATUS" "stderr: $(head -c 500 "$WORK/nosandbox.err")"
  fi
done

# A wrong token secret: a clear error that repeats neither secret.
good=$MODAL_TOKEN_SECRET
bad=tether-wrong-secret-$RANDOM$RANDOM
MODAL_TOKEN_SECRET=$bad run badkey run "${FLAGS[@]}" -- true
if [[ $STATUS -ne 0 ]] && grep -q 'MODAL_TOKEN_SECRET' "$WORK/badkey.err" && grep -qi 'refused' "$WORK/badkey.err" &&
   ! grep -q "$bad" "$WORK/badkey.err" && ! grep -q "$good" "$WORK/badkey.err"; then
  pass "a wrong token is a clear error without the secret in it"
else
  fail "a wrong token is a clear error without the secret in it" "status $STATUS" \
    "stderr: $(head -c 500 "$WORK/badkey.err")"
fi

# No token at all.
(unset MODAL_TOKEN_ID MODAL_TOKEN_SECRET; run nokey run "${FLAGS[@]}" -- true; echo "$STATUS" >"$WORK/nokey.status")
if [[ $(cat "$WORK/nokey.status") -ne 0 ]] && grep -q 'MODAL_TOKEN_ID' "$WORK/nokey.err"; then
  pass "no token: the error names MODAL_TOKEN_ID"
else
  fail "no token: the error names MODAL_TOKEN_ID" "stderr: $(head -c 500 "$WORK/nokey.err")"
fi

# A malformed ~/.modal.toml is named in the error.
printf '[broken\n' >"$HOME/.modal.toml"
run badtoml run "${FLAGS[@]}" -- true
if [[ $STATUS -ne 0 ]] && grep -q 'modal.toml' "$WORK/badtoml.err"; then
  pass "a malformed ~/.modal.toml is a clear error"
else
  fail "a malformed ~/.modal.toml is a clear error" "stderr: $(head -c 500 "$WORK/badtoml.err")"
fi
rm -f "$HOME/.modal.toml"

echo "$((CHECKS - FAILED))/$CHECKS checks passed"
[[ $FAILED -eq 0 ]]
