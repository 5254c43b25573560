#!/usr/bin/env bash
# `tether-supervisor selftest` run for real (usage: selftest_test.sh SUPERVISOR):
#  1. here: every line ok, exit 0;
#  2. in a user+mount namespace with /tmp remounted noexec and TMPDIR unset:
#     the private-dir line says /tmp is noexec and another candidate is used;
#  3. with every candidate noexec or read-only: exit 1, naming each cause.
# Exits 77 (skipped) when this machine cannot make a user+mount namespace.
# The supervisor may live anywhere, /tmp included: see `hold` below.
set -euo pipefail

sup=$(realpath -e "$1")
fail() { echo "FAIL: $*" >&2; exit 1; }

# Defines `hold PATH...` for the scripts run inside the namespace. Called
# before anything is mounted over /tmp, /var/tmp, /dev/shm or HOME, it
# bind-mounts each PATH (an absolute, resolved file or directory) to
# BASE/N/NAME under a fresh tmpfs on BASE, the first of /mnt /srv /opt /media
# /boot that exists and is not HOME or an ancestor of HOME or of a PATH; the
# new paths are left in the array `held`. So a build tree under /tmp stays
# reachable, and the candidate directories the selftest probes (TMPDIR,
# /tmp, /var/tmp, /dev/shm, HOME/.cache) see exactly the mounts set up below.
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

# 1. This machine.
rc=0
out=$("$sup" selftest) || rc=$?
echo "$out"
[ "$rc" = 0 ] || fail "selftest exited $rc here"
[ "$(grep -c '^ok ' <<<"$out")" = 6 ] || fail "expected 6 ok lines"
grep -q '^ok private-dir: ' <<<"$out" || fail "no private-dir line"

if ! unshare --map-root-user --mount true 2>/dev/null; then
  echo "SKIP: unshare --map-root-user --mount does not work here" >&2
  exit 77
fi

# 2. /tmp noexec, TMPDIR unset; /var/tmp a fresh tmpfs, so the choice is known.
rc=0
out=$(env -u TMPDIR unshare --map-root-user --mount bash -c "$hold_fn"'
  set -euo pipefail
  cd /
  hold "$1"
  mount -t tmpfs -o noexec tmpfs /tmp
  mount -t tmpfs tmpfs /var/tmp
  exec "${held[0]}" selftest' _ "$sup") || rc=$?
echo "$out"
[ "$rc" = 0 ] || fail "selftest exited $rc with /tmp noexec (another candidate should do)"
grep -qx 'ok private-dir: /var/tmp/tether-0 (refused: /tmp: noexec)' <<<"$out" ||
  fail "the private-dir line should choose /var/tmp and say /tmp is noexec"

# 3. Every candidate refused: TMPDIR and /tmp noexec, /var/tmp read-only,
# /dev/shm noexec, HOME/.cache read-only.
rc=0
out=$(unshare --map-root-user --mount bash -c "$hold_fn"'
  set -euo pipefail
  cd /
  hold "$1"
  mount -t tmpfs -o noexec tmpfs /tmp
  mkdir /tmp/t
  mount -t tmpfs tmpfs /var/tmp
  mkdir -p /var/tmp/home/.cache
  mount -o remount,ro /var/tmp
  if [ -d /dev/shm ]; then mount -t tmpfs -o noexec tmpfs /dev/shm; fi
  TMPDIR=/tmp/t HOME=/var/tmp/home exec "${held[0]}" selftest' _ "$sup") || rc=$?
echo "$out"
[ "$rc" = 1 ] || fail "selftest exited $rc with every candidate refused, expected 1"
line=$(grep '^missing private-dir: ' <<<"$out") || fail "no missing private-dir line"
for cause in '/tmp/t: noexec' '/tmp: noexec' '/var/tmp: read-only' '/var/tmp/home/.cache: read-only'; do
  grep -qF "$cause" <<<"$line" || fail "the private-dir line does not name '$cause'"
done
if [ -d /dev/shm ]; then grep -qF '/dev/shm: noexec' <<<"$line" || fail "no '/dev/shm: noexec'"; fi
[ "$(grep -c '^ok ' <<<"$out")" = 5 ] || fail "the other five checks should stay ok"
echo "PASS"
