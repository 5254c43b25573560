#!/usr/bin/env bash
# Benchmark (not a test): `tether run --provider kubernetes` against the
# official SDK's Exec (@kubernetes/client-node) doing the same job against the
# same API server emulator (tests/emulators/kubernetes.mjs, TLS) in one run.
#
#   tests/bench/kubernetes_vs_sdk.sh path/to/tether [RUNS] [MIB]
#
# Start to first byte: `echo hi`, from spawning the program (tether; node
# running the SDK) to the first stdout byte; the SDK's in-process time (from
# its exec call, no node start-up) is shown too. Throughput: `head -c MIB
# MiB /dev/zero` to stdout, bytes over the time from first byte to the end.
# Medians of RUNS (default 5); ratios are tether / SDK. Needs node and
# tests/emulators/node_modules (tests/emulators/setup.sh); the supervisor
# as the CLI finds it (TETHER_SUPERVISOR_DIR).
set -euo pipefail
[[ $# -ge 1 && -x $1 ]] || { echo "usage: $0 PATH_TO_TETHER [RUNS] [MIB]" >&2; exit 2; }
TETHER=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
RUNS=${2:-5}
MIB=${3:-128}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
timing=$here/kubernetes_timing.mjs
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tether-k8s-bench.XXXXXX")
pids=()
cleanup() {
  set +e # (a failing step of the cleanup never changes the exit status)
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
# shellcheck source=../lib/kubernetes_emulator.sh
source "$here/../lib/kubernetes_emulator.sh"
rc=0
start_kubernetes_emulator "$WORK" "" tls || rc=$?
[[ -z ${emu_pid:-} ]] || pids+=("$emu_pid")
[[ $rc -eq 0 ]] || { echo "cannot start the emulator: ${emu_why:-see above}" >&2; exit "$rc"; }

K8S=(--provider kubernetes --kubeconfig "$emu_kubeconfig" --namespace "$emu_namespace" --pod "$emu_pod"
     --container "$emu_container")
SDK=("$emu_kubeconfig" "$emu_namespace" "$emu_pod" "$emu_container")
bytes=$((MIB * 1048576))

# The first tether run uploads the supervisor: not measured.
"$TETHER" run "${K8S[@]}" -- /bin/true
for i in $(seq 1 "$RUNS"); do
  node "$timing" spawn "$TETHER" run "${K8S[@]}" -- /bin/echo hi >>"$WORK/tether_start"
  node "$timing" spawn node "$timing" sdk "${SDK[@]}" /bin/echo hi >>"$WORK/sdk_start_spawned"
  node "$timing" sdk "${SDK[@]}" /bin/echo hi >>"$WORK/sdk_start_inproc"
  node "$timing" spawn "$TETHER" run "${K8S[@]}" -- head -c "$bytes" /dev/zero >>"$WORK/tether_tput"
  node "$timing" sdk "${SDK[@]}" head -c "$bytes" /dev/zero >>"$WORK/sdk_tput"
done

node - "$WORK" "$bytes" <<'JS'
const fs = require('node:fs');
const [dir, bytes] = [process.argv[2], Number(process.argv[3])];
const rows = (f) => fs.readFileSync(`${dir}/${f}`, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; };
for (const f of ['tether_tput', 'sdk_tput']) {
  for (const r of rows(f)) if (r.bytes !== bytes) throw new Error(`${f}: ${r.bytes} bytes, want ${bytes}`);
}
const first = (f) => median(rows(f).map((r) => r.first_ms));
const mibps = (f) => median(rows(f).map((r) => (bytes / 1048576) / ((r.total_ms - r.first_ms) / 1000)));
const t = first('tether_start'), ss = first('sdk_start_spawned'), si = first('sdk_start_inproc');
const tt = mibps('tether_tput'), st = mibps('sdk_tput');
console.log(`start to first byte (median ms): tether ${t.toFixed(0)}, SDK spawned ${ss.toFixed(0)}, SDK in-process ${si.toFixed(0)}`);
console.log(`  ratio tether / SDK spawned: ${(t / ss).toFixed(2)}; tether / SDK in-process: ${(t / si).toFixed(2)}`);
console.log(`throughput ${bytes / 1048576} MiB stdout (median MiB/s): tether ${tt.toFixed(1)}, SDK ${st.toFixed(1)}; ratio tether / SDK ${(tt / st).toFixed(2)}`);
JS
