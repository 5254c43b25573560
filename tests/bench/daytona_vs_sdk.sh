#!/usr/bin/env bash
# The cost of the text path on Daytona: `tether run --provider daytona`
# against the official @daytonaio/sdk doing the same job, through one
# Daytona emulator (TLS), in one run (tests/bench/daytona_vs_sdk.mjs):
#   - bytes on the native channel (log WebSocket bytes, replays included, +
#     input data) per byte of child output
#   - native requests (REST calls and WebSocket upgrades) per second of a
#     process that streams a line every 20 ms for ~4 s
#   - throughput of 64 MiB of random and of compressible output (1 KiB text lines)
#     (the SDK receives the random bytes mangled: it is text only)
# Prints one JSON line with both sides' figures and the ratios (tether / SDK).
#
#   tests/bench/daytona_vs_sdk.sh path/to/tether [RUNS] [MIB]
set -euo pipefail
tether=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
runs=${2:-3}
mib=${3:-64}
work=$(mktemp -d "${TMPDIR:-/tmp}/tether-daytona-bench.XXXXXX")
cleanup() {
  set +e # (a failing step of the cleanup never changes the exit status)
  [[ -z ${daytona_pid:-} ]] || kill -TERM "$daytona_pid" 2>/dev/null || true
  local d argv
  for d in /proc/[0-9]*; do
    argv=$( { tr '\0' ' ' <"$d/cmdline"; } 2>/dev/null || true)
    [[ $argv == *"$work/"* && ${d#/proc/} != "$$" ]] && kill -9 "${d#/proc/}" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
# shellcheck source=../lib/daytona_emulator.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/daytona_emulator.sh"
# Release supervisors are stripped; a debug build's is several times larger.
if [[ -n ${TETHER_SUPERVISOR_DIR:-} ]] && command -v strip >/dev/null; then
  mkdir -p "$work/sup"
  for f in "$TETHER_SUPERVISOR_DIR"/tether-supervisor-*; do strip -o "$work/sup/$(basename "$f")" "$f" 2>/dev/null || cp "$f" "$work/sup/"; # (another architecture: as is)
  done
  export TETHER_SUPERVISOR_DIR=$work/sup
fi
start_daytona_emulator "$work/daytona" --tls
NODE_EXTRA_CA_CERTS=$daytona_ca node --max-old-space-size=4096 "$(dirname "${BASH_SOURCE[0]}")/daytona_vs_sdk.mjs" \
  "$tether" "$daytona_emulator_dir" "$daytona_url" "$daytona_sandbox" "$daytona_ca" "$runs" "$mib"
