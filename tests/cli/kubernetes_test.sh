#!/usr/bin/env bash
# End-to-end checks of `tether run --provider kubernetes` against the API
# server emulator (tests/emulators/kubernetes.mjs) over TLS: exact bytes,
# the exit status, and clear errors for a missing pod and a refused token
# (which never shows the token).
#
#   tests/cli/kubernetes_test.sh path/to/tether
#
# Exits 77 (skipped) without node or tests/emulators/node_modules.
set -euo pipefail

if [[ $# -ne 1 || ! -x $1 ]]; then
  echo "usage: $0 PATH_TO_TETHER" >&2
  exit 2
fi
TETHER=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tether-cli-k8s.XXXXXX")
pids=()
cleanup() {
  set +e # (a failing step of the cleanup never changes the exit status)
  # (The emulator kills what its pod started when it gets SIGTERM.)
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

# shellcheck source=../lib/checks.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/checks.sh"
# shellcheck source=../lib/kubernetes_emulator.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/kubernetes_emulator.sh"

rc=0
start_kubernetes_emulator "$WORK" "" tls || rc=$?
[[ -z ${emu_pid:-} ]] || pids+=("$emu_pid")
if [[ $rc -eq 77 ]]; then
  echo "skipped: $emu_why"
  exit 77
fi
[[ $rc -eq 0 ]] || exit 1

K8S=(--provider kubernetes --kubeconfig "$emu_kubeconfig" --namespace "$emu_namespace")
[[ -z $emu_container ]] || K8S+=(--container "$emu_container")

STDIN=/dev/null
run() {  # NAME ARGS...: stdout to $WORK/NAME.out, stderr to $WORK/NAME.err, STATUS
  local name=$1
  shift
  STATUS=0
  timeout -k 5 120 "$TETHER" "$@" <"$STDIN" >"$WORK/$name.out" 2>"$WORK/$name.err" || STATUS=$?
}
stderr_of() { head -c 600 "$WORK/$1.err" 2>/dev/null || true; }
# Each error check also prints the message it got, for the log.
show() { printf '        (%s)\n' "$(head -c 400 "$WORK/$1.err" | tr '\n' ' ')"; }

# ------------------------------------------------------------------ bytes

for i in $(seq 0 255); do printf "\\$(printf '%03o' "$i")"; done >"$WORK/all.bin"
[[ $(wc -c <"$WORK/all.bin") -eq 256 ]] || { echo "could not make the 256 byte values" >&2; exit 1; }
STDIN=$WORK/all.bin
run bytes run "${K8S[@]}" --pod "$emu_pod" -- /bin/cat
STDIN=/dev/null
if [[ $STATUS -eq 0 ]] && cmp -s "$WORK/bytes.out" "$WORK/all.bin"; then
  pass "all 256 byte values come back unchanged through cat"
else
  fail "all 256 byte values come back unchanged through cat" "status $STATUS, $(wc -c <"$WORK/bytes.out") bytes" \
    "stderr: $(stderr_of bytes)"
fi

run exit7 run "${K8S[@]}" --pod "$emu_pod" -- /bin/sh -c 'echo out; echo err >&2; exit 7'
if [[ $STATUS -eq 7 && $(cat "$WORK/exit7.out") == out ]] && grep -qx err "$WORK/exit7.err"; then
  pass "exit status 7 passes through, stdout and stderr apart"
else
  fail "exit status 7 passes through, stdout and stderr apart" "status $STATUS, stdout '$(head -c 100 "$WORK/exit7.out")'" \
    "stderr: $(stderr_of exit7)"
fi

# ------------------------------------------------------------------ errors

run nopod run "${K8S[@]}" --pod no-such-pod -- /bin/true
if [[ $STATUS -ne 0 ]] && grep -q "pod 'no-such-pod' not found in namespace '$emu_namespace'" "$WORK/nopod.err"; then
  pass "a missing pod is a clear error naming the pod and namespace"
  show nopod
else
  fail "a missing pod is a clear error naming the pod and namespace" "status $STATUS" "stderr: $(stderr_of nopod)"
fi

bad_token=tether-bad-token-$RANDOM$RANDOM
[[ -n $emu_token ]] || { fail "the emulator's kubeconfig has a token" "none in its ready line"; }
sed "s/$emu_token/$bad_token/g" "$emu_kubeconfig" >"$WORK/bad-kubeconfig"
if grep -q "$bad_token" "$WORK/bad-kubeconfig"; then
  BAD=(--provider kubernetes --kubeconfig "$WORK/bad-kubeconfig" --namespace "$emu_namespace")
  [[ -z $emu_container ]] || BAD+=(--container "$emu_container")
  run badtoken run "${BAD[@]}" --pod "$emu_pod" -- /bin/true
  if [[ $STATUS -ne 0 ]] && grep -q "refused the credentials" "$WORK/badtoken.err" &&
     ! grep -q "$bad_token" "$WORK/badtoken.err" "$WORK/badtoken.out"; then
    pass "a bad token is a clear error that does not show the token"
    show badtoken
  else
    fail "a bad token is a clear error that does not show the token" "status $STATUS" "stderr: $(stderr_of badtoken)"
  fi
else
  fail "a bad token is a clear error that does not show the token" "the token is not in the emulator's kubeconfig"
fi

echo "$((CHECKS - FAILED))/$CHECKS checks passed"
[[ $FAILED -eq 0 ]]
