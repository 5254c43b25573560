#!/usr/bin/env bash
# The cost of tether's exchange tunnel on Boat, through the Boat emulator
# (no SDK exists to compare with): throughput of 64 MiB of random and of
# compressible output, the bytes on the native channel (request and answer
# bodies) per byte of child output, and native requests per second of a
# process that streams a line every 100 ms.
#
#   tests/bench/boat_cost.sh TETHER [MIB]
set -euo pipefail
tether=$1 mib=${2:-64}
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work=$(mktemp -d /tmp/tether-boat-cost-XXXXXX)
boat_pid=
cleanup() {
  set +e # (a failing step of the cleanup never changes the exit status)
  [[ -z $boat_pid ]] || { kill -TERM "$boat_pid" 2>/dev/null; wait "$boat_pid" 2>/dev/null; }
  rm -rf "$work"
}
trap cleanup EXIT
# shellcheck source=../lib/boat_emulator.sh
source "$here/../lib/boat_emulator.sh"
start_boat_emulator "$work/boat"
mapfile -t flags < <(boat_flags)
"$tether" run "${flags[@]}" -- true  # the supervisor in place
bytes=$((mib * 1048576))
# Requests and body bytes logged so far.
totals() { awk '/ -> / { n++; for (i = 1; i < NF; i++) { if ($i == "in" || $i == "out") b += $(i + 1) } }
                END { printf "%d %d\n", n, b }' "$work/boat/requests.log"; }
job() {  # job NAME SCRIPT OUTPUT-BYTES
  local name=$1 script=$2 out=$3 before after t0 t1 got
  read -r -a before < <(totals)
  t0=$(date +%s.%N)
  got=$("$tether" run "${flags[@]}" -- sh -c "$script" | wc -c)
  t1=$(date +%s.%N)
  read -r -a after < <(totals)
  [[ $got -eq $out ]] || { echo "boat_cost: $name: $got bytes, not $out" >&2; exit 1; }
  awk -v n="$name" -v s="$(echo "$t1 - $t0" | bc)" -v out="$out" -v r=$((after[0] - before[0])) \
    -v b=$((after[1] - before[1])) 'BEGIN {
      printf "| %s | %.2f MB/s | %d requests | %.3f channel bytes per output byte | %.1f requests/s |\n",
             n, out / s / 1e6, r, b / out, r / s }'
}
echo "| job | throughput | native requests | channel bytes per output byte | requests per second |"
echo "|---|---:|---:|---:|---:|"
job "$mib MiB random" "head -c $bytes /dev/urandom" "$bytes"
job "$mib MiB compressible" "yes 'tether boat line 0123456789 abcdefghij' | head -c $bytes" "$bytes"
job "a line every 100 ms for 4 s" 'for i in $(seq 40); do echo "line $i"; sleep 0.1; done' 311
