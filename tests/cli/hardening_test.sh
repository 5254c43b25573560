#!/usr/bin/env bash
# End-to-end checks of the CLI's hardening contract through the local
# provider and the real supervisor: exit records that observers do not
# consume, readers that go away, stopped and killed clients, the environment
# boundary, reference input limits and tampering, a flooded socket, working
# directories, signal bursts, closed descriptors, fd exhaustion, and jobs
# that leave nothing behind.
#
#   tests/cli/hardening_test.sh path/to/tether
#
# Exit statuses under test: 0 ok, 2 usage, 125 tether failure, 126/127 only
# for the child's exec, 141 our stdout reader went away (EPIPE), 128+N when
# signal N ended the child; otherwise the child's status passes through.
#
# The supervisor binary is found the way the CLI finds it (set
# TETHER_SUPERVISOR_DIR to a directory holding tether-supervisor-<arch>).
# Prints one line per check (ok / FAIL with details); exits 1 if any failed.
# TETHER_HARDENING_ONLY="D L" runs only those letters' checks.
# No `set -e`: a check that goes wrong must not hide the checks after it.
# The children's scripts are single-quoted: their shell expands them.
# shellcheck disable=SC2016
set -uo pipefail

if [[ $# -ne 1 || ! -x $1 ]]; then
  echo "usage: $0 PATH_TO_TETHER" >&2
  exit 2
fi
TETHER=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")

WORK=$(mktemp -d "${TMPDIR:-/tmp}/tether-hardening.XXXXXX")
TETHER_LOCAL_ROOT=$(mktemp -d "${TMPDIR:-/tmp}/tether-hardening-root.XXXXXX")
chmod 700 "$WORK" "$TETHER_LOCAL_ROOT"
export TETHER_LOCAL_ROOT
# Unique to this run; every child command line we make carries it (as $0 or
# an argument), so that our processes can be found, and only ours.
TAG=${WORK##*/}

# ---------------------------------------------------------------- helpers

now_ms() {
  local t=${EPOCHREALTIME//[.,]/}
  echo $((t / 1000))
}

# poll SECONDS COMMAND...: runs COMMAND every 0.05 s until it succeeds (0)
# or SECONDS have passed (1).
poll() {
  local end=$(($(now_ms) + $1 * 1000))
  shift
  while true; do
    "$@" && return 0
    (($(now_ms) >= end)) && return 1
    sleep 0.05
  done
}

# alive PID: the process exists and is not a zombie.
alive() {
  local stat=
  IFS= read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
  stat=${stat##*) }
  [[ -n $stat && ${stat:0:1} != Z ]]
}
dead() { ! alive "$1"; }
# stopped PID: the process is stopped (state T, as after SIGSTOP).
stopped() {
  local stat=
  IFS= read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
  stat=${stat##*) }
  [[ ${stat:0:1} == T ]]
}

# argv0 PID: the first word of the process's command line.
argv0() {
  local a=
  IFS= read -r -d '' a 2>/dev/null <"/proc/$1/cmdline"
  printf '%s' "$a"
}

# Children of process $1.
children_of() {
  local d stat
  for d in /proc/[0-9]*; do
    stat=
    IFS= read -r stat 2>/dev/null <"$d/stat" || true
    stat=${stat##*) } # after the command name: state ppid ...
    [[ $stat == ?" $1 "* ]] && echo "${d#/proc/}"
  done
}

# Pids whose command line contains $1 (never this shell).
pids_with() {
  local d args
  for d in /proc/[0-9]*; do
    args=()
    mapfile -d '' args 2>/dev/null <"$d/cmdline" || continue
    [[ ${d#/proc/} != "$$" && "${args[*]}" == *"$1"* ]] && echo "${d#/proc/}"
  done
}
none_with() { [[ -z $(pids_with "$1") ]]; }
# at_least_with N STRING: N or more processes have STRING in their command line.
at_least_with() { (($(pids_with "$2" | wc -l) >= $1)); }

# Pids of supervisor processes installed under this run's sandbox root.
supervisor_pids() {
  local d a
  for d in /proc/[0-9]*; do
    a=
    IFS= read -r -d '' a 2>/dev/null <"$d/cmdline"
    [[ $a == "$TETHER_LOCAL_ROOT/bin/tether-supervisor"* ]] && echo "${d#/proc/}"
  done
}
# supervisors_at_most N: no more supervisor processes than N.
supervisors_at_most() { (($(supervisor_pids | wc -l) <= $1)); }

# Supervisors of any root this run made (R makes one under $WORK).
all_supervisor_pids() {
  local d a
  for d in /proc/[0-9]*; do
    a=
    IFS= read -r -d '' a 2>/dev/null <"$d/cmdline"
    [[ ($a == "$TETHER_LOCAL_ROOT/"* || $a == "$WORK/"*) && $a == *tether-supervisor* ]] && echo "${d#/proc/}"
  done
}

cleanup() {
  local pid child f
  for pid in $(all_supervisor_pids); do
    # A daemon left behind still owns a child in its own process group.
    for child in $(children_of "$pid"); do kill -KILL -- "-$child" "$child" 2>/dev/null; done
    kill -KILL "$pid" 2>/dev/null
  done
  for pid in $(pids_with "$TAG"); do kill -KILL "$pid" 2>/dev/null; done
  # Children that exec'd `sleep 100` lost their marker; they wrote their pids.
  for f in "$WORK"/*.pid; do
    [[ -f $f ]] || continue
    pid=$(cat "$f" 2>/dev/null)
    [[ $pid =~ ^[0-9]+$ && $(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") == "sleep 100 " ]] &&
      kill -KILL "$pid" 2>/dev/null
  done
  for pid in $(jobs -p); do kill -KILL "$pid" 2>/dev/null; done
  rm -rf "$WORK" "$TETHER_LOCAL_ROOT"
}
trap cleanup EXIT

# shellcheck source=../lib/checks.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/checks.sh"
# check NAME CONDITION-STATUS DETAILS...: pass when the status is 0.
check() {
  local name=$1 ok=$2
  shift 2
  if [[ $ok -eq 0 ]]; then pass "$name"; else fail "$name" "$@"; fi
}

# run NAME [ARGS...]: runs `tether ARGS...` with stdin from $STDIN (default
# /dev/null), stdout to $WORK/NAME.out, stderr to $WORK/NAME.err; sets
# STATUS. Every run has a time limit ($LIMIT s) so that a
# hang fails instead of blocking.
STDIN=/dev/null
LIMIT=60
run() {
  local name=$1
  shift
  STATUS=0
  timeout -k 5 "$LIMIT" "$TETHER" "$@" <"$STDIN" >"$WORK/$name.out" 2>"$WORK/$name.err" || STATUS=$?
}

# err_of NAME / out_of NAME: the start of a run's stderr / stdout, for details.
err_of() { printf 'stderr: %s' "$(head -c 400 "$WORK/$1.err" 2>/dev/null | tr '\0\n' '?|')"; }
out_of() { printf 'stdout: %s' "$(head -c 400 "$WORK/$1.out" 2>/dev/null | tr '\0\n' '?|')"; }

# expect_status CHECK WANT NAME: the last run's status.
expect_status() {
  if [[ $STATUS -eq $2 ]]; then
    pass "$1"
  else
    fail "$1" "exit status $STATUS, want $2" "$(err_of "$3")"
  fi
}

# start_job NAME ARGS...: `tether start ARGS...`; its output (the reference
# and a newline, as a user would save it) goes to $WORK/NAME.ref (0600).
# Sets REF (empty when the start failed).
start_job() {
  local name=$1
  shift
  REF=
  run "$name.start" start "$@"
  if [[ $STATUS -eq 0 && -s $WORK/$name.start.out ]]; then
    REF=$(cat "$WORK/$name.start.out")
    (umask 077 && cp "$WORK/$name.start.out" "$WORK/$name.ref")
  else
    printf 'note  tether start for %s failed (status %s): %s\n' "$name" "$STATUS" "$(err_of "$name.start")"
  fi
}

# json_field FILE KEY: a string field of a reference.
json_field() {
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"
}

# is_running NAME: the run printed `running pid N`.
is_running() { grep -Eqx 'running pid [0-9]+' "$WORK/$1.out"; }

# bg_tether LIMIT STDOUT STDERR ARGS...: starts `tether ARGS...` in the
# background under a time limit, stdin from /dev/null. Sets BG (the
# `timeout` pid, for `wait`) and TPID (tether itself, for signals; empty if
# it never ran).
bg_tether() {
  local limit=$1 out=$2 err=$3
  shift 3
  timeout -k 5 "$limit" "$TETHER" "$@" </dev/null >"$out" 2>"$err" &
  BG=$!
  TPID=$(tether_child "$BG")
}

# tether_child PID: the child of `timeout` PID once it has exec'd tether.
tether_child() {
  local end=$(($(now_ms) + 10000)) c
  while (($(now_ms) < end)); do
    for c in $(children_of "$1"); do
      if [[ $(argv0 "$c") == "$TETHER" ]]; then
        echo "$c"
        return 0
      fi
    done
    alive "$1" || return 1
    sleep 0.01
  done
  return 1
}

# ready_or_exited FILE: FILE exists, or the background tether (BG) has ended.
ready_or_exited() { [[ -e $1 ]] || dead "$BG"; }

# bg_status: waits for the background tether (BG) and sets STATUS.
bg_status() {
  STATUS=0
  wait "$BG" || STATUS=$?
}

# child_ended MARK PIDFILE BEFORE: the child that runs `sh -c '... echo $$
# >PIDFILE; exec ...' MARK` has ended and can no longer start: no supervisor
# process that is not in BEFORE (the pids of supervisor_pids before it was
# started) is alive (a daemon could still start it: its child runs as a
# supervisor until it execs sh), no process carries MARK (sh before it
# execs), and the pid in PIDFILE, if any, is dead. A child that never
# started passes only once nothing is left that could start it.
child_ended() {
  local pid before=" ${3//$'\n'/ } "
  for pid in $(supervisor_pids); do
    [[ $before == *" $pid "* ]] || return 1
  done
  none_with "$1" || return 1
  if [[ -s $2 ]]; then
    pid=$(cat "$2")
    [[ $pid =~ ^[0-9]+$ ]] || return 1 # (being written)
    dead "$pid" || return 1
  fi
  return 0
}

# new_supervisors BEFORE: supervisor pids not in BEFORE, for details.
new_supervisors() {
  local pid before=" ${1//$'\n'/ } "
  for pid in $(supervisor_pids); do
    [[ $before == *" $pid "* ]] || printf '%s ' "$pid"
  done
}

# pid_note PIDFILE: describes the pid in PIDFILE, for details.
pid_note() {
  if [[ -s $1 ]]; then
    local pid
    pid=$(cat "$1")
    if alive "$pid"; then
      echo "pid $pid ($(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline")) is still alive"
    else
      echo "pid $pid is gone"
    fi
  else
    echo "no pid file ${1##*/}"
  fi
}

# A memory cap for runs that might read without limit (H), so a tether
# without the limit fails fast instead of exhausting the machine. Not under
# AddressSanitizer, which reserves terabytes of address space.
SANITIZED=0
if grep -qa __asan_init "$TETHER"; then
  MEMCAP_KB=unlimited
  SANITIZED=1
else
  MEMCAP_KB=4000000
fi

# ------------------------------------------------------------------ checks

# A. Exit records are not consumed by observers.
check_A() {
  start_job a -- sh -c 'echo out; echo err >&2; exit 3' "a-$TAG"
  local end=$(($(now_ms) + 30000)) got=
  while [[ -n $REF ]] && (($(now_ms) < end)); do
    run a.poll status "@$WORK/a.ref"
    got=$(cat "$WORK/a.poll.out")
    [[ $STATUS -eq 0 && $got == "exited 3" ]] && break
    sleep 0.1
  done
  if [[ $STATUS -eq 0 && $got == "exited 3" ]]; then
    pass "A1 status of an exited job prints 'exited 3'"
  else
    fail "A1 status of an exited job prints 'exited 3'" "last status $STATUS, stdout '$got'" "$(err_of a.poll)"
  fi

  # Once more through each way of passing a reference.
  local how bad=()
  for how in file stdin argv; do
    case $how in
      file) run a.again status "@$WORK/a.ref" ;;
      stdin) STDIN=$WORK/a.ref run a.again status - ;;
      argv) run a.again status "$REF" ;;
    esac
    [[ $STATUS -eq 0 && $(cat "$WORK/a.again.out") == "exited 3" ]] ||
      bad+=("as $how: status $STATUS, stdout '$(cat "$WORK/a.again.out")', $(err_of a.again)")
  done
  check "A2 status repeats 'exited 3' (REF as @FILE, - and argv)" "${#bad[@]}" "${bad[@]}"

  run a.signal signal "@$WORK/a.ref" TERM
  if [[ $STATUS -eq 1 && -s $WORK/a.signal.err ]]; then
    pass "A3 signal to an exited job exits 1 with a message"
  else
    fail "A3 signal to an exited job exits 1 with a message" "status $STATUS, want 1" "$(err_of a.signal)"
  fi

  run a.kill kill "@$WORK/a.ref"
  expect_status "A4 kill of an exited job exits 0" 0 a.kill

  run a.wait wait "@$WORK/a.ref"
  if [[ $STATUS -eq 3 && $(od -An -c "$WORK/a.wait.out") == "$(printf 'out\n' | od -An -c)" &&
    $(od -An -c "$WORK/a.wait.err") == "$(printf 'err\n' | od -An -c)" ]]; then
    pass "A5 wait after those observers gives 'out\\n', 'err\\n' and exits 3"
  else
    fail "A5 wait after those observers gives 'out\\n', 'err\\n' and exits 3" "status $STATUS, want 3" \
      "$(out_of a.wait)" "$(err_of a.wait)"
  fi
}

# B. Observers whose reader goes away exit 141 and leave the job running.
check_B() {
  local mode cmd
  for mode in wait attach; do
    start_job "b$mode" -- sh -c 'i=0; while [ $i -lt 200000 ]; do echo line$i; i=$((i+1)); done; exit 4' "b-$TAG"
    local t0 st
    t0=$(now_ms)
    if [[ $mode == wait ]]; then
      timeout -k 5 60 "$TETHER" wait "@$WORK/b$mode.ref" </dev/null 2>"$WORK/b$mode.err" | head -n 1 >/dev/null
    else
      timeout -k 5 60 "$TETHER" attach "@$WORK/b$mode.ref" </dev/null 2>"$WORK/b$mode.err" | head -c 10 >/dev/null
    fi
    st=${PIPESTATUS[0]}
    local took=$(($(now_ms) - t0))
    cmd="tether $mode @ref | head"
    if [[ $st -eq 141 && $took -lt 20000 ]]; then
      pass "B $cmd: tether exits 141 (in ${took} ms)"
    else
      fail "B $cmd: tether exits 141 within 20 s" "status $st, want 141; took ${took} ms" "$(err_of "b$mode")"
    fi
    run "b$mode.later" wait "@$WORK/b$mode.ref"
    expect_status "B after '$cmd' the job was not terminated: a later wait exits 4" 4 "b$mode.later"
  done
}

# C. `tether run` whose stdout reader went away; stdout on a full device.
check_C() {
  local st
  timeout -k 5 60 "$TETHER" run -- sh -c 'trap "echo bye-on-stderr >&2; exit 0" TERM; while :; do echo y; sleep 0.01; done' \
    "c-$TAG" </dev/null 2>"$WORK/c.err" | head -n 1 >/dev/null
  st=${PIPESTATUS[0]}
  if [[ $st -eq 141 ]]; then
    pass "C1 run | head -n 1: tether exits 141"
  else
    fail "C1 run | head -n 1: tether exits 141" "status $st" "$(err_of c)"
  fi
  if grep -q bye-on-stderr "$WORK/c.err"; then
    pass "C2 run | head: the child's stderr is still forwarded after stdout went away"
  else
    fail "C2 run | head: the child's stderr is still forwarded after stdout went away" "$(err_of c)"
  fi
  if grep -Eq '^tether:.*stdout' "$WORK/c.err"; then
    pass "C3 run | head: a 'tether:' line says stdout went away"
  else
    fail "C3 run | head: a 'tether:' line says stdout went away" "$(err_of c)"
  fi

  st=0
  timeout -k 5 60 "$TETHER" run -- echo hi </dev/null >/dev/full 2>"$WORK/cfull.err" || st=$?
  if [[ $st -eq 125 ]] && grep -q 'No space left on device' "$WORK/cfull.err"; then
    pass "C4 run >/dev/full exits 125 with 'No space left on device'"
  else
    fail "C4 run >/dev/full exits 125 with 'No space left on device'" "status $st, want 125" "$(err_of cfull)"
  fi
}

# D. A client stopped (Ctrl-Z, SIGSTOP) for longer than the lease loses nothing.
check_D() {
  seq 1 300000 >"$WORK/d.want"
  rm -f "$WORK/d.ready"
  # The child says it runs, then writes while tether is stopped.
  bg_tether 90 "$WORK/d.out" "$WORK/d.err" run --lease-ms 1000 -- sh -c ': >"$1/d.ready"; sleep 1; seq 1 300000' \
    "d-$TAG" "$WORK"
  local why=
  if [[ -z $TPID ]]; then
    why="tether's pid was not found (the run never started)"
  elif ! poll 30 ready_or_exited "$WORK/d.ready" || [[ ! -e $WORK/d.ready ]]; then
    why="the child did not start within 30 s"
  else
    kill -STOP "$TPID" 2>/dev/null
    if poll 20 stopped "$TPID"; then
      sleep 5
    else
      why="tether (pid $TPID) was not seen stopped within 20 s"
    fi
    kill -CONT "$TPID" 2>/dev/null
  fi
  if [[ -n $why ]]; then
    [[ -z $TPID ]] || kill -KILL "$TPID" 2>/dev/null
    bg_status
    fail "D1 run --lease-ms 1000 stopped for 5 s exits 0" "$why" "$(err_of d)"
    fail "D2 run stopped for 5 s delivers exactly seq 1 300000" "(the run was not stopped)"
    return
  fi
  bg_status
  expect_status "D1 run --lease-ms 1000 stopped for 5 s exits 0" 0 d
  if cmp -s "$WORK/d.out" "$WORK/d.want"; then
    pass "D2 run stopped for 5 s delivers exactly seq 1 300000"
  else
    fail "D2 run stopped for 5 s delivers exactly seq 1 300000" \
      "got $(wc -c <"$WORK/d.out") bytes, want $(wc -c <"$WORK/d.want"): $(cmp "$WORK/d.out" "$WORK/d.want" 2>&1 | head -c 200)"
  fi
}

# E. `tether start` whose reference cannot be written fails and ends its child.
check_E() {
  local how st before
  for how in full closed; do
    st=0
    before=$(supervisor_pids)
    if [[ $how == full ]]; then
      timeout -k 5 30 "$TETHER" start -- sh -c 'echo $$ >"$1/e-full.pid"; exec sleep 100' "e-$how-$TAG" "$WORK" \
        </dev/null >/dev/full 2>"$WORK/e-$how.err" || st=$?
    else
      timeout -k 5 30 "$TETHER" start -- sh -c 'echo $$ >"$1/e-closed.pid"; exec sleep 100' "e-$how-$TAG" "$WORK" \
        </dev/null >&- 2>"$WORK/e-$how.err" || st=$?
    fi
    if [[ $st -eq 125 ]]; then
      pass "E start with stdout $how exits 125"
    else
      fail "E start with stdout $how exits 125" "status $st" "$(err_of "e-$how")"
    fi
    if poll 10 child_ended "e-$how-$TAG" "$WORK/e-$how.pid" "$before"; then
      pass "E start with stdout $how: its child ends (or never starts) within 10 s"
    else
      fail "E start with stdout $how: its child ends (or never starts) within 10 s" "$(pid_note "$WORK/e-$how.pid")" \
        "marked: $(pids_with "e-$how-$TAG" | tr '\n' ' ')" "new supervisors: $(new_supervisors "$before")"
    fi
  done
}

# F. Status and control while another client holds the attachment.
check_F() {
  start_job f -- sh -c 'echo f-attached; sleep 100' "f-$TAG"
  bg_tether 60 "$WORK/f.bgwait.out" "$WORK/f.bgwait.err" wait "@$WORK/f.ref"
  local waiter=$TPID
  # The observer holds the attachment once it has passed on the job's output.
  if ! poll 30 grep -q f-attached "$WORK/f.bgwait.out"; then
    fail "F1 status while another client is attached prints 'running pid N'" \
      "the observer did not attach within 30 s (tether wait's pid: ${waiter:-not found})" \
      "$(out_of f.bgwait)" "$(err_of f.bgwait)"
    fail "F2 signal CONT while another client is attached exits 0" "(not attached)"
    fail "F3 kill --grace 500 while another client is attached exits 0" "(not attached)"
    kill -KILL "${waiter:-$BG}" 2>/dev/null
    bg_status
    run f.cleanup kill "@$WORK/f.ref" --grace 200
    return
  fi
  run f.status status "@$WORK/f.ref"
  if [[ $STATUS -eq 0 ]] && is_running f.status; then
    pass "F1 status while another client is attached prints 'running pid N'"
  else
    fail "F1 status while another client is attached prints 'running pid N'" "status $STATUS" \
      "$(out_of f.status)" "$(err_of f.status)"
  fi
  run f.signal signal "@$WORK/f.ref" CONT
  expect_status "F2 signal CONT while another client is attached exits 0" 0 f.signal
  run f.kill kill "@$WORK/f.ref" --grace 500
  expect_status "F3 kill --grace 500 while another client is attached exits 0" 0 f.kill
  if poll 15 dead "$BG"; then
    bg_status
    expect_status "F4 the attached wait then exits 143" 143 f.bgwait
  else
    fail "F4 the attached wait then exits 143" "the wait did not end within 15 s" "$(err_of f.bgwait)"
    [[ -n $waiter ]] && kill -KILL "$waiter" 2>/dev/null # not forwarded to the job, unlike TERM
    bg_status
    run f.cleanup kill "@$WORK/f.ref" --grace 200
  fi
}

# G. The environment boundary: ambient secrets reach neither the child nor
# the supervisor; explicit values do.
SECRETS=(SECRET_TOKEN=s3cr3t-tok MYSQL_PWD=s3cr3t-pwd DATABASE_URL=postgres://u:s3cr3t-url@h/db
  SMTP_PASS=s3cr3t-smtp GH_PAT=s3cr3t-pat GOOGLE_APPLICATION_CREDENTIALS=/s3cr3t/gac.json
  SSH_AUTH_SOCK=/s3cr3t/agent KUBECONFIG=/s3cr3t/kube DOCKER_AUTH_CONFIG=s3cr3t-docker)

# secret_run NAME ARGS...: run with the secrets in tether's environment.
secret_run() {
  local name=$1
  shift
  STATUS=0
  env "${SECRETS[@]}" timeout -k 5 60 "$TETHER" "$@" </dev/null >"$WORK/$name.out" 2>"$WORK/$name.err" || STATUS=$?
}

check_G() {
  local names='SECRET_TOKEN|MYSQL_PWD|DATABASE_URL|SMTP_PASS|GH_PAT|GOOGLE_APPLICATION_CREDENTIALS|SSH_AUTH_SOCK|KUBECONFIG|DOCKER_AUTH_CONFIG'
  secret_run g1 run -- env
  if [[ $STATUS -eq 0 && -s $WORK/g1.out ]] && ! grep -Eq "^($names)=|s3cr3t" "$WORK/g1.out"; then
    pass "G1 no ambient secret reaches the child's environment"
  else
    fail "G1 no ambient secret reaches the child's environment" "status $STATUS" \
      "leaked: $(grep -E "^($names)=|s3cr3t" "$WORK/g1.out" | tr '\n' ' ')" "$(err_of g1)"
  fi

  secret_run g2 run -- sh -c 'cat /proc/$PPID/environ /proc/$PPID/cmdline' "g-$TAG"
  if [[ $STATUS -eq 0 ]] && grep -qa tether-supervisor "$WORK/g2.out" && ! grep -qa s3cr3t "$WORK/g2.out"; then
    pass "G2 no ambient secret in the daemon's environ or cmdline"
  else
    fail "G2 no ambient secret in the daemon's environ or cmdline" "status $STATUS" \
      "leaked: $(tr '\0' '\n' <"$WORK/g2.out" | grep -a s3cr3t | tr '\n' ' ' | head -c 400)" "$(err_of g2)"
  fi

  # The child lists every supervisor process of this root while it runs.
  secret_run g3 run -- sh -c 'n=0
    for d in /proc/[0-9]*; do
      a=$(tr "\0" "\n" 2>/dev/null <"$d/cmdline" | head -n 1)
      case $a in "$1/bin/tether-supervisor"*)
        n=$((n+1)); echo "== $d"; cat "$d/environ" "$d/cmdline" 2>/dev/null; echo ;;
      esac
    done
    echo "supervisors: $n"' "g-$TAG" "$TETHER_LOCAL_ROOT"
  local n
  n=$(grep -a '^supervisors: ' "$WORK/g3.out" | cut -d' ' -f2)
  if [[ $STATUS -eq 0 && ${n:-0} -ge 1 ]] && ! grep -qa s3cr3t "$WORK/g3.out"; then
    pass "G3 no ambient secret in any supervisor process ($n seen)"
  else
    fail "G3 no ambient secret in any supervisor process" "status $STATUS, supervisors seen: ${n:-none}" \
      "leaked: $(tr '\0' '\n' <"$WORK/g3.out" | grep -a -e s3cr3t -e '^== ' | tr '\n' ' ' | head -c 400)" "$(err_of g3)"
  fi

  secret_run g4 run --env GH_PAT=given -- env
  if [[ $STATUS -eq 0 ]] && grep -qx 'GH_PAT=given' "$WORK/g4.out"; then
    pass "G4 --env GH_PAT=given reaches the child"
  else
    fail "G4 --env GH_PAT=given reaches the child" "status $STATUS" "$(err_of g4)"
  fi

  local env_bin
  env_bin=$(command -v env)
  STATUS=0
  FOO_VISIBLE=1 timeout -k 5 60 "$TETHER" run --clean-env -- "$env_bin" </dev/null >"$WORK/g5.out" \
    2>"$WORK/g5.err" || STATUS=$?
  if [[ $STATUS -eq 0 ]] && ! grep -q FOO_VISIBLE "$WORK/g5.out"; then
    pass "G5 --clean-env passes no ambient variable"
  else
    fail "G5 --clean-env passes no ambient variable" "status $STATUS" "$(out_of g5)" "$(err_of g5)"
  fi
  run g6 run --clean-env --env A=1 -- "$env_bin"
  if [[ $STATUS -eq 0 ]] && grep -qx 'A=1' "$WORK/g6.out"; then
    pass "G6 --clean-env --env A=1 passes A=1"
  else
    fail "G6 --clean-env --env A=1 passes A=1" "status $STATUS" "$(out_of g6)" "$(err_of g6)"
  fi
}

# H. Reference input is bounded and checked before it is read.
check_H() {
  local how
  for how in @/dev/zero '- </dev/zero'; do
    STATUS=0
    local t0
    t0=$(now_ms)
    if [[ $how == @* ]]; then
      (ulimit -v "$MEMCAP_KB" && exec timeout -k 1 8 "$TETHER" status @/dev/zero) </dev/null >/dev/null \
        2>"$WORK/h.err" || STATUS=$?
    else
      (ulimit -v "$MEMCAP_KB" && exec timeout -k 1 8 "$TETHER" status -) </dev/zero >/dev/null \
        2>"$WORK/h.err" || STATUS=$?
    fi
    local took=$(($(now_ms) - t0))
    if [[ $STATUS -eq 2 && $took -lt 5000 ]] && grep -q 16384 "$WORK/h.err"; then
      pass "H status $how exits 2 naming the 16384-byte limit (${took} ms)"
    else
      fail "H status $how exits 2 naming the 16384-byte limit within 5 s" "status $STATUS, took ${took} ms" "$(err_of h)"
    fi
  done
  LIMIT=20 run h.dir status @/
  if [[ $STATUS -eq 2 ]] && grep -q directory "$WORK/h.dir.err"; then
    pass "H status @/ exits 2 saying it is a directory"
  else
    fail "H status @/ exits 2 saying it is a directory" "status $STATUS" "$(err_of h.dir)"
  fi
  LIMIT=20 run h.missing status @/nonexistent
  expect_status "H status @/nonexistent exits 2" 2 h.missing
}

# I. A tampered reference is refused before anything is run or opened.
check_I() {
  start_job i -- sh -c 'sleep 100' "i-$TAG"
  printf 'victim\n' >"$WORK/victim"
  cp "$WORK/victim" "$WORK/victim.orig"
  local key value n=0
  for key in supervisor state_dir state_dir; do
    n=$((n + 1))
    case $n in
      1) value=/bin/rm ;;
      2) value=$WORK/victim ;;
      3) value=$WORK ;;
    esac
    (umask 077 && python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
r[sys.argv[2]] = sys.argv[3]
sys.stdout.write(json.dumps(r))' "$WORK/i.ref" "$key" "$value" >"$WORK/i$n.ref")
    LIMIT=20 run "i$n" status "@$WORK/i$n.ref"
    local shown=${value/#"$WORK"/\$WORK}
    if [[ $STATUS -eq 2 ]] && cmp -s "$WORK/victim" "$WORK/victim.orig"; then
      pass "I$n a reference with $key=$shown is refused (2) and harms nothing"
    else
      fail "I$n a reference with $key=$shown is refused (2) and harms nothing" "status $STATUS, want 2;" \
        "victim: $(if [[ -e $WORK/victim ]]; then cmp -s "$WORK/victim" "$WORK/victim.orig" && echo intact || echo changed; else echo removed; fi)" \
        "$(out_of "i$n")" "$(err_of "i$n")"
    fi
    [[ -e $WORK/victim ]] || cp "$WORK/victim.orig" "$WORK/victim"
  done
  run i.kill kill "@$WORK/i.ref" --grace 200
  expect_status "I4 the real job is still under control: kill exits 0" 0 i.kill
}

# J. Unauthenticated connections do not lock the owner out.
check_J() {
  start_job j -- sh -c 'sleep 100' "j-$TAG"
  local state_dir
  state_dir=$(json_field "$WORK/j.ref" state_dir)
  cat >"$WORK/flood.py" <<'EOF'
# Opens up to N connections to DIR/sock that never say anything; writes
# "COUNT [last error]" to READY once it has as many as it could get.
import os, socket, sys, time
state_dir, ready, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.chdir(state_dir)  # a relative name: no sun_path length limit
socks, err = [], ""
for _ in range(n):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect("sock")
    except OSError as e:
        err = repr(e)
        s.close()
        break
    socks.append(s)
with open(ready + ".tmp", "w") as f:
    f.write(f"{len(socks)} {err}\n")
os.rename(ready + ".tmp", ready)
time.sleep(30)
EOF
  python3 "$WORK/flood.py" "$state_dir" "$WORK/j.ready" 60 </dev/null >"$WORK/flood.log" 2>&1 &
  local flooder=$!
  local got=
  poll 30 test -e "$WORK/j.ready" && got=$(cat "$WORK/j.ready")
  local bad=() k
  if [[ $got =~ ^[1-9] ]]; then
    for k in 1 2 3; do
      LIMIT=20 run "j$k" status "@$WORK/j.ref"
      if ! [[ $STATUS -eq 0 ]] || ! is_running "j$k"; then
        bad+=("status #$k: exit $STATUS, $(out_of "j$k"), $(err_of "j$k")")
        break # each further try would wait out its limit the same way
      fi
    done
  else
    bad+=("the flooder did not connect: '${got}' $(head -c 300 "$WORK/flood.log")")
  fi
  check "J1 status answers 3 times while ${got%% *} silent connections are open" "${#bad[@]}" "${bad[@]}"
  kill -KILL "$flooder" 2>/dev/null
  wait "$flooder" 2>/dev/null
  run j.kill kill "@$WORK/j.ref" --grace 200
}

# K. The working directory is the caller's, relative --cwd is resolved there.
check_K() {
  local here
  here=$(cd "$WORK" && pwd -P)
  mkdir -p "$WORK/sub"
  STATUS=0
  (cd "$WORK" && exec timeout -k 5 60 "$TETHER" run -- pwd) </dev/null >"$WORK/k1.out" 2>"$WORK/k1.err" || STATUS=$?
  if [[ $STATUS -eq 0 && $(cat "$WORK/k1.out") == "$here" ]]; then
    pass "K1 run -- pwd prints the caller's directory"
  else
    fail "K1 run -- pwd prints the caller's directory" "status $STATUS, want '$here'" "$(out_of k1)" "$(err_of k1)"
  fi
  STATUS=0
  (cd "$WORK" && exec timeout -k 5 60 "$TETHER" run --cwd sub -- pwd) </dev/null >"$WORK/k2.out" 2>"$WORK/k2.err" || STATUS=$?
  if [[ $STATUS -eq 0 && $(cat "$WORK/k2.out") == "$here/sub" ]]; then
    pass "K2 run --cwd sub resolves sub against the caller's directory"
  else
    fail "K2 run --cwd sub resolves sub against the caller's directory" "status $STATUS, want '$here/sub'" \
      "$(out_of k2)" "$(err_of k2)"
  fi
  # The sandbox's ${TMPDIR:-/tmp}/tether-<uid> goes under $WORK, should it run.
  mkdir -m 700 "$WORK/ctmp"
  STATUS=0
  (cd "$WORK" && TMPDIR=$WORK/ctmp exec timeout -k 5 60 "$TETHER" run --provider command --prefix 'sh -c' \
    --cwd sub -- pwd) </dev/null >"$WORK/k3.out" 2>"$WORK/k3.err" || STATUS=$?
  expect_status "K3 a relative --cwd on a remote provider is a usage error (2)" 2 k3
}

# L. Signal bursts at a running and exiting job never crash tether.
check_L() {
  local i k sig sent statuses=() nbad=0
  # The child ignores the signals tether forwards. It waits for `fire` so
  # that the burst starts once the run is surely attached (a signal during
  # setup cancels the start instead: see M), then exits during the burst.
  local script='trap "" HUP TERM INT; : >"$1/l.ready"; n=0
    while [ ! -e "$1/l.fire" ] && [ $n -lt 2000 ]; do sleep 0.01; n=$((n+1)); done
    i=0; while [ $i -lt 300 ]; do i=$((i+1)); done; exit 5'
  for i in $(seq 1 20); do
    rm -f "$WORK/l.ready" "$WORK/l.fire"
    bg_tether 60 /dev/null "$WORK/l.err" run -- sh -c "$script" "l-$TAG" "$WORK"
    poll 30 ready_or_exited "$WORK/l.ready"
    sleep 0.2
    # The first signals go while the child still waits for `fire`, so
    # tether is surely alive for them: a burst that reaches tether does
    # not depend on how fast a loaded machine runs this loop after fire.
    sent=0
    for ((k = 1; k <= 30; k++)); do
      case $((k % 3)) in 0) sig=HUP ;; 1) sig=TERM ;; 2) sig=INT ;; esac
      [[ -n $TPID ]] && kill -"$sig" "$TPID" 2>/dev/null && sent=$k
    done
    : >"$WORK/l.fire"
    # Back-to-back signals while the child runs and exits and tether ends
    # (the window that matters, teardown, is short), at most 20000.
    for ((k = 31; k <= 20000; k++)); do
      case $((k % 3)) in 0) sig=HUP ;; 1) sig=TERM ;; 2) sig=INT ;; esac
      [[ -n $TPID ]] || break
      kill -"$sig" "$TPID" 2>/dev/null || break
      sent=$k
    done
    bg_status
    # A burst that never reached tether (its pid not found, or gone before
    # the first signal) tests nothing: it counts as a failure.
    if [[ $sent -eq 0 ]]; then
      statuses+=("$STATUS(no signal sent: tether's pid ${TPID:-not found})")
    else
      statuses+=("$STATUS")
    fi
    if [[ $STATUS -ne 5 || $sent -eq 0 ]]; then
      nbad=$((nbad + 1))
      [[ -e $WORK/l.err.first-bad ]] || cp "$WORK/l.err" "$WORK/l.err.first-bad"
    fi
  done
  check "L1 20 runs under bursts of HUP/TERM/INT all exit 5" "$nbad" "statuses: ${statuses[*]}" \
    "(the child ignores these signals: 128+N is tether itself dying of signal N or forwarding it as its own)" \
    "stderr of a bad one: $(head -c 300 "$WORK/l.err.first-bad" 2>/dev/null | tr '\n' '|')"

  # --pty with a burst of SIGWINCH (tether needs no terminal of its own).
  run l.pty run --pty -- true
  if [[ $STATUS -ne 0 ]]; then
    printf 'skip  L2 run --pty under SIGWINCH bursts (run --pty cannot run here: %s)\n' "$(err_of l.pty)"
    return
  fi
  statuses=()
  nbad=0
  script=': >"$1/l.ready"; n=0
    while [ ! -e "$1/l.fire" ] && [ $n -lt 2000 ]; do sleep 0.01; n=$((n+1)); done; exit 6'
  for i in 1 2 3 4 5; do
    rm -f "$WORK/l.ready" "$WORK/l.fire"
    bg_tether 60 /dev/null "$WORK/l.err" run --pty -- sh -c "$script" "l-$TAG" "$WORK"
    poll 30 ready_or_exited "$WORK/l.ready"
    sleep 0.2
    # Half the burst while the child waits for `fire` (tether surely
    # alive), half while it exits and tether ends.
    sent=0
    for k in $(seq 1 50); do
      [[ -n $TPID ]] && kill -WINCH "$TPID" 2>/dev/null && sent=$k
      [[ $k -eq 25 ]] && : >"$WORK/l.fire"
      sleep 0.002
    done
    bg_status
    if [[ $sent -eq 0 ]]; then
      statuses+=("$STATUS(no SIGWINCH sent: tether's pid ${TPID:-not found})")
    else
      statuses+=("$STATUS")
    fi
    [[ $STATUS -eq 6 && $sent -gt 0 ]] || nbad=$((nbad + 1))
  done
  check "L2 5 runs --pty under bursts of SIGWINCH all exit 6" "$nbad" "statuses: ${statuses[*]}"
}

# M. A signal during setup cancels the start and orphans nothing: a child
# the launch already started is ended by its cancellation marker
# (supervisor/cancel_watch.h) within about 2 s, not by a lease (the default
# 30 s: past the 10 s M2 waits).
check_M() {
  local base i delay before statuses=() bad_status=0 orphans=()
  base=$(supervisor_pids | wc -l)
  i=0
  for delay in 0 0.002 0.005 0.01 0.02 0.05 0.1 0.2 0.3 0.5; do
    i=$((i + 1))
    before=$(supervisor_pids)
    bg_tether 20 /dev/null "$WORK/m$i.err" run -- sh -c 'echo $$ >"$1/m$2.pid"; exec sleep 100' \
      "m$i-$TAG" "$WORK" "$i"
    [[ $delay != 0 ]] && sleep "$delay"
    if [[ -n $TPID ]]; then
      kill -TERM "$TPID" 2>/dev/null
      bg_status
      statuses+=("$delay:$STATUS")
    else
      bg_status
      statuses+=("$delay:$STATUS(tether's pid not found, not signalled)")
      STATUS=-1
    fi
    [[ $STATUS -eq 143 || $STATUS -eq 125 ]] || bad_status=$((bad_status + 1))
    # (The child may never have started: then nothing must be left that could start it.)
    poll 10 child_ended "m$i-$TAG" "$WORK/m$i.pid" "$before" ||
      orphans+=("delay $delay: $(pid_note "$WORK/m$i.pid"), marked: $(pids_with "m$i-$TAG" | tr '\n' ' ')new supervisors: $(new_supervisors "$before")")
  done
  check "M1 SIGTERM during setup gives 143 (or 125), never a crash" "$bad_status" "delay:status ${statuses[*]}" \
    "$(err_of m1)"
  check "M2 SIGTERM during setup leaves no child running" "${#orphans[@]}" "${orphans[@]}"
  if poll 10 supervisors_at_most "$base"; then
    pass "M3 SIGTERM during setup leaves no supervisor daemon"
  else
    fail "M3 SIGTERM during setup leaves no supervisor daemon" "$(supervisor_pids | wc -l) daemons, $base before"
  fi
}

# N. Closed standard descriptors.
check_N() {
  STATUS=0
  local t0
  t0=$(now_ms)
  timeout -k 5 30 "$TETHER" run -- cat <&- >"$WORK/n1.out" 2>"$WORK/n1.err" || STATUS=$?
  local took=$(($(now_ms) - t0))
  if [[ $STATUS -eq 0 && $took -lt 20000 && ! -s $WORK/n1.out ]]; then
    pass "N1 run -- cat with stdin closed exits 0 with no output (${took} ms)"
  else
    fail "N1 run -- cat with stdin closed exits 0 with no output within 20 s" "status $STATUS, took ${took} ms" \
      "$(out_of n1)" "$(err_of n1)"
  fi
  STATUS=0
  timeout -k 5 30 "$TETHER" run -- sh -c 'echo out; echo err >&2' "n-$TAG" </dev/null >&- 2>"$WORK/n2.err" || STATUS=$?
  if [[ $STATUS -eq 0 ]] && grep -qx err "$WORK/n2.err"; then
    pass "N2 run with stdout closed exits 0 and still forwards stderr"
  else
    fail "N2 run with stdout closed exits 0 and still forwards stderr" "status $STATUS" "$(err_of n2)"
  fi
  STATUS=0
  timeout -k 5 30 "$TETHER" run -- true <&- >&- 2>&- || STATUS=$?
  if [[ $STATUS -eq 0 ]]; then
    pass "N3 run -- true with stdin, stdout and stderr closed exits 0"
  else
    fail "N3 run -- true with stdin, stdout and stderr closed exits 0" "status $STATUS"
  fi
}

# O. Descriptor exhaustion is a clear message and 125, never a crash.
check_O() {
  local n
  if [[ $SANITIZED -eq 1 ]]; then
    # The sanitizer runtimes need descriptors of their own (UBSan's type
    # checks then report every virtual call as a bad vptr): this is for the
    # release build, where tether's own handling is what is measured.
    printf 'skip  O descriptor exhaustion (sanitized build: its runtime needs the descriptors; checked in release)\n'
    return
  fi
  for n in 6 8 10 12 14 16 20; do
    STATUS=0
    (ulimit -n "$n" && exec timeout -k 5 30 "$TETHER" run -- true) </dev/null >"$WORK/o$n.out" 2>"$WORK/o$n.err" ||
      STATUS=$?
    if [[ $STATUS -eq 0 ]] || [[ $STATUS -eq 125 && $(head -c 7 "$WORK/o$n.err") == tether: ]]; then
      pass "O ulimit -n $n: run exits $STATUS"
    else
      fail "O ulimit -n $n: run exits 0, or 125 with a 'tether:' message" "status $STATUS" "$(err_of "o$n")"
    fi
  done
}

# P. `tether run` killed with SIGKILL leaves nothing behind.
check_P() {
  local base
  base=$(supervisor_pids | wc -l)
  bg_tether 60 /dev/null "$WORK/p.err" run --lease-ms 1000 -- sh -c 'echo $$ >"$1/p.pid"; exec sleep 100' "p-$TAG" "$WORK"
  if ! poll 20 ready_or_exited "$WORK/p.pid" || [[ ! -s $WORK/p.pid ]]; then
    bg_status
    fail "P1 run killed with SIGKILL: its child ends within 15 s" "p.pid never appeared; tether exited $STATUS" \
      "$(err_of p)"
    fail "P2 run killed with SIGKILL: no supervisor daemon remains" "(the run never started)"
    return
  fi
  if [[ -z $TPID ]]; then
    kill -KILL "$BG" 2>/dev/null
    bg_status
    fail "P1 run killed with SIGKILL: its child ends within 15 s" "tether's pid was not found: nothing was killed"
    fail "P2 run killed with SIGKILL: no supervisor daemon remains" "(tether was not killed)"
    return
  fi
  kill -KILL "$TPID"
  bg_status
  local child
  child=$(cat "$WORK/p.pid")
  if poll 15 dead "$child"; then
    pass "P1 run killed with SIGKILL: its child ends within 15 s"
  else
    fail "P1 run killed with SIGKILL: its child ends within 15 s" "$(pid_note "$WORK/p.pid")"
  fi
  if poll 15 supervisors_at_most "$base"; then
    pass "P2 run killed with SIGKILL: no supervisor daemon remains"
  else
    fail "P2 run killed with SIGKILL: no supervisor daemon remains" "$(supervisor_pids | wc -l) daemons, $base before"
  fi
}

# Q. `tether kill` ends the job's descendants, even those that escaped its
# process group and ignore SIGTERM: new sessions (setsid, and setsid -f,
# whose parent exits at once), a new process group in the same session
# (setpgrp), and their children; all gone within the grace plus the
# supervisor's sweep (kOrphanSweepMs, 3 s) plus 2 s for tether itself, ten
# times over.
Q_ROUNDS=10
Q_GRACE_MS=300
Q_BOUND_MS=$((Q_GRACE_MS + 3000 + 2000))
check_Q() {
  local round mark t0 ms left kst worst=0 bad=()
  local script='for i in 1 2 3; do
      setsid sh -c "trap \"\" TERM; while :; do sleep 1; done" "$1" &
      setsid -f sh -c "trap \"\" TERM; while :; do sleep 1; done" "$1"
      perl -e "\$SIG{TERM} = q(IGNORE); setpgrp(0, 0); fork; sleep 1000" "$1" &
    done
    sleep 1000'
  for ((round = 1; round <= Q_ROUNDS; round++)); do
    mark="q$round-$TAG"
    start_job "q$round" --no-stdin -- sh -c "$script" "$mark" "$mark"
    # The job, 3 + 3 shells in new sessions, 3 x 2 perls in their own groups.
    if ! poll 10 at_least_with 13 "$mark"; then
      bad+=("round $round: the job's descendants never appeared: $(pids_with "$mark" | wc -l) of 13 processes")
      run "q$round.kill" kill "@$WORK/q$round.ref" --grace "$Q_GRACE_MS"
    else
      t0=$(now_ms)
      run "q$round.kill" kill "@$WORK/q$round.ref" --grace "$Q_GRACE_MS"
      kst=$STATUS
      poll 10 none_with "$mark"
      ms=$(($(now_ms) - t0))
      ((ms > worst)) && worst=$ms
      if [[ $kst -ne 0 ]] || ! none_with "$mark" || ((ms > Q_BOUND_MS)); then
        bad+=("round $round: kill status $kst, after $ms ms left: $(for p in $(pids_with "$mark"); do
          printf '%s(%s) ' "$p" "$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | head -c 40)"
        done) $(err_of "q$round.kill")")
      fi
    fi
    for left in $(pids_with "$mark"); do kill -KILL "$left" 2>/dev/null; done
  done
  check "Q kill --grace $Q_GRACE_MS leaves no escaped descendant within $Q_BOUND_MS ms ($Q_ROUNDS rounds, slowest ${worst} ms)" \
    "${#bad[@]}" "${bad[@]}"

  # A chain of escapees, each in a new session started by the one before
  # and ignoring SIGTERM: killing them level by level (each reparented only
  # once its parent died) took a round per level, so the time grew with the
  # depth and a loaded machine ran out of sweep. All of it goes at once.
  local depth=60 chain='trap "" TERM; n=$1
    if [ "$n" -gt 0 ]; then setsid sh -c "$2" "$0" $((n - 1)) "$2" & fi
    while :; do sleep 1; done'
  bad=()
  worst=0
  for ((round = 1; round <= 3; round++)); do
    mark="qc$round-$TAG"
    start_job "qc$round" --no-stdin -- sh -c "$chain" "$mark" "$depth" "$chain"
    if ! poll 20 at_least_with $((depth + 1)) "$mark"; then
      bad+=("round $round: the chain never grew: $(pids_with "$mark" | wc -l) of $((depth + 1)) processes")
      run "qc$round.kill" kill "@$WORK/qc$round.ref" --grace "$Q_GRACE_MS"
    else
      t0=$(now_ms)
      run "qc$round.kill" kill "@$WORK/qc$round.ref" --grace "$Q_GRACE_MS"
      kst=$STATUS
      poll 10 none_with "$mark"
      ms=$(($(now_ms) - t0))
      ((ms > worst)) && worst=$ms
      if [[ $kst -ne 0 ]] || ! none_with "$mark" || ((ms > Q_BOUND_MS)); then
        bad+=("round $round: kill status $kst, after $ms ms $(pids_with "$mark" | wc -l) of $((depth + 1)) left")
      fi
    fi
    for left in $(pids_with "$mark"); do kill -KILL "$left" 2>/dev/null; done
  done
  check "Q kill --grace $Q_GRACE_MS ends a chain of $depth nested setsid escapees within $Q_BOUND_MS ms (slowest ${worst} ms)" \
    "${#bad[@]}" "${bad[@]}"
}

# R. Temporary directories: TMPDIR is honoured, and only when absolute.
check_R() {
  mkdir -m 700 "$WORK/tmpdir" "$WORK/rel"
  STATUS=0
  env -u TETHER_LOCAL_ROOT -u XDG_RUNTIME_DIR TMPDIR="$WORK/tmpdir" timeout -k 5 60 "$TETHER" run -- true \
    </dev/null >"$WORK/r1.out" 2>"$WORK/r1.err" || STATUS=$?
  if [[ $STATUS -eq 0 ]] && compgen -G "$WORK/tmpdir/tether-local-*" >/dev/null; then
    pass "R1 without TETHER_LOCAL_ROOT the local root goes under \$TMPDIR"
  else
    fail "R1 without TETHER_LOCAL_ROOT the local root goes under \$TMPDIR" "status $STATUS" \
      "in \$TMPDIR: $(find "$WORK/tmpdir" -mindepth 1 -maxdepth 1 -printf '%f ')" "$(err_of r1)"
  fi
  STATUS=0
  (cd "$WORK/rel" && TMPDIR=relative exec timeout -k 5 60 "$TETHER" run --provider command --prefix 'sh -c' -- true) \
    </dev/null >"$WORK/r2.out" 2>"$WORK/r2.err" || STATUS=$?
  if [[ $STATUS -eq 0 && ! -e $WORK/rel/relative ]]; then
    pass "R2 a relative TMPDIR is ignored (exit 0, nothing made in the current directory)"
  else
    fail "R2 a relative TMPDIR is ignored (exit 0, nothing made in the current directory)" "status $STATUS" \
      "in the current directory: $(find "$WORK/rel" -mindepth 1 -maxdepth 1 -printf '%f ')" "$(err_of r2)"
  fi
}

# S. A reference given in argv leaves /proc/PID/cmdline once it was read:
# a long-lived `wait` or `attach` shows every other user no secret.
# (`status`, `signal` and `kill` take the same path, too briefly to catch.)
check_S() {
  local cmd secret tp cmdline
  start_job s --no-stdin -- sh -c 'echo started; exec sleep 100' "s-$TAG"
  if [[ -z $REF ]]; then
    fail "S a reference in argv is gone from /proc/PID/cmdline" "the job did not start"
    return
  fi
  secret=$(json_field "$WORK/s.ref" secret)
  for cmd in wait attach; do
    bg_tether 60 "$WORK/s.$cmd.out" "$WORK/s.$cmd.err" "$cmd" "$REF"
    tp=$TPID
    # Waiting: it has attached and written the job's output.
    if [[ -z $tp ]] || ! poll 20 grep -q started "$WORK/s.$cmd.out"; then
      fail "S $cmd \$REF: the reference's secret is gone from /proc/PID/cmdline" \
        "tether never got to waiting: $(err_of "s.$cmd")"
    else
      cmdline=$(tr '\0' ' ' <"/proc/$tp/cmdline" 2>/dev/null)
      if [[ $cmdline == *" $cmd "* && $cmdline != *"$secret"* && $cmdline != *"secret"* ]]; then
        pass "S $cmd \$REF: the reference's secret is gone from /proc/PID/cmdline"
      else
        fail "S $cmd \$REF: the reference's secret is gone from /proc/PID/cmdline" \
          "cmdline: $(head -c 300 <<<"$cmdline")"
      fi
    fi
    kill -TERM "$tp" 2>/dev/null # (forwarded to the job: the next round starts a new one)
    bg_status
    if [[ $cmd == wait ]]; then
      start_job s --no-stdin -- sh -c 'echo started; exec sleep 100' "s-$TAG"
      secret=$(json_field "$WORK/s.ref" secret)
    fi
  done
  run s.kill kill "@$WORK/s.ref" --grace 300
}

# T. A reader killed mid-way, and resuming at a byte offset.
# The producer: 88 000 numbered lines (1.32 MB) in 20 paced batches.
T_PRODUCER='b=0; while [ $b -lt 20 ]; do seq -f "line %09g" $((b * 4400 + 1)) $((b * 4400 + 4400)); b=$((b + 1)); sleep 0.15; done'
# t_killed_reader NAME: starts the producer as job NAME and a `wait` that
# appends to $WORK/NAME.out, SIGKILLed once that holds 400 KB. 0 when it
# was killed mid-way (the job still running).
t_killed_reader() {
  local name=$1 tp
  start_job "$name" --no-stdin -- sh -c "$T_PRODUCER" "t-$TAG"
  [[ -n $REF ]] || return 1
  : >"$WORK/$name.out"
  timeout -k 5 60 "$TETHER" wait "@$WORK/$name.ref" </dev/null >>"$WORK/$name.out" 2>"$WORK/$name.err1" &
  BG=$!
  tp=$(tether_child "$BG")
  poll 30 eval '(($(stat -c %s "$WORK/$name.out") >= 400000))'
  [[ -n $tp ]] && kill -KILL "$tp" 2>/dev/null
  bg_status
  local size
  size=$(stat -c %s "$WORK/$name.out")
  ((size >= 400000 && size < 1320000)) || {
    echo "note  the first reader of $name was not killed mid-way: $size bytes, status $STATUS"
    return 1
  }
}
# lost_note FILE: a reader's stderr says output was lost.
lost_note() { grep -Eq 'lost|dropped' "$1"; }

check_T() {
  seq -f "line %09g" 1 88000 >"$WORK/t.expected"
  local size

  # T1: exact resume with --stdout-from after a SIGKILLed reader.
  if t_killed_reader t1; then
    size=$(stat -c %s "$WORK/t1.out")
    run t1.resume wait "@$WORK/t1.ref" --stdout-from "$size"
    cat "$WORK/t1.resume.out" >>"$WORK/t1.out"
    if [[ $STATUS -eq 0 ]] && cmp -s "$WORK/t1.out" "$WORK/t.expected" && ! lost_note "$WORK/t1.resume.err"; then
      pass "T1 wait --stdout-from \$(stat -c %s out) after a SIGKILLed reader: the file is exact"
    else
      fail "T1 wait --stdout-from \$(stat -c %s out) after a SIGKILLed reader: the file is exact" \
        "status $STATUS; killed at $size bytes; file $(stat -c %s "$WORK/t1.out") bytes, want $(stat -c %s "$WORK/t.expected")" \
        "$(cmp "$WORK/t1.out" "$WORK/t.expected" 2>&1 | head -1)" "$(err_of t1.resume)"
    fi
  else
    fail "T1 wait --stdout-from \$(stat -c %s out) after a SIGKILLed reader: the file is exact" "no reader to kill"
  fi

  # T2: a plain second wait after a SIGKILLed reader: nothing was dropped,
  # so nothing is said to be lost, and the output ends exactly.
  if t_killed_reader t2; then
    run t2.again wait "@$WORK/t2.ref"
    if [[ $STATUS -eq 0 ]] && ! lost_note "$WORK/t2.again.err" &&
      [[ $(tail -c 15 "$WORK/t2.again.out") == "line 000088000" ]]; then
      pass "T2 a second wait after a SIGKILLed reader says nothing was lost (nothing was)"
    else
      fail "T2 a second wait after a SIGKILLed reader says nothing was lost (nothing was)" "status $STATUS" \
        "$(err_of t2.again)" "ends with: $(tail -c 15 "$WORK/t2.again.out")"
    fi
  else
    fail "T2 a second wait after a SIGKILLed reader says nothing was lost (nothing was)" "no reader to kill"
  fi

  # T3: 3 MB while nobody is attached overflow the 1 MiB ring: the gap is
  # reported with its size, and what arrives is exactly the newest bytes.
  start_job t3 --no-stdin -- sh -c 'seq -f "line %09g" 1 200000' "t-$TAG"
  seq -f "line %09g" 1 200000 >"$WORK/t3.expected"
  poll 30 eval 'run t3.st status "@$WORK/t3.ref"; [[ $(cat "$WORK/t3.st.out") == "exited 0" ]]'
  run t3 wait "@$WORK/t3.ref" --stdout-from 0
  local n total got
  n=$(sed -n 's/^tether: \([0-9]*\) bytes of stdout were lost.*/\1/p' "$WORK/t3.err")
  total=$(stat -c %s "$WORK/t3.expected")
  got=$(stat -c %s "$WORK/t3.out")
  if [[ $STATUS -eq 0 && -n $n ]] && ((n + got == total)) &&
    cmp -s "$WORK/t3.out" <(tail -c "$got" "$WORK/t3.expected"); then
    pass "T3 bytes dropped while nobody was attached are reported with their count ($n)"
  else
    fail "T3 bytes dropped while nobody was attached are reported with their count" \
      "status $STATUS; reported '${n}', received $got, produced $total" "$(err_of t3)"
  fi

  # T4: bad offsets are usage errors (exit 2), nothing read.
  start_job t4 --no-stdin -- sh -c 'echo hi; exec sleep 100' "t-$TAG"
  local v bad=()
  for v in -1 abc "" 1e3 " 5" 99999999999999999999999; do
    run t4.bad wait "@$WORK/t4.ref" --stdout-from "$v"
    [[ $STATUS -eq 2 && ! -s $WORK/t4.bad.out ]] && grep -q -- '--stdout-from' "$WORK/t4.bad.err" ||
      bad+=("'$v': status $STATUS, $(err_of t4.bad)")
  done
  run t4.bad attach "@$WORK/t4.ref" --stderr-from
  [[ $STATUS -eq 2 ]] || bad+=("--stderr-from without a value: status $STATUS")
  run t4.bad status "@$WORK/t4.ref" --stdout-from 0
  [[ $STATUS -eq 2 ]] || bad+=("status --stdout-from: status $STATUS")
  poll 10 eval 'run t4.st status "@$WORK/t4.ref"; grep -q running "$WORK/t4.st.out"'
  run t4.beyond wait "@$WORK/t4.ref" --stdout-from 1000
  [[ $STATUS -eq 2 && ! -s $WORK/t4.beyond.out ]] && grep -q 'beyond' "$WORK/t4.beyond.err" ||
    bad+=("beyond what was produced: status $STATUS, $(err_of t4.beyond)")
  check "T4 bad --stdout-from/--stderr-from values are usage errors (exit 2)" "${#bad[@]}" "${bad[@]}"
  run t4.kill kill "@$WORK/t4.ref" --grace 300

  # T5: each stream resumes at its own offset: stdout from byte 4, stderr
  # from byte 8; one without the other starts the other at 0. (A wait that
  # saw the exit ends the record: one job per wait.)
  bad=()
  local job from want_out want_err
  for job in t5a t5b; do
    start_job "$job" --no-stdin -- sh -c 'printf OUT-0123456789; printf ERR-abcdefghij >&2' "t-$TAG"
    poll 30 eval 'run $job.st status "@$WORK/$job.ref"; [[ $(cat "$WORK/$job.st.out") == "exited 0" ]]'
    if [[ $job == t5a ]]; then
      from=(--stdout-from 4 --stderr-from 8) want_out=0123456789 want_err=efghij
    else
      from=(--stderr-from 13) want_out=OUT-0123456789 want_err=j
    fi
    run "$job.wait" wait "@$WORK/$job.ref" "${from[@]}"
    [[ $STATUS -eq 0 && $(cat "$WORK/$job.wait.out") == "$want_out" && $(cat "$WORK/$job.wait.err") == "$want_err" ]] ||
      bad+=("${from[*]}: status $STATUS, stdout '$(cat "$WORK/$job.wait.out")' (want '$want_out'), stderr '$(cat "$WORK/$job.wait.err")' (want '$want_err')")
  done
  check "T5 --stdout-from and --stderr-from resume each stream at its own byte" "${#bad[@]}" "${bad[@]}"
}

for letter in ${TETHER_HARDENING_ONLY:-A B C D E F G H I J K L M N O P Q R S T}; do
  "check_$letter"
done

echo "$CHECKS checks, $FAILED failed"
[[ $FAILED -eq 0 ]]
