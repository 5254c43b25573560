#!/usr/bin/env bash
# End-to-end checks of `tether run --provider boat` against the Boat emulator
# (tests/emulators/boat.mjs, over TLS; one-shot commands, so the exchange
# tunnel): exact bytes both ways, exit statuses, clear errors for an unknown
# sandbox, a wrong API key (which never appears in them) and no key.
#
#   tests/cli/boat_test.sh path/to/tether
#
# Exits 77 (skipped) when the emulator cannot run here (no node 20).
set -euo pipefail

here=$(dirname "${BASH_SOURCE[0]}")
# shellcheck source=../lib/cli_provider.sh
source "$here/../lib/cli_provider.sh"
# shellcheck source=../lib/boat_emulator.sh
source "$here/../lib/boat_emulator.sh"
cli_provider_init boat "$@"

cli_provider_start boat Boat "$WORK/emu" --tls

# Every byte value, printed by printf in the sandbox (Boat's own output is
# text only: the exchange tunnel's armor carries the bytes).
printf_checks

# And every byte value on stdin, through cat.
cat "$WORK/all.bin" "$WORK/all.bin" "$WORK/all.bin" >"$WORK/all3.bin"
STDIN=$WORK/all3.bin
run cat run "${FLAGS[@]}" -- cat
STDIN=/dev/null
same_file "every byte value on stdin comes back through cat" "$WORK/cat.out" "$WORK/all3.bin"
expect_status "cat exits 0" 0 cat

exit_checks exit

# An unknown sandbox.
expect_not_found nosandbox "an unknown sandbox is reported as not found" "$boat_sandbox" no-such-sandbox-42

# A wrong API key: a clear error that does not repeat the key.
expect_key_refused BOAT_API_KEY
# No API key at all.
expect_key_named "API key" BOAT_API_KEY

echo "$((CHECKS - FAILED))/$CHECKS checks passed"
[[ $FAILED -eq 0 ]]
