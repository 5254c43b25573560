#!/usr/bin/env bash
# The cost of Daytona's process API v2 against its session API (v1), both
# through `tether run --provider daytona --process-api v1|v2` against one
# Daytona emulator serving both (TLS), alternating, in one run
# (tests/bench/daytona_v2_cost.mjs):
#   - native requests per second of a process that prints a line every
#     20 ms for ~4 s
#   - throughput of 64 MiB of random and of compressible output (1 KiB lines)
#   - bytes on the native channel per byte of output
# Prints one JSON object with both sides' medians and the ratios v2 / v1.
#
#   tests/bench/daytona_v2_cost.sh path/to/tether [RUNS] [MIB]
set -euo pipefail
tether=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
runs=${2:-3}
mib=${3:-64}
work=$(mktemp -d "${TMPDIR:-/tmp}/tether-daytona-v2-bench.XXXXXX")
cleanup() {
  set +e # (a failing step of the cleanup never changes the exit status)
  [[ -z ${daytona_pid:-} ]] || kill -TERM "$daytona_pid" 2>/dev/null || true
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
# shellcheck source=../lib/daytona_emulator.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/daytona_emulator.sh"
if [[ -n ${TETHER_SUPERVISOR_DIR:-} ]] && command -v strip >/dev/null; then
  mkdir -p "$work/sup"
  for f in "$TETHER_SUPERVISOR_DIR"/tether-supervisor-*; do strip -o "$work/sup/$(basename "$f")" "$f" 2>/dev/null || cp "$f" "$work/sup/"; done
  export TETHER_SUPERVISOR_DIR=$work/sup
fi
start_daytona_emulator "$work/daytona" --tls --process-api both
NODE_EXTRA_CA_CERTS=$daytona_ca node "$(dirname "${BASH_SOURCE[0]}")/daytona_v2_cost.mjs" "$tether" "$daytona_url" "$daytona_sandbox" "$daytona_ca" "$runs" "$mib"
