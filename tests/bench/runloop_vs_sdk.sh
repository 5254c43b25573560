#!/usr/bin/env bash
# The cost of the text path on Runloop (issue 15, section 3): `tether run
# --provider runloop` against the official @runloop/api-client doing the
# same job (execute_async, the stdout SSE stream, wait_for_status), in one
# run against one Runloop emulator (plain http: tether speaks HTTP/1.1, the
# SDK its default h2c). Measured:
#   - bytes on the native channel (HTTP bodies both ways, from the
#     emulator's own counters) per byte of child output
#   - native requests per second of a process streaming a line every 100 ms
#     for ~4 s (and tether's fixed setup requests, from `true`)
#   - throughput of 64 MiB of random output and of compressible text
# Prints one JSON line with the figures and the ratios (tether / SDK). The
# SDK's random output is lossy (invalid UTF-8 replaced): it only counts
# what it received; tether's is checked byte for byte (sha256).
#
#   tests/bench/runloop_vs_sdk.sh path/to/tether [MIB]
set -euo pipefail
tether=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
mib=${2:-64}
work=$(mktemp -d "${TMPDIR:-/tmp}/tether-runloop-bench.XXXXXX")
cleanup() {
  set +e # (a failing step of the cleanup never changes the exit status)
  [[ -z ${runloop_pid:-} ]] || kill -TERM "$runloop_pid" 2>/dev/null || true
  local d argv
  for d in /proc/[0-9]*; do
    argv=$( { tr '\0' ' ' <"$d/cmdline"; } 2>/dev/null || true)
    [[ $argv == *"$work/"* && ${d#/proc/} != "$$" ]] && kill -9 "${d#/proc/}" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
here=$(dirname "${BASH_SOURCE[0]}")
# shellcheck source=../lib/runloop_emulator.sh
source "$here/../lib/runloop_emulator.sh"
"$here/../emulators/setup.sh"
# Release supervisors are stripped; a debug build's is several times larger.
if [[ -n ${TETHER_SUPERVISOR_DIR:-} ]] && command -v strip >/dev/null; then
  mkdir -p "$work/sup"
  for f in "$TETHER_SUPERVISOR_DIR"/tether-supervisor-*; do strip -o "$work/sup/$(basename "$f")" "$f" 2>/dev/null || cp "$f" "$work/sup/"; # (another architecture: as is)
  done
  export TETHER_SUPERVISOR_DIR=$work/sup
fi
start_runloop_emulator "$work/emu"
node "$here/runloop_vs_sdk.mjs" "$tether" "$runloop_emulator_dir" "$runloop_url" "$runloop_devbox" "$mib"
