#!/usr/bin/env bash
# The start-latency benchmark (start_latency.py; issue 32): starts the E2B,
# Runloop and Kubernetes emulators (TLS) and a private sshd on 127.0.0.1,
# then measures `echo hi` through tether (CLI, C++ library, Python package)
# and through each provider's official SDK and plain ssh, each at an added
# one-way delay, with round trips counted. Called by `./dev startbench [ARGS...]`; ARGS go to
# start_latency.py (--runs N, --delays 0,25). Prints Markdown on stdout.
#
#   tests/bench/start_latency.sh TETHER RUNNER PYTHON [ARGS...]   (PYTHON "": no Python rows)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tether=$1 runner=$2 python=$3
shift 3
work=$(mktemp -d "${TMPDIR:-/tmp}/tether-start-bench.XXXXXX")
sshd_pid=
cleanup() {
  set +e # (a failing step of the cleanup never changes the exit status)
  local pid
  for pid in "${e2b_pid:-}" "${runloop_pid:-}" "${emu_pid:-}"; do
    [[ -z $pid ]] || kill -TERM "$pid" 2>/dev/null
  done
  [[ -z $sshd_pid ]] || kill "$sshd_pid" 2>/dev/null
  local d argv
  for d in /proc/[0-9]*; do
    argv=$( { tr '\0' ' ' <"$d/cmdline"; } 2>/dev/null || true)
    [[ $argv == *"$work/"* && ${d#/proc/} != "$$" ]] && kill -9 "${d#/proc/}" 2>/dev/null
  done
  rm -rf "$work"
}
trap cleanup EXIT
for lib in e2b_emulator runloop_emulator kubernetes_emulator loopback_sshd; do
  # shellcheck source=/dev/null
  source "$here/../lib/$lib.sh"
done
targets=()
# One native target as start_latency.py's JSON: NAME URL FLAGS_JSON SDK_JSON [ENV_JSON [TEMPLATES_JSON]].
target() {
  targets+=(--target "$(python3 - "$@" <<'PY'
import json, sys
name, url, flags, sdk = sys.argv[1:5]
env = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
templates = json.loads(sys.argv[6]) if len(sys.argv) > 6 else {}
scheme, rest = url.split("://", 1)
print(json.dumps({"name": name, "upstream": rest.split("/", 1)[0], "scheme": scheme, "flags": json.loads(flags),
                  "sdk": json.loads(sdk), "env": env, "templates": templates}))
PY
)")
}
ca_flag() { [[ -z $1 ]] || printf ', "--ca-file", "%s"' "$1"; }
mkdir -p "$work/ssh" "$work/k8s"
if start_loopback_sshd "$work/ssh" >&2; then
  targets+=(--ssh "$(sed -n 's/^Port //p' "$work/ssh/sshd_config"),$work/ssh/user_key,$(id -un)")
else
  echo "start_latency: no loopback sshd; the ssh rows are left out" >&2
fi
if start_e2b_emulator "$work/e2b" --tls >&2; then
  target e2b "$e2b_url" \
    "[\"--sandbox\", \"$e2b_sandbox\", \"--endpoint\", \"{url}\", \"--sandbox-url\", \"{url}\"$(ca_flag "$e2b_ca")]" \
    "{\"sandbox\": \"$e2b_sandbox\", \"url\": \"{url}\"}" "{\"NODE_EXTRA_CA_CERTS\": \"$e2b_ca\"}"
else
  echo "start_latency: the E2B emulator did not start; the e2b rows are left out" >&2
fi
if start_runloop_emulator "$work/runloop" --tls >&2; then
  target runloop "$runloop_url" \
    "[\"--devbox\", \"$runloop_devbox\", \"--endpoint\", \"{url}\"$(ca_flag "$runloop_ca")]" \
    "{\"devbox\": \"$runloop_devbox\", \"url\": \"{url}\"}" "{\"NODE_EXTRA_CA_CERTS\": \"$runloop_ca\"}"
else
  echo "start_latency: the Runloop emulator did not start; the runloop rows are left out" >&2
fi
if start_kubernetes_emulator "$work/k8s" "" --tls >&2; then
  # The kubeconfig with its server replaced by the proxy's URL.
  sed "s|server: .*|server: {url}|" "$emu_kubeconfig" >"$work/k8s/kubeconfig.template"
  target kubernetes "$emu_url" \
    "[\"--kubeconfig\", \"{kubeconfig}\", \"--namespace\", \"$emu_namespace\", \"--pod\", \"$emu_pod\", \"--container\", \"$emu_container\"]" \
    "{\"kubeconfig\": \"{kubeconfig}\", \"namespace\": \"$emu_namespace\", \"pod\": \"$emu_pod\", \"container\": \"$emu_container\"}" \
    "{}" "{\"{kubeconfig}\": \"$work/k8s/kubeconfig.template\"}"
else
  echo "start_latency: the Kubernetes emulator did not start (${emu_why:-}); the kubernetes rows are left out" >&2
fi
((${#targets[@]})) || { echo "start_latency: no target could be started" >&2; exit 1; }
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(uname -srm), load $(cut -d' ' -f1-3 /proc/loadavg)"
# An empty PYTHON leaves the Python package's rows out (the bench itself
# runs on the system's python3 then).
PYTHONPATH=$here "${python:-python3}" "$here/start_latency.py" --tether "$tether" --runner "$runner" \
  ${python:+--python "$python"} --emulator-dir "$here/../emulators" "${targets[@]}" "$@"
