#!/usr/bin/env bash
# Runs a test program against a real Docker Engine API: podman's, private
# to this run (tests/lib/podman_docker.sh), with one running container and
# one that exists but is stopped. The program finds them in
#   TETHER_TEST_DOCKER_HOST       unix:///.../docker.sock
#   TETHER_TEST_DOCKER_CONTAINER  the running container
#   TETHER_TEST_DOCKER_STOPPED    a created, never started container
#
#   with_podman_docker.sh PROGRAM [ARGS...]
#
# Exits with the program's status; 77 (skipped) when podman cannot run
# containers here.
set -uo pipefail
work=$(mktemp -d /tmp/tether-docker-test-XXXXXX)
# shellcheck source=../../lib/podman_docker.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../lib/podman_docker.sh"
stopped=
cleanup() {
  [[ -z $stopped ]] || $podman_cmd rm -f -t 0 "$stopped" >/dev/null 2>&1 || true
  stop_podman_docker
  rm -rf "$work"
}
trap cleanup EXIT
rc=0
start_podman_docker "$work" || rc=$?
[[ $rc -eq 0 ]] || exit "$rc"
stopped=$podman_ctr-stopped
$podman_cmd create --name "$stopped" --network none "$podman_image" sleep 1 >/dev/null ||
  { echo "podman create failed" >&2; exit 1; }
TETHER_TEST_DOCKER_HOST=$docker_host TETHER_TEST_DOCKER_CONTAINER=$podman_ctr \
  TETHER_TEST_DOCKER_STOPPED=$stopped "$@"
