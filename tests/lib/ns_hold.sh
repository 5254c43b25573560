# shellcheck shell=bash
# `hold PATH...`, for a script run inside a user+mount namespace (the tests
# read this file into the script they hand to `unshare ... bash -c`). Called
# before anything is mounted over /tmp, /var/tmp, /dev/shm or HOME, it
# bind-mounts each PATH (an absolute, resolved file or directory) to
# BASE/N/NAME under a fresh tmpfs on BASE, the first of /mnt /srv /opt /media
# /boot that exists and is not HOME or an ancestor of HOME or of a PATH; the
# new paths are left in the array `held`. So a build tree under /tmp stays
# reachable while the directories under test see exactly the mounts the test
# makes. Used by tests/cli/noexec_test.sh and tests/supervisor/selftest_test.sh.
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
