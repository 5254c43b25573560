#!/usr/bin/env bash
# End-to-end checks of `tether run` through the local provider: exact bytes,
# exit statuses, usage errors, and that a run leaves nothing behind.
#
#   tests/cli/run_test.sh path/to/tether
#
# The supervisor binary is found the way the CLI finds it (set
# TETHER_SUPERVISOR_DIR to a directory holding tether-supervisor-<arch>).
# Prints one line per check; exits non-zero if any check fails.
set -euo pipefail

if [[ $# -ne 1 || ! -x $1 ]]; then
  echo "usage: $0 PATH_TO_TETHER" >&2
  exit 2
fi
TETHER=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")

WORK=$(mktemp -d "${TMPDIR:-/tmp}/tether-cli-test.XXXXXX")
TETHER_LOCAL_ROOT=$(mktemp -d "${TMPDIR:-/tmp}/tether-cli-root.XXXXXX")
chmod 700 "$TETHER_LOCAL_ROOT"
export TETHER_LOCAL_ROOT

# Pids of supervisor processes installed under this run's sandbox root.
supervisor_pids() {
  local d argv0
  for d in /proc/[0-9]*; do
    argv0=
    IFS= read -r -d '' argv0 2>/dev/null <"$d/cmdline" || true
    if [[ $argv0 == "$TETHER_LOCAL_ROOT/bin/tether-supervisor"* ]]; then
      echo "${d#/proc/}"
    fi
  done
}

# Children of process $1.
children_of() {
  local d stat
  for d in /proc/[0-9]*; do
    stat=
    IFS= read -r stat 2>/dev/null <"$d/stat" || true
    stat=${stat##*) }  # after the command name: state ppid ...
    [[ $stat == ?" $1 "* ]] && echo "${d#/proc/}"
  done
}

cleanup() {
  set +e # (a failing step of the cleanup never changes the exit status)
  local pid child
  for pid in $(supervisor_pids); do
    # A daemon left behind still owns a child in its own process group.
    for child in $(children_of "$pid"); do kill -KILL -- "-$child" "$child" 2>/dev/null || true; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK" "$TETHER_LOCAL_ROOT"
}
trap cleanup EXIT

# shellcheck source=../lib/checks.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/checks.sh"

# run NAME [ARGS...]: runs `tether ARGS...` with stdin from $STDIN (default
# /dev/null), stdout to $WORK/NAME.out, stderr to $WORK/NAME.err; sets
# STATUS. Every run has a time limit so that a hang fails instead of blocking.
STDIN=/dev/null
run() {
  local name=$1
  shift
  STATUS=0
  timeout -k 5 120 "$TETHER" "$@" <"$STDIN" >"$WORK/$name.out" 2>"$WORK/$name.err" || STATUS=$?
}

# expect_status NAME WANT: the last run's status.
expect_status() {
  if [[ $STATUS -eq $2 ]]; then
    pass "$1"
  else
    fail "$1" "exit status $STATUS, want $2" "stderr: $(head -c 500 "$WORK/$3.err" 2>/dev/null || true)"
  fi
}

# same_file NAME GOT WANT: byte-for-byte comparison.
same_file() {
  if cmp -s "$2" "$3"; then
    pass "$1"
  else
    fail "$1" "got:  $(od -An -c "$2" | head -c 300)" "want: $(od -An -c "$3" | head -c 300)"
  fi
}

# ------------------------------------------------------------------ bytes

run bytes run -- sh -c 'printf "\000\377"; echo err >&2; exit 7'
printf '\000\377' >"$WORK/bytes.want"
same_file "stdout holds exactly the bytes 0x00 0xff" "$WORK/bytes.out" "$WORK/bytes.want"
printf 'err\n' >"$WORK/bytes.err.want"
same_file "stderr holds exactly 'err\\n'" "$WORK/bytes.err" "$WORK/bytes.err.want"
expect_status "the child's exit status 7 passes through" 7 bytes

head -c 67108864 /dev/urandom >"$WORK/random.bin"
want_sum=$(sha256sum <"$WORK/random.bin" | cut -d' ' -f1)
STATUS=0
timeout -k 5 300 "$TETHER" run -- cat <"$WORK/random.bin" 2>"$WORK/cat64.err" | sha256sum >"$WORK/cat64.sum" ||
  STATUS=$?
got_sum=$(cut -d' ' -f1 <"$WORK/cat64.sum")
if [[ $STATUS -eq 0 && $got_sum == "$want_sum" ]]; then
  pass "64 MiB of random bytes come back identical through cat"
else
  fail "64 MiB of random bytes come back identical through cat" "status $STATUS, sha256 $got_sum, want $want_sum" \
    "stderr: $(head -c 500 "$WORK/cat64.err")"
fi

STATUS=0
cat "$WORK/random.bin" | timeout -k 5 300 "$TETHER" run -- wc -c >"$WORK/wc64.out" 2>"$WORK/wc64.err" || STATUS=$?
if [[ $STATUS -eq 0 && $(tr -d ' \n' <"$WORK/wc64.out") == 67108864 ]]; then
  pass "wc -c counts 64 MiB of piped stdin exactly"
else
  fail "wc -c counts 64 MiB of piped stdin exactly" "status $STATUS, count '$(cat "$WORK/wc64.out")'" \
    "stderr: $(head -c 500 "$WORK/wc64.err")"
fi

STATUS=0
printf '' | timeout -k 5 60 "$TETHER" run -- wc -c >"$WORK/wc0.out" 2>"$WORK/wc0.err" || STATUS=$?
if [[ $STATUS -eq 0 && $(tr -d ' \n' <"$WORK/wc0.out") == 0 ]]; then
  pass "an empty piped stdin gives wc -c = 0"
else
  fail "an empty piped stdin gives wc -c = 0" "status $STATUS, count '$(cat "$WORK/wc0.out")'"
fi

STDIN=/dev/null run devnull run -- wc -c
if [[ $STATUS -eq 0 && $(tr -d ' \n' <"$WORK/devnull.out") == 0 ]]; then
  pass "stdin from /dev/null gives EOF at once"
else
  fail "stdin from /dev/null gives EOF at once" "status $STATUS, out '$(cat "$WORK/devnull.out")'" \
    "stderr: $(head -c 500 "$WORK/devnull.err")"
fi

{
  for i in $(seq 1 2000); do printf 'line %d \001\377\n' "$i"; done
} >"$WORK/regular.in"
STDIN=$WORK/regular.in run regular run -- cat
same_file "stdin from a regular file comes through exactly" "$WORK/regular.out" "$WORK/regular.in"
STDIN=/dev/null

# Interleaved output on both streams: each stream exact and kept apart.
script='i=0; while [ $i -lt 2000 ]; do echo "out $i"; echo "err $i" >&2; i=$((i+1)); done; printf "no newline"'
sh -c "$script" >"$WORK/apart.out.want" 2>"$WORK/apart.err.want"
run apart run -- sh -c "$script"
same_file "stdout is exact and holds no stderr bytes" "$WORK/apart.out" "$WORK/apart.out.want"
same_file "stderr is exact and holds no stdout bytes" "$WORK/apart.err" "$WORK/apart.err.want"

# -------------------------------------------------------------- statuses

for code in 0 1 255; do
  run "exit$code" run -- sh -c "exit $code"
  expect_status "exit status $code passes through" "$code" "exit$code"
done

run sigterm run -- sh -c 'kill -TERM $$'
expect_status "a child ended by SIGTERM gives 143" 143 sigterm
run sigkill run -- sh -c 'kill -KILL $$'
expect_status "a child ended by SIGKILL gives 137" 137 sigkill

run missing run -- tether-no-such-command-xyz
if [[ $STATUS -eq 127 && -s $WORK/missing.err ]]; then
  pass "a command not in PATH gives 127 and a message"
else
  fail "a command not in PATH gives 127 and a message" "status $STATUS" "stderr: $(cat "$WORK/missing.err")"
fi
run missing_abs run -- /nonexistent/tether-cmd
if [[ $STATUS -eq 127 ]] && grep -q /nonexistent/tether-cmd "$WORK/missing_abs.err"; then
  pass "a missing absolute command gives 127 and names it"
else
  fail "a missing absolute command gives 127 and names it" "status $STATUS" "stderr: $(cat "$WORK/missing_abs.err")"
fi

# ----------------------------------------------------------------- usage

usage_check() {
  local name=$1
  shift
  run "$name" "$@"
  if [[ $STATUS -eq 2 ]] && grep -q '^usage: ' "$WORK/$name.err" && [[ ! -s $WORK/$name.out ]]; then
    pass "'tether${*:+ $*}' exits 2 with a usage line on stderr"
  else
    fail "'tether${*:+ $*}' exits 2 with a usage line on stderr" "status $STATUS" \
      "stderr: $(head -c 300 "$WORK/$name.err")"
  fi
}
usage_check usage_none
usage_check usage_run run
usage_check usage_run_dashdash run --
usage_check usage_bogus run --bogus -- true
usage_check usage_env run --env NOEQUALS -- true
usage_check usage_env_noname run --env =value -- true
usage_check usage_env_missing run --env
usage_check usage_provider run --provider nowhere -- true
usage_check usage_frob frob

run version --version
if [[ $STATUS -eq 0 ]] && grep -Eq '^tether [0-9]+\.[0-9]+\.[0-9]+' "$WORK/version.out"; then
  pass "tether --version prints a version ($(head -n1 "$WORK/version.out"))"
else
  fail "tether --version prints a version" "status $STATUS, out '$(cat "$WORK/version.out")'"
fi

# ------------------------------------------------------ environment, cwd

run env run --env A=B --env C=x=y --env EMPTY= -- sh -c 'printf "%s|%s|%s" "$A" "$C" "${EMPTY-unset}"'
if [[ $STATUS -eq 0 && $(cat "$WORK/env.out") == 'B|x=y|' ]]; then
  pass "--env NAME=VALUE sets variables (values may hold '=' or be empty)"
else
  fail "--env NAME=VALUE sets variables" "status $STATUS, out '$(cat "$WORK/env.out")'"
fi

STATUS=0
API_TOKEN=ambient timeout 60 "$TETHER" run -- sh -c 'printf "%s" "${API_TOKEN-scrubbed}"' >"$WORK/scrub.out" \
  2>"$WORK/scrub.err" || STATUS=$?
if [[ $STATUS -eq 0 && $(cat "$WORK/scrub.out") == scrubbed ]]; then
  pass "credential-shaped ambient variables are scrubbed"
else
  fail "credential-shaped ambient variables are scrubbed" "status $STATUS, out '$(cat "$WORK/scrub.out")'"
fi
STATUS=0
API_TOKEN=ambient timeout 60 "$TETHER" run --env API_TOKEN=given -- sh -c 'printf "%s" "$API_TOKEN"' \
  >"$WORK/scrub2.out" 2>"$WORK/scrub2.err" || STATUS=$?
if [[ $STATUS -eq 0 && $(cat "$WORK/scrub2.out") == given ]]; then
  pass "a credential-shaped variable passed with --env reaches the child"
else
  fail "a credential-shaped variable passed with --env reaches the child" "status $STATUS, out '$(cat "$WORK/scrub2.out")'"
fi

run cwd run --cwd /tmp -- pwd -P
if [[ $STATUS -eq 0 && $(cat "$WORK/cwd.out") == "$(cd /tmp && pwd -P)" ]]; then
  pass "--cwd /tmp runs the child in /tmp"
else
  fail "--cwd /tmp runs the child in /tmp" "status $STATUS, out '$(cat "$WORK/cwd.out")'"
fi
run cwd_missing run --cwd /nonexistent-dir -- true
if [[ $STATUS -ne 0 && -s $WORK/cwd_missing.err ]]; then
  pass "a missing --cwd fails with a message (status $STATUS)"
else
  fail "a missing --cwd fails with a message" "status $STATUS"
fi

# ------------------------------------------------------------ closed pipe

start=$(date +%s)
STATUS=0
timeout -k 5 60 "$TETHER" run -- yes 2>"$WORK/yes.err" | head -c 1 >"$WORK/yes.out" || STATUS=$?
elapsed=$(($(date +%s) - start))
if [[ $elapsed -le 10 && $(cat "$WORK/yes.out") == y ]]; then
  pass "output into a closed pipe ends the run (in ${elapsed}s)"
else
  fail "output into a closed pipe ends the run" "took ${elapsed}s, pipeline status $STATUS" \
    "stderr: $(head -c 300 "$WORK/yes.err")"
fi

# ---------------------------------------------------- signals, concurrency

# A signal sent to tether goes to the child's process group, whether it is
# sent to tether alone or, as a terminal's Ctrl-C does, to tether's whole
# process group (which must not take the channel down with it). The child
# records the signal it got and exits 100+N: tether exiting with that status
# shows it forwarded the signal and stayed to report the child's end (had
# tether died of the signal itself, it would give 128+N).
for target in pid group; do
  for sig in INT TERM; do
    name="sig-$target-$sig"
    want=$((100 + $(kill -l "$sig")))
    : >"$WORK/$name.out"
    : >"$WORK/$name.got"
    # setsid: tether leads its own process group (it does not fork: not a
    # group leader already), so the group signal reaches only this run.
    # (Short foreground sleeps, 30 s in all: the trap runs as soon as one ends.)
    setsid "$TETHER" run -- sh -c 'trap "echo HUP >>\"$1\"; exit 101" HUP; trap "echo INT >>\"$1\"; exit 102" INT
      trap "echo TERM >>\"$1\"; exit 115" TERM; echo started; n=0; while [ $n -lt 300 ]; do sleep 0.1; n=$((n + 1)); done' \
      "$name" "$WORK/$name.got" >"$WORK/$name.out" 2>"$WORK/$name.err" </dev/null &
    pid=$!
    for _ in $(seq 1 300); do
      grep -q started "$WORK/$name.out" && break
      sleep 0.1
    done
    if [[ $target == pid ]]; then kill -"$sig" "$pid"; else kill -"$sig" -- "-$pid"; fi
    for _ in $(seq 1 200); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    STATUS=0
    wait "$pid" || STATUS=$?
    got=$(tr '\n' ' ' <"$WORK/$name.got")
    if [[ $STATUS -eq $want && $got == "$sig " ]]; then
      pass "SIG$sig sent to tether's $target reaches the child, and tether exits with its status ($want)"
    else
      fail "SIG$sig sent to tether's $target reaches the child, and tether exits with its status ($want)" \
        "exit status $STATUS, want $want; the child got: '${got% }', want '$sig'" \
        "stdout: $(head -c 200 "$WORK/$name.out")" "stderr: $(head -c 500 "$WORK/$name.err")"
    fi
  done
done

# Parallel runs (the supervisor install and the state directories are shared).
head -c 1048576 /dev/urandom >"$WORK/one.bin"
pids=()
for i in 1 2 3 4; do
  timeout -k 5 120 "$TETHER" run -- sh -c "cat; echo $i >&2" <"$WORK/one.bin" >"$WORK/par$i.out" \
    2>"$WORK/par$i.err" &
  pids+=($!)
done
ok=1
for i in 1 2 3 4; do
  st=0
  wait "${pids[$((i - 1))]}" || st=$?
  if [[ $st -ne 0 ]] || ! cmp -s "$WORK/par$i.out" "$WORK/one.bin" || [[ $(cat "$WORK/par$i.err") != "$i" ]]; then
    ok=0
  fi
done
if [[ $ok -eq 1 ]]; then
  pass "four parallel runs each get their own exact bytes"
else
  fail "four parallel runs each get their own exact bytes" "$(for i in 1 2 3 4; do head -c 200 "$WORK/par$i.err"; done)"
fi

# The supervisor drops an attachment that is silent for its 30 s lease; an
# idle child must still be waited for. Slow, so only with TETHER_CLI_SLOW=1.
if [[ ${TETHER_CLI_SLOW:-0} == 1 ]]; then
  run idle run -- sleep 40
  expect_status "a child idle for longer than the 30 s lease is still waited for" 0 idle
else
  printf 'skip  a child idle for longer than the 30 s lease (set TETHER_CLI_SLOW=1)\n'
fi

# ----------------------------------------------------------------- terminals

run pty1 run --pty --cols 100 --rows 30 -- sh -c 'test -t 0 && test -t 1 && echo tty; stty size; exit 3'
expect_status "run --pty passes the child's status" 3 pty1
printf 'tty\r\n30 100\r\n' >"$WORK/pty1.want"
same_file "run --pty gives the child a terminal of the requested size" "$WORK/pty1.out" "$WORK/pty1.want"
printf 'abc\n' >"$WORK/pty2.in"
STDIN=$WORK/pty2.in run pty2 run --pty -- wc -c
if [[ $STATUS -eq 0 && $(tr -d '\r' <"$WORK/pty2.out") == *$'\n4' ]]; then
  pass "stdin EOF reaches a pty child as the terminal's EOF character"
else
  fail "stdin EOF reaches a pty child as the terminal's EOF character" "status $STATUS: $(od -c "$WORK/pty2.out" | head -3)"
fi
run pty3 run --cols 80 -- true
expect_status "--cols without --pty is a usage error" 2 pty3

# ------------------------------------- start, attach, status, signal, kill, wait

run start1 start -- sh -c 'printf "a\000b"; read x; printf "%s" "$x" >&2; exit 5'
expect_status "start prints a reference and exits 0" 0 start1
REF=$(cat "$WORK/start1.out")
run status1 status "$REF"
if [[ $STATUS -eq 0 && $(cat "$WORK/status1.out") == "running pid "* ]]; then
  pass "status of a started process says running"
else
  fail "status of a started process says running" "status $STATUS: $(cat "$WORK/status1.out" "$WORK/status1.err")"
fi
printf 'input-line\n' >"$WORK/attach.in"
STDIN=$WORK/attach.in run attach1 attach "$REF"
expect_status "attach forwards stdin and exits with the child's status" 5 attach1
printf 'a\000b' >"$WORK/attach.want"
same_file "attach delivers the output produced before it attached, exactly" "$WORK/attach1.out" "$WORK/attach.want"
printf 'input-line' >"$WORK/attach.want-err"
same_file "attach keeps stderr apart" "$WORK/attach1.err" "$WORK/attach.want-err"
printf '%s' "$REF" >"$WORK/ref.json"
run status2 status "@$WORK/ref.json"
expect_status "status of a process that exited and was cleaned up is not found" 127 status2

run start2 start -- sh -c "trap '' TERM; while :; do sleep 1; done"
REF2=$(cat "$WORK/start2.out")
run kill2 kill "$REF2" --grace 200
expect_status "kill sends TERM and escalates after the grace" 0 kill2
run wait2 wait "$REF2"
expect_status "wait reports the child killed by SIGKILL as 137" 137 wait2

run start3 start --no-stdin -- sleep 100
REF3=$(cat "$WORK/start3.out")
run signal3 signal "$REF3" SIGINT
expect_status "signal by name is delivered" 0 signal3
run wait3 wait "$REF3"
expect_status "wait reports SIGINT as 130" 130 wait3
run signal4 signal "$REF3" NOSUCHSIG
expect_status "an unknown signal name is a usage error" 2 signal4
run badref status '{"tether_process":1}'
expect_status "a malformed reference is a usage error" 2 badref

# ------------------------------------------- shared stdio stays blocking

# tether's stdin and stdout are open file descriptions it shares with the
# shell and its siblings (here: the writer `sleep`, the reader `cat`). Their
# flags must never change, O_NONBLOCK least of all: a sibling would then see
# EAGAIN. Checked in /proc/PID/fdinfo while `run` is forwarding both: once
# the child has echoed a line it read from stdin, both of tether's helper
# threads have done their first read and write (a flag set while setting
# them up is set by then).
nonblock_flags() {  # FD PID: "set" if the description has O_NONBLOCK (04000)
  local flags
  flags=$(awk '/^flags:/ {print $2}' "/proc/$2/fdinfo/$1" 2>/dev/null) || return 1
  [[ -n $flags ]] || return 1
  if (( (8#$flags & 8#4000) != 0 )); then echo set; else echo clear; fi
}
: >"$WORK/nb.out"
{
  "$TETHER" run -- sh -c 'echo ready; read -r line; echo "got $line"; sleep 3' <&0 2>"$WORK/nb.err" &
  tpid=$!
  for _ in $(seq 1 300); do
    grep -q 'got probe' "$WORK/nb.out" 2>/dev/null && break
    sleep 0.1
  done
  if grep -q 'got probe' "$WORK/nb.out" 2>/dev/null; then
    echo "$(nonblock_flags 0 "$tpid") $(nonblock_flags 1 "$tpid") $(nonblock_flags 0 self)" >"$WORK/nb.flags"
  else
    echo "(stdin's line never came back through the child within 30 s)" >"$WORK/nb.flags"
  fi
  wait "$tpid" || true
} < <(echo probe; sleep 5) | cat >"$WORK/nb.out"
if grep -q 'got probe' "$WORK/nb.out" && [[ $(cat "$WORK/nb.flags") == "clear clear clear" ]]; then
  pass "while run forwards a shared stdin pipe and stdout pipe, neither gets O_NONBLOCK"
else
  fail "while run forwards a shared stdin pipe and stdout pipe, neither gets O_NONBLOCK" \
    "stdin, stdout, sibling's stdin: $(cat "$WORK/nb.flags" 2>/dev/null)" "output: $(head -c 200 "$WORK/nb.out")" \
    "stderr: $(head -c 300 "$WORK/nb.err")"
fi

# ----------------------------------------------------- nothing left behind

leftovers() {
  [[ -z $(supervisor_pids) ]] || return 1
  [[ ! -d $TETHER_LOCAL_ROOT/run || -z $(ls -A "$TETHER_LOCAL_ROOT/run") ]] || return 1
}
for _ in $(seq 1 50); do
  leftovers && break
  sleep 0.1
done
if [[ ! -d $TETHER_LOCAL_ROOT/run || -z $(ls -A "$TETHER_LOCAL_ROOT/run") ]]; then
  pass "no private state is left under \$TETHER_LOCAL_ROOT/run"
else
  fail "no private state is left under \$TETHER_LOCAL_ROOT/run" "$(ls -lA "$TETHER_LOCAL_ROOT/run")"
fi
pids=$(supervisor_pids)
if [[ -z $pids ]]; then
  pass "no tether-supervisor process of this run is left"
else
  fail "no tether-supervisor process of this run is left" \
    "$(for p in $pids; do tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null; echo " (pid $p)"; done)"
fi

echo "$((CHECKS - FAILED))/$CHECKS checks passed"
[[ $FAILED -eq 0 ]]
