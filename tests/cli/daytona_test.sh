#!/usr/bin/env bash
# The exactness check of `tether run --provider daytona` against the Daytona
# emulator (tests/emulators/daytona.mjs over TLS, text only: the text
# tunnel), whose log stream drops NUL, adds newlines, switches streams on
# marker bytes and decodes nothing: all 256 byte values, NUL, invalid UTF-8
# and the marker bytes, and 1 MiB of random bytes through stdout and through
# stdin, stdin EOF, exit codes, a signal, a pty; clear errors for an unknown
# sandbox, a wrong API key (which never appears in them) and no key; then
# the same exactness checks over the process API v2.
#
#   tests/cli/daytona_test.sh path/to/tether
#
# Exits 77 (skipped) when the emulator cannot run here (no node 20, no
# tests/emulators/node_modules).
set -euo pipefail

here=$(dirname "${BASH_SOURCE[0]}")
# shellcheck source=../lib/cli_provider.sh
source "$here/../lib/cli_provider.sh"
# shellcheck source=../lib/daytona_emulator.sh
source "$here/../lib/daytona_emulator.sh"
cli_provider_init daytona "$@"

cli_provider_start daytona Daytona "$WORK/emu" --tls

# Every byte value (NUL, 01 01 01, 02 02 02, invalid UTF-8 among them),
# printed by printf in the sandbox.
printf_checks

# The bytes the log stream mangles, alone: markers, NUL, a lone 0xff, no newline.
printf 'a\002\002\002b\377c\000\001\001\001' >"$WORK/mangled.want"
run mangled run "${FLAGS[@]}" -- sh -c "printf 'a\\002\\002\\002b\\377c\\000\\001\\001\\001'"
same_file "marker bytes, NUL and invalid UTF-8 arrive exactly, no newline added" "$WORK/mangled.out" "$WORK/mangled.want"

# Every byte value and 1 MiB of random bytes on stdin and stdout, stdin
# EOF, exit statuses, a signal to tether, a pty of the size asked for.
stream_checks

# An unknown sandbox.
expect_not_found nosandbox "an unknown sandbox is reported as not found" "$daytona_sandbox" no-such-sandbox-42

# A wrong API key: a clear error that does not repeat the key.
expect_key_refused DAYTONA_API_KEY
# No API key at all.
expect_key_named "API key" DAYTONA_API_KEY

# Nothing left behind: every session tether made was deleted (the deletes
# may still be on their way: waited for, 5 s at most).
sessions_made() { grep -c 'POST /toolbox/[^ ]*/process/session -> 201' "$WORK/emu/requests.log" || true; }
sessions_deleted() { grep -c 'DELETE /toolbox/[^ ]*/process/session/[^ ]* -> 204' "$WORK/emu/requests.log" || true; }
for _ in $(seq 1 50); do
  [[ $(sessions_made) -eq $(sessions_deleted) ]] && break
  sleep 0.1
done
if ! grep -q 'POST /toolbox/[^ ]*/process/session -> 201' "$WORK/emu/requests.log"; then
  fail "sessions were made and deleted" "no session was made at all"
elif [[ $(grep -c 'POST /toolbox/[^ ]*/process/session -> 201' "$WORK/emu/requests.log") -eq \
        $(grep -c 'DELETE /toolbox/[^ ]*/process/session/[^ ]* -> 204' "$WORK/emu/requests.log") ]]; then
  pass "every session tether made was deleted"
else
  fail "every session tether made was deleted" \
    "$(grep -c 'process/session -> 201' "$WORK/emu/requests.log") made," \
    "$(grep -c 'DELETE .* -> 204' "$WORK/emu/requests.log") deleted"
fi

# --process-api v2 where the daemon has none: a clear error, nothing run.
run nov2 run "${FLAGS[@]}" --process-api v2 -- true
if [[ $STATUS -ne 0 ]] && grep -q 'does not serve the process API v2' "$WORK/nov2.err"; then
  pass "--process-api v2 against a daemon without it is a clear error"
else
  fail "--process-api v2 against a daemon without it is a clear error" "status $STATUS" "stderr: $(head -c 500 "$WORK/nov2.err")"
fi
run badapi run "${FLAGS[@]}" --process-api v9 -- true
if [[ $STATUS -ne 0 ]] && grep -q 'must be auto, v1 or v2' "$WORK/badapi.err"; then
  pass "--process-api v9 is refused before anything is sent"
else
  fail "--process-api v9 is refused before anything is sent" "status $STATUS" "stderr: $(head -c 500 "$WORK/badapi.err")"
fi

# The same exactness checks over the process API v2 (an emulator serving
# both APIs: the provider picks v2), then: no session at all, and every
# process tether made purged.
cli_provider_start daytona Daytona "$WORK/emu2" --tls --process-api both
printf_checks
stream_checks
# (The purges may still be on their way: waited for, 5 s at most.)
for _ in $(seq 1 50); do
  made=$(grep -cE 'POST /toolbox/[^ /]+/processes -> 201' "$WORK/emu2/requests.log" || true)
  purged=$(grep -cE 'DELETE /toolbox/[^ /]+/processes/[^ /]+ -> 204' "$WORK/emu2/requests.log" || true)
  ((made > 0 && purged == made)) && break
  sleep 0.1
done
sessions=$(grep -c '/process/session' "$WORK/emu2/requests.log" || true)
if ((made > 0 && sessions == 0 && purged == made)); then
  pass "v2: $made processes made through the process API v2, every one purged, no session"
else
  fail "v2: processes made through the process API v2, every one purged, no session" \
    "$made made, $purged purged, $sessions session requests"
fi

echo "$((CHECKS - FAILED))/$CHECKS checks passed"
[[ $FAILED -eq 0 ]]
