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

here=$(dirname "${BASH_SOURCE[0]}")
# shellcheck source=../lib/cli_provider.sh
source "$here/../lib/cli_provider.sh"
# shellcheck source=../lib/modal_emulator.sh
source "$here/../lib/modal_emulator.sh"
cli_provider_init modal "$@"

cli_provider_start modal Modal "$WORK/emu" --tls
# No ~/.modal.toml of this machine's user: only what the test sets.
export HOME=$WORK/home
mkdir -p "$HOME"

# Every byte value (NUL and invalid UTF-8 among them), printed in the sandbox.
printf_checks

printf 'a\000b\377\376c\300' >"$WORK/odd.want"
run odd run "${FLAGS[@]}" -- sh -c "printf 'a\\000b\\377\\376c\\300'"
same_file "NUL and invalid UTF-8 arrive exactly, no newline added" "$WORK/odd.out" "$WORK/odd.want"

# Every byte value and 1 MiB of random bytes on stdin and stdout, stdin
# EOF, exit statuses, a signal to tether (the router has no signal call:
# the supervisor delivers it), a pty of the size asked for.
stream_checks

# A resize: tether runs in a terminal of 24x80 that becomes 40x120 (and gets
# SIGWINCH); the child's pty follows (the router has no resize call).
TETHER_BIN=$TETHER python3 - "$WORK/resize.out" "${FLAGS[@]}" <<'PY' || true
import fcntl, os, pty, select, signal, struct, sys, termios, time
out_path, flags = sys.argv[1], sys.argv[2:]
tether = os.environ["TETHER_BIN"]
pid, fd = pty.fork()
if pid == 0:
    # The child waits for its size to change (polling, at most 30 s) instead
    # of the test sleeping between the SIGWINCH and the second `stty size`.
    os.execv(tether, [tether, "run", *flags, "--pty", "--", "sh", "-c",
                      "stty size; echo ready; i=0; "
                      "while [ \"$(stty size)\" = '24 80' ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; "
                      "stty size; echo bye"])
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
pump(b"bye", 60)
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
  expect_not_found nosandbox "an unknown sandbox ($other_id) is reported as not found" "$modal_sandbox" "$other_id"
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
expect_key_named token MODAL_TOKEN_ID MODAL_TOKEN_SECRET

# A malformed ~/.modal.toml is named in the error.
printf '[broken\n' >"$HOME/.modal.toml"
run badtoml run "${FLAGS[@]}" -- true
if [[ $STATUS -ne 0 ]] && grep -q 'modal.toml' "$WORK/badtoml.err"; then
  pass "a malformed ~/.modal.toml is a clear error"
else
  fail "a malformed ~/.modal.toml is a clear error" "stderr: $(head -c 500 "$WORK/badtoml.err")"
fi
rm -f "$HOME/.modal.toml"

# tether leaves OpenSSL's state to the end of its process: OpenSSL's exit
# handler raced with gRPC's ending threads and leaked their error queues
# (host/net/http.h). Which exit handlers a run installs, through a preload
# library (release only: under ASan, whose runtime must come first, CMake
# does not set TETHER_ATEXIT_WATCH_LIB). First that the watch sees
# OpenSSL's handler where it is installed: Python's ssl module.
if [[ -n ${TETHER_ATEXIT_WATCH_LIB:-} ]]; then
  name="OpenSSL's exit handler is not installed by tether run over TLS"
  off=$(nm "$TETHER" 2>/dev/null | awk '$3 == "OPENSSL_cleanup" { print $1 }' | head -1)
  rm -f "$WORK/atexit.control" "$WORK/atexit.run"
  TETHER_ATEXIT_LOG=$WORK/atexit.control LD_PRELOAD=$TETHER_ATEXIT_WATCH_LIB \
    python3 -c 'import ssl; ssl.create_default_context()' || true
  STATUS=0
  TETHER_ATEXIT_WATCH=0x${off:-0} TETHER_ATEXIT_LOG=$WORK/atexit.run LD_PRELOAD=$TETHER_ATEXIT_WATCH_LIB \
    timeout -k 5 120 "$TETHER" run "${FLAGS[@]}" -- sh -c 'echo tls' >"$WORK/atexit.out" 2>"$WORK/atexit.err" || STATUS=$?
  if ! grep -qx watched "$WORK/atexit.control" 2>/dev/null; then
    fail "$name" "the watch did not see Python's ssl module install it: $(sort "$WORK/atexit.control" 2>/dev/null | uniq -c | tr '\n' ' ')"
  elif [[ $STATUS -ne 0 ]] || ! grep -qx tls "$WORK/atexit.out"; then
    fail "$name" "the run failed: status $STATUS" "stderr: $(head -c 500 "$WORK/atexit.err")"
  elif ! grep -qx other "$WORK/atexit.run" 2>/dev/null; then
    fail "$name" "the watch was not loaded into tether (no exit handler seen at all)"
  elif grep -qx watched "$WORK/atexit.run"; then
    fail "$name" "tether installed OPENSSL_cleanup (at 0x${off:-?})"
  else
    pass "$name"
  fi
fi

echo "$((CHECKS - FAILED))/$CHECKS checks passed"
[[ $FAILED -eq 0 ]]
