#!/usr/bin/env bash
# `tether run --provider docker` end to end against a real engine: podman's
# Docker API service and a busybox container, private to this run
# (tests/lib/podman_docker.sh). Exact bytes, the exit status, all 256 byte
# values through cat, and a clear error for a missing container.
#
#   tests/cli/docker_test.sh path/to/tether
#
# Exits 77 (skipped) when podman cannot run containers here.
set -uo pipefail

here=$(dirname "${BASH_SOURCE[0]}")
# shellcheck source=../lib/cli_provider.sh
source "$here/../lib/cli_provider.sh"
# shellcheck source=../lib/podman_docker.sh
source "$here/../lib/podman_docker.sh"
cli_provider_init docker "$@"
cleanup() {
  stop_podman_docker
  rm -rf "$WORK"
}
trap cleanup EXIT
rc=0
start_podman_docker "$WORK" || rc=$?
[[ $rc -eq 0 ]] || exit "$rc"

run() { "$TETHER" run --provider docker --container "$podman_ctr" --endpoint "$docker_host" "$@"; }

# 1. Exactly two bytes, NUL and 0xff, and exit status 7.
status=0
run -- sh -c 'printf "\000\377"; exit 7' >"$WORK/out" 2>"$WORK/err" || status=$?
if [[ $status -eq 7 && $(od -An -tx1 "$WORK/out" | tr -d ' \n') == 00ff ]]; then
  pass "two bytes \\000\\377 on stdout, exit status 7"
else
  fail "two bytes \\000\\377 on stdout, exit status 7" "status $status" \
    "stdout: $(od -An -tx1 "$WORK/out" | head -3)" "stderr: $(head -c 800 "$WORK/err")"
fi

# 2. All 256 byte values (a few times over) through cat, unchanged.
all_bytes "$WORK/bytes" 4
status=0
run -- cat <"$WORK/bytes" >"$WORK/back" 2>"$WORK/err" || status=$?
if [[ $status -eq 0 ]] && cmp -s "$WORK/bytes" "$WORK/back"; then
  pass "all 256 byte values through cat"
else
  fail "all 256 byte values through cat" "status $status, $(wc -c <"$WORK/back") bytes back" \
    "stderr: $(head -c 800 "$WORK/err")"
fi

# 3. stderr stays stderr.
status=0
run -- sh -c 'echo to-out; echo to-err >&2' >"$WORK/out" 2>"$WORK/err" || status=$?
if [[ $status -eq 0 && $(cat "$WORK/out") == to-out ]] && grep -q to-err "$WORK/err"; then
  pass "stdout and stderr stay apart"
else
  fail "stdout and stderr stay apart" "status $status" "stdout: $(head -c 200 "$WORK/out")" \
    "stderr: $(head -c 800 "$WORK/err")"
fi

# 4. A missing container: a clear error naming it, a failure status.
status=0
"$TETHER" run --provider docker --container tether-no-such-container --endpoint "$docker_host" -- true \
  >"$WORK/out" 2>"$WORK/err" || status=$?
if [[ $status -ne 0 ]] && grep -q "no such container 'tether-no-such-container'" "$WORK/err"; then
  pass "a missing container is named in a clear error (status $status)"
else
  fail "a missing container is named in a clear error" "status $status" "stderr: $(head -c 800 "$WORK/err")"
fi

# 5. No engine at the endpoint: unavailable, naming where it looked.
status=0
DOCKER_HOST=unix://$WORK/nothing.sock "$TETHER" run --provider docker --container "$podman_ctr" -- true \
  >"$WORK/out" 2>"$WORK/err" || status=$?
if [[ $status -ne 0 ]] && grep -q "DOCKER_HOST" "$WORK/err" && grep -q "nothing.sock" "$WORK/err"; then
  pass "an engine that is not there is named with DOCKER_HOST (status $status)"
else
  fail "an engine that is not there is named with DOCKER_HOST" "status $status" "stderr: $(head -c 800 "$WORK/err")"
fi

echo "$((CHECKS - FAILED))/$CHECKS checks passed"
[[ $FAILED -eq 0 ]]
