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

# Defines `hold PATH...` for the script run inside the namespace. Called
# before anything is mounted over /tmp, /var/tmp, /dev/shm or HOME, it
# bind-mounts each PATH (an absolute, resolved file or directory) to
# BASE/N/NAME under a fresh tmpfs on BASE, the first of /mnt /srv /opt /media
# /boot that exists and is not HOME or an ancestor of HOME or of a PATH; the
# new paths are left in the array `held`. So a build tree under /tmp stays
# reachable, and the candidate directories tether tries (TMPDIR, /tmp,
# /var/tmp, /dev/shm, HOME) see exactly the mounts the SETUP makes.
hold_fn='
hold() {
  local base= b p n=0 ok
  for b in /mnt /srv /opt /media /boot; do
    if [[ ! -d $b || -L $b ]]; then continue; fi
    ok=1
    for p in "$@" "${HOME:-/nonexistent}"; do
      if [[ $p == "$b" || $p == "$b"/* ]]; then ok=0; fi
    done
    if [[ $ok == 1 ]]; then base=$b; break; fi
  done
  if [[ -z $base ]]; then
    echo "hold: no directory to hold $* in (none of /mnt /srv /opt /media /boot fits)" >&2
    return 1
  fi
  mount -t tmpfs -o mode=0755 tether-test-hold "$base"
  held=()
  for p in "$@"; do
    mkdir "$base/$n"
    if [[ -d $p ]]; then mkdir "$base/$n/${p##*/}"; else : >"$base/$n/${p##*/}"; fi
    mount --bind "$p" "$base/$n/${p##*/}"
    held+=("$base/$n/${p##*/}")
    n=$((n + 1))
  done
}
'

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
