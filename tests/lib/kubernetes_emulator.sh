# Sourced by tests that need the Kubernetes API server emulator
# (tests/emulators/kubernetes.mjs, proven by @kubernetes/client-node).
#
#   start_kubernetes_emulator DIR [FAULTS] [--tls]
#
# Starts it with its state in DIR/k8s (its pod's processes get TMPDIR=DIR)
# and waits for its ready line. Returns 0 with emu_pid, emu_url,
# emu_kubeconfig, emu_namespace, emu_pod, emu_container, emu_forbidden_pod
# (a pod the token may read but not exec into: 403) set (the token
# stays in the kubeconfig and in emu_token, never in an argv); 77 with
# emu_why when this machine cannot run it (no node, no node_modules and
# tests/emulators/setup.sh could not make them); 1 when it failed.
# shellcheck source=emulator_modules.sh
source "$(dirname "${BASH_SOURCE[0]}")/emulator_modules.sh"
start_kubernetes_emulator() {
  local dir=$1 faults=${2:-} tls=${3:-} root line i
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  emu_pid=
  command -v node >/dev/null || { emu_why="no node"; return 77; }
  [[ -f $root/tests/emulators/kubernetes.mjs ]] || { emu_why="no tests/emulators/kubernetes.mjs"; return 77; }
  emulator_modules "$root/tests/emulators" 2>"$dir/emulators-setup.log" ||
    { emu_why="no tests/emulators/node_modules (tests/emulators/setup.sh could not make them)"; return 77; }
  local args=(--dir "$dir/k8s")
  [[ -n $tls ]] && args+=(--tls)
  [[ -n $faults ]] && args+=(--faults "$faults")
  mkdir -p "$dir/k8s"
  TMPDIR=$dir node "$root/tests/emulators/kubernetes.mjs" "${args[@]}" >"$dir/emulator.out" 2>"$dir/emulator.err" &
  emu_pid=$!
  for i in $(seq 1 300); do
    line=$(head -n1 "$dir/emulator.out" 2>/dev/null || true)
    [[ $line == *'}'* ]] && break
    if ! kill -0 "$emu_pid" 2>/dev/null; then
      echo "the kubernetes emulator exited: $(head -c 2000 "$dir/emulator.err")" >&2
      return 1
    fi
    sleep 0.1
  done
  [[ $line == *'}'* ]] || { echo "the kubernetes emulator did not get ready in 30 s" >&2; return 1; }
  local fields
  mapfile -t fields < <(node -e '
    const j = JSON.parse(process.argv[1]);
    for (const k of ["url", "kubeconfig", "namespace", "pod", "container", "token", "forbidden_pod"]) console.log(String(j[k] ?? ""));
  ' "$line")
  [[ ${#fields[@]} -eq 7 ]] || { echo "the kubernetes emulator's ready line is not what we expect: $line" >&2; return 1; }
  emu_url=${fields[0]}
  emu_kubeconfig=${fields[1]}
  emu_namespace=${fields[2]}
  emu_pod=${fields[3]}
  emu_container=${fields[4]}
  emu_token=${fields[5]}
  emu_forbidden_pod=${fields[6]}
  return 0
}

# The provider flags for `tether` against the emulator just started.
kubernetes_flags() {
  local f=(--provider kubernetes --kubeconfig "$emu_kubeconfig" --pod "$emu_pod" --namespace "$emu_namespace")
  [[ -z $emu_container ]] || f+=(--container "$emu_container")
  printf '%s\n' "${f[@]}"
}
