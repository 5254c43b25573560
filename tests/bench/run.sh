#!/usr/bin/env bash
# Runs tether_bench with a private sshd on 127.0.0.1, so that the ssh rows
# (tether over ssh against plain ssh) are measured too. Called by
# `./dev bench [ARGS...]`; ARGS go to tether_bench (--reps N, --bytes N,
# --only SUBSTRING). Prints the Markdown table on stdout.
set -euo pipefail
bench=$1
shift
work=$(mktemp -d /tmp/tether-bench-ssh-XXXXXX)
sshd_pid=
cleanup() {
  set +e # (a failing step of the cleanup never changes the exit status)
  [[ -z $sshd_pid ]] || kill "$sshd_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
# shellcheck source=../lib/loopback_sshd.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/loopback_sshd.sh"
ssh_args=()
if start_loopback_sshd "$work"; then
  ssh_args=(--ssh "$ssh_cmd")
else
  echo "tether_bench: no loopback sshd; the ssh rows are left out" >&2
fi
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -srm), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
"$bench" "${ssh_args[@]}" "$@"
[[ -z ${ssh_cmd:-} ]] || $ssh_cmd -O exit 2>/dev/null || true
