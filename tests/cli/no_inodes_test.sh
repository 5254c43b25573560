#!/usr/bin/env bash
# A sandbox whose file system has no inodes left, for real: inside an
# unprivileged user and mount namespace (unshare --map-root-user --mount)
# the local provider's root is a tmpfs with a handful of inodes. Once the
# supervisor is installed and every inode left is taken, `tether run` cannot
# create the process's state directory (mkdir fails with ENOSPC while blocks
# are free) and must
#   1. exit 125 (tether could not do its part), never 2 (bad usage);
#   2. name the cause;
#   3. run nothing.
# And once an inode is free again, the same run succeeds.
#
#   tests/cli/no_inodes_test.sh path/to/tether
#
# Without user namespaces it cannot run: exit 77 (ctest's skip), and under
# CI=true exit 1, so that CI never passes it without running it.
set -euo pipefail

if [[ $# -ne 1 || ! -x $1 ]]; then
  echo "usage: $0 PATH_TO_TETHER" >&2
  exit 2
fi
TETHER=$(realpath -e "$1")
if ! unshare --map-root-user --mount true 2>/dev/null; then
  echo "no_inodes_test: unshare --map-root-user --mount is not allowed here" >&2
  [[ ${CI:-} == true ]] && exit 1
  exit 77
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/tether-inodes.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir "$WORK/mnt"

# shellcheck source=../lib/checks.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/checks.sh"
check() {  # check NAME DETAIL COMMAND...
  local name=$1 detail=$2
  shift 2
  if "$@"; then pass "$name"; else fail "$name" "$detail"; fi
}

# In the namespace: a tmpfs of 64 inodes (blocks to spare) as the local
# root's file system; a first run installs the supervisor; once its state
# directory is gone, files take every inode left; then the run under test,
# whose status, stdout and stderr go to files outside the tmpfs. Finally
# one inode is freed and the run is repeated.
# shellcheck disable=SC2016
rc=0
unshare --map-root-user --mount bash -c '
  set -u
  tether=$1 mnt=$2 work=$3
  mount -t tmpfs -o size=16m,nr_inodes=64,mode=0700 tether-no-inodes "$mnt" || exit 3
  export TETHER_LOCAL_ROOT=$mnt/root
  "$tether" run -- true >"$work/install.out" 2>&1 || { echo "install run failed: $(cat "$work/install.out")"; exit 4; }
  for _ in $(seq 200); do
    [[ -z $(ls -A "$mnt/root/run" 2>/dev/null) ]] && break
    sleep 0.05
  done
  n=0
  while : 2>/dev/null >"$mnt/fill.$n"; do n=$((n + 1)); done
  df -i "$mnt" >"$work/df.txt"
  rc=0
  timeout -k 5 60 "$tether" run -- sh -c "echo ran" >"$work/full.out" 2>"$work/full.err" || rc=$?
  echo "$rc" >"$work/full.rc"
  rm -f "$mnt/fill.0" "$mnt/fill.1" "$mnt/fill.2" "$mnt/fill.3"
  rc=0
  timeout -k 5 60 "$tether" run -- sh -c "echo ran" >"$work/free.out" 2>"$work/free.err" || rc=$?
  echo "$rc" >"$work/free.rc"
' ns "$TETHER" "$WORK/mnt" "$WORK" || rc=$?
if [[ $rc -ne 0 ]]; then
  echo "FAIL  the namespace script failed (exit $rc)"
  exit 1
fi

full_rc=$(cat "$WORK/full.rc")
full_err=$(head -c 600 "$WORK/full.err" | tr '\n' '|')
check "no inodes: tether run exits 125, not 2" "exit $full_rc: $full_err; $(tail -1 "$WORK/df.txt")" \
  test "$full_rc" -eq 125
check "no inodes: the message names the cause" "$full_err" grep -q 'No space left on device' "$WORK/full.err"
check "no inodes: nothing ran" "stdout: $(head -c 200 "$WORK/full.out")" test ! -s "$WORK/full.out"
free_rc=$(cat "$WORK/free.rc")
check "inodes freed: the same run succeeds" "exit $free_rc: $(head -c 600 "$WORK/free.err" | tr '\n' '|')" \
  test "$free_rc" -eq 0 -a "$(cat "$WORK/free.out")" = ran

echo "$CHECKS checks, $FAILED failed"
[[ $FAILED -eq 0 ]]
