#!/usr/bin/env bash
# A sandbox whose /tmp cannot hold a program, for real: inside an
# unprivileged user and mount namespace (unshare --map-root-user --mount)
# /tmp is a tmpfs mounted noexec, and `tether run --provider command`
# (whose channel is `sh -c`, so the start script decides everything) must
#   1. pass over /tmp, install the supervisor in /var/tmp/tether-0 and run;
#   2. with /tmp read-only instead, do the same;
#   3. with every candidate directory noexec, fail (exit 125) with a message
#      naming the cause, and run nothing.
#
#   tests/cli/noexec_test.sh path/to/tether
set -euo pipefail

if [[ $# -ne 1 || ! -x $1 ]]; then
  echo "usage: $0 PATH_TO_TETHER" >&2
  exit 2
fi
TETHER=$(realpath -e "$1")
# tether reads its supervisors from here (ctest sets it: the build tree's).
SUPDIR=
if [[ -n ${TETHER_SUPERVISOR_DIR:-} && -d $TETHER_SUPERVISOR_DIR ]]; then
  SUPDIR=$(realpath -e "$TETHER_SUPERVISOR_DIR")
fi
if ! unshare --map-root-user --mount true 2>/dev/null; then
  echo "noexec_test: unshare --map-root-user --mount is not allowed here" >&2
  exit 1
fi

fails=0
check() {  # check NAME DETAIL COMMAND...: ok when COMMAND succeeds, else FAIL with DETAIL
  local name=$1 detail=$2
  shift 2
  if "$@"; then
    echo "ok    $name"
  else
    echo "FAIL  $name${detail:+: $detail}"
    fails=$((fails + 1))
  fi
}
has() { grep -q -- "$1" <<<"$out"; }    # a line of $out matches $1
lacks() { ! has "$1"; }


# `hold PATH...` for the namespace script (tests/lib/ns_hold.sh): keeps the
# build tree reachable before /tmp and the other candidates are mounted over.
hold_fn=$(<"$(dirname "${BASH_SOURCE[0]}")/../lib/ns_hold.sh")

# in_ns SETUP ARGS...: runs SETUP (mount commands) then `tether ARGS...` in a
# fresh namespace; /var/tmp, /dev/shm and HOME are fresh tmpfs mounts too, so
# nothing outside changes. tether and its supervisors are held first (see
# hold) and the working directory is /, so none of it depends on where the
# build tree lives.
in_ns() {
  local setup=$1
  shift
  unshare --map-root-user --mount bash -c "$hold_fn"'
    set -e
    cd /
    tether=$1 supdir=$2
    shift 2
    hold "$tether" ${supdir:+"$supdir"}
    tether=${held[0]}
    if [[ -n $supdir ]]; then export TETHER_SUPERVISOR_DIR=${held[1]}; fi
    mount -t tmpfs tmpfs /var/tmp
    mount -t tmpfs tmpfs /dev/shm
    mkdir -p /var/tmp/home
    '"$setup"'
    export HOME=/var/tmp/home
    unset TMPDIR
    "$tether" "$@"' ns "$TETHER" "$SUPDIR" "$@"
}

run_echo() { in_ns "$1" run --provider command --prefix 'sh -c' -- sh -c 'echo hi; ls -d /var/tmp/tether-*/bin/tether-supervisor-* /tmp/tether-*/bin/tether-supervisor-* 2>/dev/null || true'; }

out=$(run_echo 'mount -t tmpfs -o noexec tmpfs /tmp' 2>&1) && rc=0 || rc=$?
check "/tmp noexec: the run succeeds" "exit $rc: $out" test "$rc" -eq 0
check "/tmp noexec: the child's output arrives" "$out" test "${out:0:2}" = hi
check "/tmp noexec: the supervisor went to /var/tmp" "$out" has '^/var/tmp/tether-0/bin/tether-supervisor-'
check "/tmp noexec: nothing was installed in /tmp" "$out" lacks '^/tmp/tether-'

out=$(run_echo 'mount -t tmpfs -o ro tmpfs /tmp' 2>&1) && rc=0 || rc=$?
check "/tmp read-only: the run succeeds" "exit $rc: $out" test "$rc" -eq 0
check "/tmp read-only: the supervisor went to /var/tmp" "$out" has '^/var/tmp/tether-0/bin/tether-supervisor-'

flag=/var/tmp/ran
out=$(in_ns 'mount -t tmpfs -o noexec tmpfs /tmp; mount -o remount,noexec /var/tmp; mount -o remount,noexec /dev/shm' \
  run --provider command --prefix 'sh -c' -- sh -c "touch $flag" 2>&1) && rc=0 || rc=$?
check "everything noexec: tether fails (125)" "exit $rc: $out" test "$rc" -eq 125
check "everything noexec: the message names the cause" "$out" \
  has 'no private directory in the sandbox can hold an executable supervisor'
check "everything noexec: the message names each directory" "$out" has '/tmp/tether-0: mounted noexec'

if [[ $fails -ne 0 ]]; then
  echo "$fails check(s) failed"
  exit 1
fi
echo "all checks passed"
