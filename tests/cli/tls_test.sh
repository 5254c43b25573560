#!/usr/bin/env bash
# Certificates are checked on every native transport: each emulator
# (HTTP, WebSocket, Connect and gRPC over TLS: modal and boxd; Kubernetes's API server) serves a certificate from the
# CA tether is told to trust, but expired (January 2020) or for another
# name (elsewhere.invalid); tether must refuse the connection, say why, and
# send nothing: the emulator's request log stays empty, so no credential
# went over a connection it should not trust. A refused certificate is not
# retried (it does not get better in a second) and is never
# OUTCOME_UNKNOWN: nothing was sent, so nothing can have started.
#
#   tests/cli/tls_test.sh path/to/tether
#
# Exits 77 (skipped) when the emulators cannot run here (no node or no
# tests/emulators/node_modules); under CI that fails the run.
set -euo pipefail

here=$(dirname "${BASH_SOURCE[0]}")
# shellcheck source=../lib/cli_provider.sh
source "$here/../lib/cli_provider.sh"
for p in e2b boat daytona runloop modal boxd kubernetes; do
  # shellcheck source=/dev/null
  source "$here/../lib/${p}_emulator.sh"
done
cli_provider_init tls "$@"
# The Kubernetes API server emulator, in cli_provider_start's shape ("kube":
# start_kube_emulator, kube_pid, kube_flags); its pod runs the command, and
# its requests are logged in DIR/k8s/requests.log.
start_kube_emulator() {  # DIR --tls
  local rc=0
  start_kubernetes_emulator "$1" "" tls || rc=$?
  kube_pid=${emu_pid:-}
  [[ $rc -ne 77 ]] || echo "kubernetes: $emu_why" >&2
  return "$rc"
}
kube_flags() {
  printf '%s\n' --provider kubernetes --kubeconfig "$emu_kubeconfig" --namespace "$emu_namespace" --pod "$emu_pod"
  [[ -z $emu_container ]] || printf '%s\n' --container "$emu_container"
}

# A control run first: the same emulators with a good certificate work, so
# the refusals below are the certificate's doing.
for kind in good expired wrong-host; do
  for p in e2b boat daytona runloop modal boxd kube; do
    dir=$WORK/$p-$kind
    mkdir -p "$dir"
    if [[ $kind == good ]]; then
      cli_provider_start "$p" "$p" "$dir" --tls
    else
      TETHER_EMULATOR_CERT=$kind cli_provider_start "$p" "$p" "$dir" --tls
    fi
    run "$p-$kind" run "${FLAGS[@]}" -- printf ok
    log=$dir/requests.log
    [[ $p != kube ]] || log=$dir/k8s/requests.log
    # (every line but the emulator's own 'listening' one is a request)
    requests=$(grep -vc ' listening ' "$log" 2>/dev/null || true)
    if [[ $kind == good ]]; then
      # (and the log counts requests, so that "none" below can be wrong)
      if [[ $STATUS -eq 0 && $(cat "$WORK/$p-$kind.out") == ok && $requests -gt 0 ]]; then
        pass "$p: a good certificate from the trusted CA works"
      else
        fail "$p: a good certificate from the trusted CA works" "status $STATUS, $requests requests logged" \
          "$(head -c 400 "$WORK/$p-$kind.err")"
      fi
    else
      # (gRPC says "Peer name 127.0.0.1 is not in peer certificate".)
      # gRPC's status says only "certificate verify failed" for an expired one.
      want=$([[ $kind == expired ]] && echo 'expired' || echo 'mismatch\|not in peer certificate')
      [[ $p$kind != modalexpired ]] || want='certificate verify failed'
      if [[ $STATUS -ne 0 && $STATUS -lt 128 ]] && grep -qi "certificate" "$WORK/$p-$kind.err" &&
        grep -qi -e "$want" "$WORK/$p-$kind.err" && ! grep -q '^E[0-9]\{4\} ' "$WORK/$p-$kind.err"; then
        pass "$p: a certificate that is $kind is refused, saying '$want'"
      else
        fail "$p: a certificate that is $kind is refused, saying '$want' (and no gRPC log line)" "status $STATUS" \
          "$(head -c 1200 "$WORK/$p-$kind.err")"
      fi
      if [[ $STATUS -eq 125 ]] && grep -q '(not retried: ' "$WORK/$p-$kind.err" &&
        ! grep -q 'OUTCOME_UNKNOWN\|was sent [0-9]* times\|marker' "$WORK/$p-$kind.err"; then
        pass "$p: a certificate that is $kind fails the start at once: not retried, not OUTCOME_UNKNOWN"
      else
        fail "$p: a certificate that is $kind fails the start at once: not retried, not OUTCOME_UNKNOWN" \
          "status $STATUS" "$(head -c 1200 "$WORK/$p-$kind.err")"
      fi
      if [[ $requests -eq 0 ]]; then
        pass "$p: over a $kind certificate no request reached the server"
      else
        fail "$p: over a $kind certificate no request reached the server" "$requests in $log" "$(head -5 "$log")"
      fi
    fi
    kill -TERM "${emulators[-1]}" 2>/dev/null || true
  done
done

echo "$((CHECKS - FAILED))/$CHECKS checks passed"
[[ $FAILED -eq 0 ]]
