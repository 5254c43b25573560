#!/usr/bin/env bash
# ctest entry point: chaos_provider.sh CHAOS_TEST PROVIDER SEEDS
# The chaos suite (chaos_test) over a native provider: its emulator started
# with its own faults on (streams cut mid-line, 5xx answers, stalls) and the
# chaos channel's faults on top, every seed through the tunnel the provider's
# channel gets. Exit 77 (skipped) where the emulator cannot run.
set -euo pipefail
chaos=$1 provider=$2 seeds=$3
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work=$(mktemp -d /tmp/tether-chaos-provider-XXXXXX)
pid=
cleanup() {
  set +e # (a failing step of the cleanup never changes the exit status)
  [[ -z $pid ]] || { kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }
  rm -rf "$work"
}
trap cleanup EXIT
# shellcheck source=/dev/null
source "$here/../lib/${provider}_emulator.sh"
rc=0
case $provider in
  daytona) start_daytona_emulator "$work" --faults seed=2,cut=0.01,http5xx=0.02,slow=0.005 || rc=$?; pid=${daytona_pid:-} ;;
  runloop) start_runloop_emulator "$work" --sse-ms 2000 --faults seed=2,cut=0.01,http5xx=0.02,slow=0.005,stall=0.003 \
             || rc=$?; pid=${runloop_pid:-} ;;
  modal) start_modal_emulator "$work" --faults seed=2,cut=0.01,unavailable=0.02,slow=0.005,expire || rc=$?
         pid=${modal_pid:-} ;;
  boat) start_boat_emulator "$work" --faults seed=2,http5xx=0.02,slow=0.005 || rc=$?; pid=${boat_pid:-} ;;
  *) echo "chaos_provider.sh: no emulator for '$provider'" >&2; exit 2 ;;
esac
[[ $rc -ne 77 ]] || { echo "cannot run the $provider emulator here: skipped"; exit 77; }
[[ $rc -eq 0 ]] || exit 1
mapfile -t flags < <("${provider}_flags")
status=0
"$chaos" "${flags[@]}" --seeds "$seeds" --parallel 4 || status=$?
echo "$provider emulator: $(grep -c ' -> \|^[^ ]* Task\|^[^ ]* Sandbox' "$work/requests.log" 2>/dev/null || true) requests," \
  "$(grep -c 'FAULT' "$work/requests.log" 2>/dev/null || true) of its own faults injected"
((status == 0)) || tail -c 2000 "$work/emulator.log" >&2
exit "$status"
