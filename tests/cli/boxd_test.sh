#!/usr/bin/env bash
# The exactness check of `tether run --provider boxd` against the boxd
# emulator (tests/emulators/boxd.mjs over gRPC with TLS: the binary tunnel
# over the Exec stream, which has no signal, kill or resize of its own and
# whose end kills the command's process group): all 256 byte values, NUL,
# invalid UTF-8, 1 MiB of random bytes through stdout and through stdin,
# stdin EOF, exit codes, a signal, a pty; a JWT given as BOXD_TOKEN; clear
# errors for an unknown VM, a wrong key (which never appears in them), no
# key, and a plain http:// endpoint that is not loopback; the key only ever
# sent to the exchange (the emulator logs a VIOLATION otherwise).
#
#   tests/cli/boxd_test.sh path/to/tether
#
# Exits 77 (skipped) when the emulator cannot run here (no node 20, no
# tests/emulators/node_modules).
set -euo pipefail

here=$(dirname "${BASH_SOURCE[0]}")
# shellcheck source=../lib/cli_provider.sh
source "$here/../lib/cli_provider.sh"
# shellcheck source=../lib/boxd_emulator.sh
source "$here/../lib/boxd_emulator.sh"
cli_provider_init boxd "$@"

cli_provider_start boxd boxd "$WORK/emu" --tls

printf_checks

printf 'a\000b\377\376c\300' >"$WORK/odd.want"
run odd run "${FLAGS[@]}" -- sh -c "printf 'a\\000b\\377\\376c\\300'"
same_file "NUL and invalid UTF-8 arrive exactly, no newline added" "$WORK/odd.out" "$WORK/odd.want"

# Every byte value and 1 MiB of random bytes on stdin and stdout, stdin
# EOF, exit statuses, a signal to tether (boxd has no signal call: the
# supervisor delivers it), a pty of the size asked for.
stream_checks

# A JWT as it is (BOXD_TOKEN), no key: one the emulator issued works.
jwt=$(curl -sS --cacert "$boxd_ca" -H 'Content-Type: application/json' \
  -d "{\"api_key\":\"$BOXD_API_KEY\"}" "$boxd_auth_url" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).token))')
(unset BOXD_API_KEY; BOXD_TOKEN=$jwt run token run "${FLAGS[@]}" -- sh -c 'echo from-token'; echo "$STATUS" >"$WORK/token.status")
if [[ $(cat "$WORK/token.status") -eq 0 ]] && grep -qx 'from-token' "$WORK/token.out"; then
  pass "a JWT in BOXD_TOKEN is used as it is"
else
  fail "a JWT in BOXD_TOKEN is used as it is" "stderr: $(head -c 500 "$WORK/token.err")"
fi
(unset BOXD_API_KEY; BOXD_TOKEN=not.a.jwt run badtoken run "${FLAGS[@]}" -- true; echo "$STATUS" >"$WORK/badtoken.status")
if [[ $(cat "$WORK/badtoken.status") -ne 0 ]] && grep -q 'BOXD_TOKEN' "$WORK/badtoken.err"; then
  pass "a JWT the endpoint refuses is a clear error naming BOXD_TOKEN"
else
  fail "a JWT the endpoint refuses is a clear error naming BOXD_TOKEN" "stderr: $(head -c 500 "$WORK/badtoken.err")"
fi

expect_not_found novm "an unknown VM is reported as not found" "$boxd_vm" vm-no-such-vm
expect_key_refused BOXD_API_KEY
expect_key_named key BOXD_API_KEY BOXD_TOKEN

# Plain http:// to a host that is not loopback: refused before anything is
# sent (the JWT would travel in cleartext).
mapfile -t plain < <(printf '%s\n' "${FLAGS[@]}" | sed "s|^$boxd_url\$|http://192.0.2.1:9443|")
run plain run "${plain[@]}" -- true
if [[ $STATUS -eq 125 ]] && grep -q 'plain http://' "$WORK/plain.err"; then
  pass "plain http:// to a host that is not loopback is refused"
else
  fail "plain http:// to a host that is not loopback is refused" "status $STATUS" "stderr: $(head -c 500 "$WORK/plain.err")"
fi

# The key went to the exchange only.
if grep ' VIOLATION ' "$WORK/emu/requests.log"; then
  fail "the API key never reached the gRPC endpoint" "see the VIOLATION lines above"
elif [[ $(grep -c 'auth/token -> 200' "$WORK/emu/requests.log" || true) -lt 1 ]]; then
  fail "the API key never reached the gRPC endpoint" "no exchange happened: nothing was checked"
else
  pass "the API key never reached the gRPC endpoint"
fi

echo "$((CHECKS - FAILED))/$CHECKS checks passed"
[[ $FAILED -eq 0 ]]
