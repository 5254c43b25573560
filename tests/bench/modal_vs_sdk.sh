#!/usr/bin/env bash
# Start-to-first-byte and throughput of `tether run --provider modal` against
# the official modal SDK's own exec doing the same job, in one run against
# one Modal emulator (h2c on loopback; the SDK dials the router in plaintext
# there too):
#   - `echo hi`: ms to the first stdout byte and to the end (medians)
#   - `head -c 67108864 /dev/urandom` and `/dev/zero` (64 MiB, binary: the
#     router's stdio is bytes, and the SDK reads it in binary mode): MB/s,
#     whole run and from the first byte (zeros compress under tether's zstd)
# Prints one JSON line with the ratios (tether / SDK). Both make the control
# plane's calls per run (a new SDK client each run); tether also probes the
# sandbox, checks (the first time installs) its supervisor and launches it
# on every run.
#
#   tests/bench/modal_vs_sdk.sh path/to/tether [RUNS]
set -euo pipefail
tether=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
runs=${2:-5}
work=$(mktemp -d "${TMPDIR:-/tmp}/tether-modal-bench.XXXXXX")
cleanup() {
  set +e # (a failing step of the cleanup never changes the exit status)
  [[ -z ${modal_pid:-} ]] || kill -TERM "$modal_pid" 2>/dev/null || true
  local d argv
  for d in /proc/[0-9]*; do
    argv=$( { tr '\0' ' ' <"$d/cmdline"; } 2>/dev/null || true)
    [[ $argv == *"$work/"* && ${d#/proc/} != "$$" ]] && kill -9 "${d#/proc/}" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
# shellcheck source=../lib/modal_emulator.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/modal_emulator.sh"
# Release supervisors are stripped; a debug build's is several times larger
# and its sha256 (host and sandbox, every run) would dominate the start.
if [[ -n ${TETHER_SUPERVISOR_DIR:-} ]] && command -v strip >/dev/null; then
  mkdir -p "$work/sup"
  for f in "$TETHER_SUPERVISOR_DIR"/tether-supervisor-*; do strip -o "$work/sup/$(basename "$f")" "$f" 2>/dev/null || cp "$f" "$work/sup/"; # (another architecture: as is)
  done
  export TETHER_SUPERVISOR_DIR=$work/sup
fi
start_modal_emulator "$work/modal"
MODAL_SERVER_URL=$modal_url node "$(dirname "${BASH_SOURCE[0]}")/modal_vs_sdk.mjs" \
  "$tether" "$modal_emulator_dir" "$modal_url" "$modal_sandbox" "$runs"
