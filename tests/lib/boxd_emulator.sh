# Sourced: starts the boxd emulator (tests/emulators/boxd.mjs, needs
# @grpc/grpc-js from tests/emulators/node_modules) for the boxd conformance
# targets, the CLI test, the chaos run and the benchmark.
#
#   start_boxd_emulator DIR [EMULATOR ARGS...]   e.g. --tls, --faults SPEC, --jwt-ttl-ms MS
#
# Returns 0 with boxd_pid, boxd_url (the gRPC endpoint), boxd_auth_url (the
# token exchange), boxd_ca (a PEM file, or empty), boxd_vm and BOXD_API_KEY
# (exported) set; 77 when this machine cannot run it (no node 20, no
# emulator, its node modules cannot be installed); 1 when it failed to come up.
boxd_emulator_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../emulators" 2>/dev/null && pwd || true)
# shellcheck source=emulator_modules.sh
source "$(dirname "${BASH_SOURCE[0]}")/emulator_modules.sh"

start_boxd_emulator() {
  local dir=$1
  shift
  boxd_pid=
  command -v node >/dev/null || { echo "no node" >&2; return 77; }
  local major
  major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
  [[ $major -ge 20 ]] || { echo "node $major is older than 20" >&2; return 77; }
  [[ -n $boxd_emulator_dir && -f $boxd_emulator_dir/boxd.mjs ]] || { echo "no tests/emulators/boxd.mjs" >&2; return 77; }
  emulator_modules "$boxd_emulator_dir" || return
  mkdir -p "$dir"
  node "$boxd_emulator_dir/boxd.mjs" --dir "$dir" "$@" >"$dir/emulator.json" 2>"$dir/emulator.log" &
  boxd_pid=$!
  local line=
  for _ in $(seq 1 300); do
    line=$(head -n 1 "$dir/emulator.json" 2>/dev/null || true)
    [[ $line == *'}'* ]] && break
    kill -0 "$boxd_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [[ $line != *'}'* ]]; then
    echo "the boxd emulator did not start: $(tail -c 2000 "$dir/emulator.log")" >&2
    return 1
  fi
  local fields
  fields=$(node -e '
    const j = JSON.parse(process.argv[1]);
    console.log([j.url, j.auth_url, j.ca || "", j.vm, j.api_key].join("\n"));' "$line") || return 1
  { read -r boxd_url; read -r boxd_auth_url; read -r boxd_ca; read -r boxd_vm; read -r BOXD_API_KEY; } <<<"$fields"
  export BOXD_API_KEY
  [[ -n $boxd_url && -n $boxd_auth_url && -n $boxd_vm && -n $BOXD_API_KEY ]] || {
    echo "the boxd emulator's line lacks url, auth_url, vm or api_key" >&2
    return 1
  }
}

# The provider flags for `tether` against the emulator just started.
boxd_flags() {
  local f=(--provider boxd --vm "$boxd_vm" --endpoint "$boxd_url" --auth-endpoint "$boxd_auth_url")
  [[ -z $boxd_ca ]] || f+=(--ca-file "$boxd_ca")
  printf '%s\n' "${f[@]}"
}
