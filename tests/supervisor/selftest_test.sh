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


# `hold PATH...` for the namespace script (tests/lib/ns_hold.sh): keeps the
# build tree reachable before /tmp and the other candidates are mounted over.
hold_fn=$(<"$(dirname "${BASH_SOURCE[0]}")/../lib/ns_hold.sh")

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
