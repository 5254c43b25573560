# Sourced: starts the Modal emulator (tests/emulators/modal.mjs, needs
# @grpc/grpc-js from tests/emulators/node_modules) for the modal conformance
# targets, the CLI test, the chaos run and the benchmark.
#
#   start_modal_emulator DIR [EMULATOR ARGS...]   e.g. --tls, --faults SPEC
#
# Returns 0 with modal_pid, modal_url (the control plane URL), modal_ca (a
# PEM file, or empty), modal_sandbox and MODAL_TOKEN_ID / MODAL_TOKEN_SECRET
# (exported) set; 77 when this machine cannot run it (no node 20, no
# emulator, its node modules cannot be installed); 1 when it failed to come up.
modal_emulator_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../emulators" 2>/dev/null && pwd || true)
# shellcheck source=emulator_modules.sh
source "$(dirname "${BASH_SOURCE[0]}")/emulator_modules.sh"

start_modal_emulator() {
  local dir=$1
  shift
  modal_pid=
  command -v node >/dev/null || { echo "no node" >&2; return 77; }
  local major
  major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
  [[ $major -ge 20 ]] || { echo "node $major is older than 20" >&2; return 77; }
  [[ -n $modal_emulator_dir && -f $modal_emulator_dir/modal.mjs ]] || { echo "no tests/emulators/modal.mjs" >&2; return 77; }
  emulator_modules "$modal_emulator_dir" || return
  mkdir -p "$dir"
  node "$modal_emulator_dir/modal.mjs" --dir "$dir" "$@" >"$dir/emulator.json" 2>"$dir/emulator.log" &
  modal_pid=$!
  local line=
  for _ in $(seq 1 300); do
    line=$(head -n 1 "$dir/emulator.json" 2>/dev/null || true)
    [[ $line == *'}'* ]] && break
    kill -0 "$modal_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [[ $line != *'}'* ]]; then
    echo "the Modal emulator did not start: $(tail -c 2000 "$dir/emulator.log")" >&2
    return 1
  fi
  local fields
  fields=$(node -e '
    const j = JSON.parse(process.argv[1]);
    console.log([j.url, j.ca || "", j.sandbox, j.token_id, j.token_secret].join("\n"));' "$line") || return 1
  { read -r modal_url; read -r modal_ca; read -r modal_sandbox; read -r MODAL_TOKEN_ID; read -r MODAL_TOKEN_SECRET; } <<<"$fields"
  export MODAL_TOKEN_ID MODAL_TOKEN_SECRET
  [[ -n $modal_url && -n $modal_sandbox && -n $MODAL_TOKEN_ID ]] || {
    echo "the Modal emulator's line lacks url, sandbox or token" >&2
    return 1
  }
}

# The provider flags for `tether` against the emulator just started.
modal_flags() {
  local f=(--provider modal --sandbox "$modal_sandbox" --endpoint "$modal_url")
  [[ -z $modal_ca ]] || f+=(--ca-file "$modal_ca")
  printf '%s\n' "${f[@]}"
}
