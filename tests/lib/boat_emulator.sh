# Sourced: starts the Boat emulator (tests/emulators/boat.mjs, no node
# modules needed) for the boat conformance targets and the CLI test.
#
#   start_boat_emulator DIR [EMULATOR ARGS...]   e.g. --tls, --faults SPEC
#
# Returns 0 with boat_pid, boat_url, boat_ca (a PEM file, or empty),
# boat_sandbox and BOAT_API_KEY (exported) set; 77 when this machine cannot
# run it (no node 20, no emulator); 1 when it failed to come up.
boat_emulator_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../emulators" 2>/dev/null && pwd || true)

start_boat_emulator() {
  local dir=$1
  shift
  boat_pid=
  command -v node >/dev/null || { echo "no node" >&2; return 77; }
  local major
  major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
  [[ $major -ge 20 ]] || { echo "node $major is older than 20" >&2; return 77; }
  [[ -n $boat_emulator_dir && -f $boat_emulator_dir/boat.mjs ]] || { echo "no tests/emulators/boat.mjs" >&2; return 77; }
  mkdir -p "$dir"
  node "$boat_emulator_dir/boat.mjs" --dir "$dir" "$@" >"$dir/emulator.json" 2>"$dir/emulator.log" &
  boat_pid=$!
  local line=
  for _ in $(seq 1 300); do
    line=$(head -n 1 "$dir/emulator.json" 2>/dev/null || true)
    [[ $line == *'}'* ]] && break
    kill -0 "$boat_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [[ $line != *'}'* ]]; then
    echo "the Boat emulator did not start: $(tail -c 2000 "$dir/emulator.log")" >&2
    return 1
  fi
  local fields
  fields=$(node -e '
    const j = JSON.parse(process.argv[1]);
    console.log([j.url, j.ca || "", j.sandbox, j.api_key].join("\n"));' "$line") || return 1
  { read -r boat_url; read -r boat_ca; read -r boat_sandbox; read -r BOAT_API_KEY; } <<<"$fields"
  export BOAT_API_KEY
  [[ -n $boat_url && -n $boat_sandbox && -n $BOAT_API_KEY ]] || {
    echo "the Boat emulator's line lacks url, sandbox or api_key" >&2
    return 1
  }
}

# The provider flags for `tether` against the emulator just started.
boat_flags() {
  local f=(--provider boat --sandbox "$boat_sandbox" --endpoint "$boat_url")
  [[ -z $boat_ca ]] || f+=(--ca-file "$boat_ca")
  printf '%s\n' "${f[@]}"
}
