#!/usr/bin/env bash
# End-to-end checks of `tether run --provider kubernetes` against the API
# server emulator (tests/emulators/kubernetes.mjs) over TLS: exact bytes,
# the exit status, and clear errors for a missing pod, a refused token
# (which never shows the token) and an exec that RBAC forbids (403); a
# client certificate, tokenFile, tls-server-name and a merged KUBECONFIG
# list, each against the emulator's TLS server.
#
#   tests/cli/kubernetes_test.sh path/to/tether
#
# Exits 77 (skipped) without node or tests/emulators/node_modules.
set -euo pipefail

here=$(dirname "${BASH_SOURCE[0]}")
# shellcheck source=../lib/cli_provider.sh
source "$here/../lib/cli_provider.sh"
# shellcheck source=../lib/kubernetes_emulator.sh
source "$here/../lib/kubernetes_emulator.sh"
cli_provider_init kubernetes "$@"
# (The emulator kills what its pod started when it gets SIGTERM: this waits
# for it rather than killing what runs from $WORK.)
cleanup() {
  set +e # (a failing step of the cleanup never changes the exit status)
  local p
  for p in "${emulators[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${emulators[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

rc=0
start_kubernetes_emulator "$WORK" "" tls || rc=$?
[[ -z ${emu_pid:-} ]] || emulators+=("$emu_pid")
if [[ $rc -eq 77 ]]; then
  echo "skipped: $emu_why"
  exit 77
fi
[[ $rc -eq 0 ]] || exit 1

K8S=(--provider kubernetes --kubeconfig "$emu_kubeconfig" --namespace "$emu_namespace")
[[ -z $emu_container ]] || K8S+=(--container "$emu_container")

stderr_of() { head -c 600 "$WORK/$1.err" 2>/dev/null || true; }
# Each error check also prints the message it got, for the log.
show() { printf '        (%s)\n' "$(head -c 400 "$WORK/$1.err" | tr '\n' ' ')"; }

# ------------------------------------------------------------------ bytes

all_bytes "$WORK/all.bin"
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

# An exec that RBAC forbids (403): a clear permission error, asked once (a
# refusal is not retried).
if [[ -n ${emu_forbidden_pod:-} ]]; then
  run forbidden run "${K8S[@]}" --pod "$emu_forbidden_pod" -- /bin/true
  asked=$(grep -c "exec /api/v1/namespaces/$emu_namespace/pods/$emu_forbidden_pod/exec -> 403" "$WORK/k8s/requests.log" || true)
  if [[ $STATUS -ne 0 ]] && grep -q "may not exec in" "$WORK/forbidden.err" &&
     grep -q "forbidden" "$WORK/forbidden.err" && [[ $asked -eq 1 ]]; then
    pass "an exec that RBAC forbids (403) is a clear permission error, not retried"
    show forbidden
  else
    fail "an exec that RBAC forbids (403) is a clear permission error, not retried" "status $STATUS, asked $asked times" \
      "stderr: $(stderr_of forbidden)"
  fi
else
  fail "an exec that RBAC forbids (403) is a clear permission error, not retried" "the emulator names no forbidden pod"
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

# ------------------------------------------- how kubectl finds its way in

# The same pod through the emulator's other kubeconfigs: a client
# certificate, a tokenFile, and tls-server-name (the server answers that
# name with a certificate from another CA, which only that kubeconfig
# trusts); then a KUBECONFIG list, merged. Each runs printf of a NUL and
# 0xff with exit 7.
kdir=$(dirname "$emu_kubeconfig")
expect_nul_ff_7() {  # expect_nul_ff_7 CHECK NAME ARGS... (KUBECONFIG as the caller sets it)
  local check=$1 name=$2
  shift 2
  local c=()
  [[ -z $emu_container ]] || c=(--container "$emu_container")
  run "$name" run --provider kubernetes "$@" --namespace "$emu_namespace" --pod "$emu_pod" "${c[@]}" \
    -- /bin/sh -c 'printf "\000\377"; exit 7'
  if [[ $STATUS -eq 7 && $(od -An -tx1 "$WORK/$name.out" | tr -d ' \n') == 00ff ]]; then
    pass "$check"
  else
    fail "$check" "status $STATUS, stdout $(od -An -tx1 "$WORK/$name.out" | head -c 100)" "stderr: $(stderr_of "$name")"
  fi
}
for v in cert tokenfile named; do
  [[ -f $kdir/kubeconfig-$v ]] || fail "the emulator wrote kubeconfig-$v" "no $kdir/kubeconfig-$v"
done
certs_before=$(grep -c 'auth client certificate' "$kdir/requests.log" || true)
expect_nul_ff_7 "a client certificate and key (relative paths) authenticate" cert --kubeconfig "$kdir/kubeconfig-cert"
certs_after=$(grep -c 'auth client certificate' "$kdir/requests.log" || true)
if ((certs_after > certs_before)); then
  pass "the emulator let the client certificate in ($((certs_after - certs_before)) requests)"
else
  fail "the emulator let the client certificate in" "no 'auth client certificate' line in its log"
fi
expect_nul_ff_7 "a tokenFile (relative path) authenticates" tokenfile --kubeconfig "$kdir/kubeconfig-tokenfile"
expect_nul_ff_7 "tls-server-name picks the server's certificate and the name checked" named \
  --kubeconfig "$kdir/kubeconfig-named"
# Without tls-server-name the server answers with its other certificate,
# which the named CA does not sign: refused.
grep -v 'tls-server-name' "$kdir/kubeconfig-named" >"$kdir/kubeconfig-unnamed"
run unnamed run --provider kubernetes --kubeconfig "$kdir/kubeconfig-unnamed" --namespace "$emu_namespace" \
  --pod "$emu_pod" -- /bin/true
if [[ $STATUS -ne 0 ]] && grep -q 'was not trusted.*certificate verify failed' "$WORK/unnamed.err"; then
  pass "the same kubeconfig without tls-server-name is refused by certificate"
  show unnamed
else
  fail "the same kubeconfig without tls-server-name is refused by certificate" "status $STATUS" \
    "stderr: $(stderr_of unnamed)"
fi
# Without the client certificate the cert kubeconfig has no credentials.
grep -v 'client-' "$kdir/kubeconfig-cert" >"$kdir/kubeconfig-nocert"
run nocert run --provider kubernetes --kubeconfig "$kdir/kubeconfig-nocert" --namespace "$emu_namespace" \
  --pod "$emu_pod" -- /bin/true
if [[ $STATUS -ne 0 ]] && grep -q "refused the credentials" "$WORK/nocert.err"; then
  pass "the same kubeconfig without its client certificate is refused (401)"
else
  fail "the same kubeconfig without its client certificate is refused (401)" "status $STATUS" \
    "stderr: $(stderr_of nocert)"
fi
# KUBECONFIG, merged: a first file with only the context (and the current
# context), a missing one, then the cert kubeconfig with the cluster and the
# user, whose relative paths resolve against its own directory (the
# emulator's plain kubeconfig last: its user of the same name is ignored).
mkdir -p "$WORK/merge"
printf '%s\n' 'apiVersion: v1' 'kind: Config' 'current-context: merged' 'contexts:' '- name: merged' \
  "  context: {cluster: emulator, user: emulator, namespace: $emu_namespace}" >"$WORK/merge/config"
certs_before=$(grep -c 'auth client certificate' "$kdir/requests.log" || true)
KUBECONFIG="$WORK/merge/config:$WORK/merge/missing:$kdir/kubeconfig-cert:$emu_kubeconfig"
export KUBECONFIG
expect_nul_ff_7 "a KUBECONFIG list is merged as kubectl does (first file wins, missing ones skipped)" merged
unset KUBECONFIG
certs_after=$(grep -c 'auth client certificate' "$kdir/requests.log" || true)
if ((certs_after > certs_before)); then
  pass "the merged user is the first file's: the client certificate, not the later token"
else
  fail "the merged user is the first file's: the client certificate, not the later token" "no certificate used"
fi

echo "$((CHECKS - FAILED))/$CHECKS checks passed"
[[ $FAILED -eq 0 ]]
