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
TETHER=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
if ! unshare --map-root-user --mount true 2>/dev/null; then
  echo "noexec_test: unshare --map-root-user --mount is not allowed here" >&2
  exit 1
fi

fails=0
check() {  # check NAME CONDITION-EXIT-STATUS [DETAIL]
  if [[ $2 -eq 0 ]]; then
    echo "ok    $1"
  else
    echo "FAIL  $1${3:+: $3}"
    fails=$((fails + 1))
  fi
}

# Runs SETUP (mount commands) then tether in a fresh namespace; /var/tmp,
# /dev/shm and HOME are fresh tmpfs mounts too, so nothing outside changes.
in_ns() {
  local setup=$1
  shift
  unshare --map-root-user --mount bash -c '
    set -e
    mount -t tmpfs tmpfs /var/tmp
    mount -t tmpfs tmpfs /dev/shm
    mkdir -p /var/tmp/home
    '"$setup"'
    export HOME=/var/tmp/home
    unset TMPDIR
    "$@"' ns "$@"
}

run_echo() { in_ns "$1" "$TETHER" run --provider command --prefix 'sh -c' -- sh -c 'echo hi; ls -d /var/tmp/tether-*/bin/tether-supervisor-* /tmp/tether-*/bin/tether-supervisor-* 2>/dev/null || true'; }

out=$(run_echo 'mount -t tmpfs -o noexec tmpfs /tmp' 2>&1) && rc=0 || rc=$?
check "/tmp noexec: the run succeeds" "$rc" "$out"
[[ $out == hi* ]]
check "/tmp noexec: the child's output arrives" $? "$out"
grep -q '^/var/tmp/tether-0/bin/tether-supervisor-' <<<"$out"
check "/tmp noexec: the supervisor went to /var/tmp" $? "$out"
! grep -q '^/tmp/tether-' <<<"$out"
check "/tmp noexec: nothing was installed in /tmp" $? "$out"

out=$(run_echo 'mount -t tmpfs -o ro tmpfs /tmp' 2>&1) && rc=0 || rc=$?
check "/tmp read-only: the run succeeds" "$rc" "$out"
grep -q '^/var/tmp/tether-0/bin/tether-supervisor-' <<<"$out"
check "/tmp read-only: the supervisor went to /var/tmp" $? "$out"

flag=/var/tmp/ran
out=$(in_ns 'mount -t tmpfs -o noexec tmpfs /tmp; mount -o remount,noexec /var/tmp; mount -o remount,noexec /dev/shm' \
  "$TETHER" run --provider command --prefix 'sh -c' -- sh -c "touch $flag" 2>&1) && rc=0 || rc=$?
[[ $rc -eq 125 ]]
check "everything noexec: tether fails (125)" $? "exit $rc: $out"
grep -q 'no private directory in the sandbox can hold an executable supervisor' <<<"$out"
check "everything noexec: the message names the cause" $? "$out"
grep -q '/tmp/tether-0: mounted noexec' <<<"$out"
check "everything noexec: the message names each directory" $? "$out"

if [[ $fails -ne 0 ]]; then
  echo "$fails check(s) failed"
  exit 1
fi
echo "all checks passed"
