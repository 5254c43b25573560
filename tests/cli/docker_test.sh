#!/usr/bin/env bash
# `tether run --provider docker` end to end against a real engine: podman's
# Docker API service (or the Docker Engine, below) and a busybox container,
# private to this run (tests/lib/podman_docker.sh, docker_engine.sh). Exact bytes, the exit status, all 256 byte
# values through cat, a clear error for a missing container, and TLS with
# DOCKER_CERT_PATH: a good certificate works, an expired or wrong-host one
# is refused before any request.
#
#   tests/cli/docker_test.sh path/to/tether
#   TETHER_DOCKER_ENGINE=docker tests/cli/docker_test.sh path/to/tether
#
# The second form runs the same checks against the Docker Engine itself
# (Debian's dockerd, private to the run: tests/lib/docker_engine.sh).
# Exits 77 (skipped) when the engine cannot run containers here.
set -uo pipefail

here=$(dirname "${BASH_SOURCE[0]}")
# shellcheck source=../lib/cli_provider.sh
source "$here/../lib/cli_provider.sh"
# shellcheck source=../lib/docker_engine.sh
source "$here/../lib/docker_engine.sh"
engine=${TETHER_DOCKER_ENGINE:-podman}
cli_provider_init docker "$@"
socat_pid=  # the TLS front of part 6
stop_front() {
  [[ -z $socat_pid ]] || { kill "$socat_pid" 2>/dev/null; wait "$socat_pid" 2>/dev/null; }
  socat_pid=
}
cleanup() {
  stop_front
  stop_docker_engine
  stop_podman_docker
  rm -rf "$WORK"
}
trap cleanup EXIT
rc=0
case $engine in
  podman) start_podman_docker "$WORK" || rc=$?; ctr=$podman_ctr ;;
  docker) start_docker_engine "$WORK" || rc=$?; ctr=$engine_ctr ;;
  *) echo "TETHER_DOCKER_ENGINE=$engine: podman or docker" >&2; exit 2 ;;
esac
[[ $rc -eq 0 ]] || exit "$rc"
echo "engine: $engine"

run() { "$TETHER" run --provider docker --container "$ctr" --endpoint "$docker_host" "$@"; }

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
DOCKER_HOST=unix://$WORK/nothing.sock "$TETHER" run --provider docker --container "$ctr" -- true \
  >"$WORK/out" 2>"$WORK/err" || status=$?
if [[ $status -ne 0 ]] && grep -q "DOCKER_HOST" "$WORK/err" && grep -q "nothing.sock" "$WORK/err"; then
  pass "an engine that is not there is named with DOCKER_HOST (status $status)"
else
  fail "an engine that is not there is named with DOCKER_HOST" "status $status" "stderr: $(head -c 800 "$WORK/err")"
fi

# 6. TLS, as `DOCKER_TLS_VERIFY=1 DOCKER_CERT_PATH=...` with a tcp:// host
# uses it: a TLS front (socat) on 127.0.0.1 before the engine's socket,
# asking for a client certificate from the same CA. With the engine's
# certificate from the trusted CA the run works; expired (January 2020),
# or for another name (elsewhere.invalid), it is refused at once, saying
# why, and no byte of a request reaches the engine (socat -v shows none).
# The certificates: tests/emulators/lib/certs.mjs (node), as the
# emulators' own; without node this part cannot run (under CI: a failure).
# (Starts the front for the certificates in $1; sets front_port.)
start_front() {
  local d=$1 i
  socat -d -d -v "OPENSSL-LISTEN:0,bind=127.0.0.1,fork,cert=$d/server-chain.pem,key=$d/server-key.pem,cafile=$d/ca.pem,verify=1" \
    "UNIX-CONNECT:$docker_sock" 2>"$d/front.log" &
  socat_pid=$!
  front_port=
  for i in $(seq 1 100); do
    front_port=$(sed -n 's/.* listening on AF=2 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$d/front.log" | head -n1)
    [[ -z $front_port ]] || return 0
    sleep 0.05
  done
  return 1
}
certs=$here/../emulators/lib/certs.mjs
if ! command -v node >/dev/null || ! command -v socat >/dev/null || ! command -v openssl >/dev/null; then
  fail "docker over TLS" "needs node, socat and openssl: $(command -v node socat openssl | tr '\n' ' ')"
else
  for kind in good expired wrong-host; do
    d=$WORK/tls-$kind
    mkdir -p "$d"
    TETHER_EMULATOR_CERT=${kind/good/} node "$certs" "$d" >/dev/null
    # The client's certificate, from the same CA (DOCKER_CERT_PATH's cert.pem, key.pem).
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$d/key.pem" \
      -out "$d/client.csr" -subj /CN=tether-test-client 2>/dev/null
    printf 'extendedKeyUsage=clientAuth\n' >"$d/client-ext.cnf"
    openssl x509 -req -in "$d/client.csr" -CA "$d/ca.pem" -CAkey "$d/ca-key.pem" -set_serial 7 -days 30 \
      -extfile "$d/client-ext.cnf" -out "$d/cert.pem" 2>/dev/null
    if ! start_front "$d"; then
      fail "docker over TLS ($kind): the TLS front started" "$(head -c 600 "$d/front.log")"
      stop_front
      continue
    fi
    status=0
    DOCKER_TLS_VERIFY=1 DOCKER_CERT_PATH=$d DOCKER_HOST=tcp://127.0.0.1:$front_port \
      timeout -k 5 60 "$TETHER" run --provider docker --container "$ctr" -- printf ok \
      >"$WORK/tls-$kind.out" 2>"$WORK/tls-$kind.err" || status=$?
    stop_front
    # (socat -v writes each request's bytes as "> DATE length=N ..." lines)
    requests=$(grep -c '^> ' "$d/front.log" || true)
    if [[ $kind == good ]]; then
      if [[ $status -eq 0 && $(cat "$WORK/tls-$kind.out") == ok && $requests -gt 0 ]]; then
        pass "docker over TLS: the engine's certificate from DOCKER_CERT_PATH's CA, and our client certificate, work"
      else
        fail "docker over TLS: a good certificate works" "status $status, $requests requests" \
          "stderr: $(head -c 600 "$WORK/tls-$kind.err")" "front: $(tail -c 600 "$d/front.log")"
      fi
      continue
    fi
    want=$([[ $kind == expired ]] && echo 'expired' || echo 'mismatch')
    if [[ $status -eq 125 ]] && grep -qi certificate "$WORK/tls-$kind.err" && grep -qi "$want" "$WORK/tls-$kind.err" &&
      grep -q '(not retried: ' "$WORK/tls-$kind.err" && ! grep -q 'OUTCOME_UNKNOWN' "$WORK/tls-$kind.err"; then
      pass "docker over TLS: a certificate that is $kind is refused at once, saying '$want'"
    else
      fail "docker over TLS: a certificate that is $kind is refused at once, saying '$want'" "status $status" \
        "stderr: $(head -c 800 "$WORK/tls-$kind.err")"
    fi
    if [[ $requests -eq 0 ]]; then
      pass "docker over TLS: over a $kind certificate no request reached the engine"
    else
      fail "docker over TLS: over a $kind certificate no request reached the engine" "$requests requests" \
        "$(grep -m3 -A2 '^> ' "$d/front.log")"
    fi
  done
fi

echo "$((CHECKS - FAILED))/$CHECKS checks passed"
[[ $FAILED -eq 0 ]]
