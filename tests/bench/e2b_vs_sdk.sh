#!/usr/bin/env bash
# Start-to-first-byte and throughput of `tether run --provider e2b` against
# the official e2b SDK doing the same job, against one E2B emulator (TLS):
#   - `echo hi`: ms to the first stdout byte and to the end (medians)
#   - `head -c 20000000 /dev/zero | base64` (27 MB of text: the SDK decodes
#     output as text): MB/s, whole run and from the first byte; the same
#     with /dev/urandom (base64 of zeros compresses ~100x under tether's
#     zstd, random base64 only to ~75%)
# Prints one JSON line with the ratios (tether / SDK). Both do the control
# plane's connect per run; tether also probes the sandbox, checks (and the
# first time installs) its supervisor and launches it on every run.
#
#   tests/bench/e2b_vs_sdk.sh path/to/tether [RUNS]
set -euo pipefail
tether=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
runs=${2:-5}
work=$(mktemp -d "${TMPDIR:-/tmp}/tether-e2b-bench.XXXXXX")
cleanup() {
  set +e # (a failing step of the cleanup never changes the exit status)
  [[ -z ${e2b_pid:-} ]] || kill -TERM "$e2b_pid" 2>/dev/null || true
  local d argv
  for d in /proc/[0-9]*; do
    argv=$( { tr '\0' ' ' <"$d/cmdline"; } 2>/dev/null || true)
    [[ $argv == *"$work/"* && ${d#/proc/} != "$$" ]] && kill -9 "${d#/proc/}" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
# shellcheck source=../lib/e2b_emulator.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/e2b_emulator.sh"
# Release supervisors are stripped; a debug build's is several times larger
# and its sha256 (host and sandbox, every run) would dominate the start.
if [[ -n ${TETHER_SUPERVISOR_DIR:-} ]] && command -v strip >/dev/null; then
  mkdir -p "$work/sup"
  for f in "$TETHER_SUPERVISOR_DIR"/tether-supervisor-*; do strip -o "$work/sup/$(basename "$f")" "$f" 2>/dev/null || cp "$f" "$work/sup/"; # (another architecture: as is)
  done
  export TETHER_SUPERVISOR_DIR=$work/sup
fi
start_e2b_emulator "$work/e2b" --tls
NODE_EXTRA_CA_CERTS=$e2b_ca node "$(dirname "${BASH_SOURCE[0]}")/e2b_vs_sdk.mjs" \
  "$tether" "$e2b_emulator_dir" "$e2b_url" "$e2b_sandbox" "$e2b_ca" "$runs"
