#!/usr/bin/env bash
# `tether run --provider docker` (the native Engine API provider, through
# podman's Docker API service) against `podman exec -i` doing the same job
# in the same container (tests/lib/podman_docker.sh), in one run:
#   start    start to first stdout byte of `echo x` (median of --reps runs,
#            after one warm-up run that installs the supervisor)
#   through  --mb MB of random bytes through cat, wall time and MB/s; the
#            sha256 of what came back must equal the input's
# Prints a Markdown table with the ratios (tether / podman exec).
#
#   tests/bench/docker_vs_podman.sh path/to/tether [--reps N] [--mb MB]
set -euo pipefail
tether=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
shift
reps=7
mb=100
while [[ $# -gt 0 ]]; do
  case $1 in
    --reps) reps=$2; shift 2 ;;
    --mb) mb=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d /tmp/tether-bench-docker-XXXXXX)
# shellcheck source=../lib/podman_docker.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/podman_docker.sh"
cleanup() {
  set +e # (a failing step of the cleanup never changes the exit status)
  stop_podman_docker
  rm -rf "$work"
}
trap cleanup EXIT
start_podman_docker "$work"

tether_cmd="$tether run --provider docker --container $podman_ctr --endpoint $docker_host --"
podman_exec="$podman_cmd exec -i $podman_ctr"

# first_byte CMD...: seconds from start to the first stdout byte, then to
# the end, for one run.
first_byte() {
  python3 - "$@" <<'PY'
import subprocess, sys, time
t0 = time.monotonic()
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
first = p.stdout.read(1)
t1 = time.monotonic()
p.stdout.read()
rc = p.wait()
t2 = time.monotonic()
if first != b"x" or rc != 0:
    sys.exit(f"bad run: first byte {first!r}, status {rc}")
print(f"{t1 - t0:.4f} {t2 - t0:.4f}")
PY
}

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

$tether_cmd true  # warm-up: installs the supervisor in the container
$podman_exec true

for r in $(seq 1 "$reps"); do
  first_byte $tether_cmd echo x >>"$work/tether.start"
  first_byte $podman_exec echo x >>"$work/podman.start"
done
t_first=$(cut -d' ' -f1 "$work/tether.start" | median)
p_first=$(cut -d' ' -f1 "$work/podman.start" | median)
t_end=$(cut -d' ' -f2 "$work/tether.start" | median)
p_end=$(cut -d' ' -f2 "$work/podman.start" | median)

head -c "$((mb * 1024 * 1024))" /dev/urandom >"$work/in"
want=$(sha256sum <"$work/in" | cut -c1-64)
through() {  # through NAME CMD...: seconds; checks the sha256
  local name=$1 t0 t1 got
  shift
  t0=$(date +%s.%N)
  got=$("$@" cat <"$work/in" | sha256sum | cut -c1-64)
  t1=$(date +%s.%N)
  [[ $got == "$want" ]] || { echo "$name: sha256 differs ($got, want $want)" >&2; exit 1; }
  echo "$t1 - $t0" | bc -l
}
t_through=$(through tether $tether_cmd)
p_through=$(through podman $podman_exec)

ratio() { echo "scale=2; $1 / $2" | bc -l; }
mbs() { echo "scale=1; $mb / $1" | bc -l; }
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(uname -srm), podman $(podman --version | awk '{print $3}')"
echo
echo "| measure | tether --provider docker | podman exec -i | ratio |"
echo "|---|---|---|---|"
printf '| start to first byte (median of %s) | %.1f ms | %.1f ms | %s |\n' "$reps" \
  "$(echo "$t_first * 1000" | bc -l)" "$(echo "$p_first * 1000" | bc -l)" "$(ratio "$t_first" "$p_first")"
printf '| whole `echo x` run (median) | %.1f ms | %.1f ms | %s |\n' \
  "$(echo "$t_end * 1000" | bc -l)" "$(echo "$p_end * 1000" | bc -l)" "$(ratio "$t_end" "$p_end")"
printf '| %s MB through cat (sha256 equal) | %.2f s (%s MB/s) | %.2f s (%s MB/s) | %s |\n' "$mb" \
  "$t_through" "$(mbs "$t_through")" "$p_through" "$(mbs "$p_through")" "$(ratio "$t_through" "$p_through")"
