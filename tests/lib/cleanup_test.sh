#!/usr/bin/env bash
# stop_podman_docker is called from EXIT traps of scripts that run under
# `set -euo pipefail`. There a command that fails inside it (a kill of a
# process that has just gone) would end the whole script with that status,
# silently, after every check passed: conformance.docker once failed in CI
# that way with "24 passed, 0 failed". This runs it under errexit against
# the slow path: an API service that ignores SIGTERM, so the 5 s watchdog
# kills it and is gone when stop_podman_docker kills the watchdog.
set -euo pipefail
# shellcheck source=podman_docker.sh
source "$(dirname "${BASH_SOURCE[0]}")/podman_docker.sh"
work=$(mktemp -d /tmp/tether-cleanup-test-XXXXXX)
_podman_docker_work=$work
mkdir -p "$work/podman/storage"
bash -c 'trap "" TERM; sleep 30' &
podman_service_pid=$!
# Until its trap is set it would die of the TERM (the fast path): wait until
# SIGTERM (15, bit 0x4000) is among the signals it ignores.
term_ignored() {
  local mask
  mask=$(awk '/^SigIgn:/ {print $2}' "/proc/$1/status" 2>/dev/null) || return 1
  [[ -n $mask ]] && (((16#$mask & 16#4000) != 0))
}
for ((i = 0; i < 400; i++)); do # (20 s)
  term_ignored "$podman_service_pid" && break
  sleep 0.05
done
if ! term_ignored "$podman_service_pid"; then
  echo "FAIL: the stand-in service did not ignore SIGTERM within 20 s"
  kill -KILL "$podman_service_pid" 2>/dev/null || true
  exit 1
fi
start=$SECONDS
stop_podman_docker
echo "stop_podman_docker returned after $((SECONDS - start)) s"
if kill -0 "$podman_service_pid" 2>/dev/null; then
  echo "FAIL: the service that ignored SIGTERM is still running"
  exit 1
fi
[[ ! -e $work/podman ]] || { echo "FAIL: the private root is still there"; exit 1; }
rm -rf "$work"
echo "ok: stop_podman_docker under errexit survives a watchdog that has already gone"
