# Sourced: starts the Runloop emulator (tests/emulators/runloop.mjs, no node
# modules needed) for the runloop conformance targets, the CLI test and the
# benchmark.
#
#   start_runloop_emulator DIR [EMULATOR ARGS...]   e.g. --tls, --faults SPEC, --stdin-kills
#
# Returns 0 with runloop_pid, runloop_url, runloop_ca (a PEM file, or empty),
# runloop_devbox and RUNLOOP_API_KEY (exported) set; 77 when this machine
# cannot run it (no node 20, no emulator); 1 when it failed to come up.
runloop_emulator_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../emulators" 2>/dev/null && pwd || true)

start_runloop_emulator() {
  local dir=$1
  shift
  runloop_pid=
  command -v node >/dev/null || { echo "no node" >&2; return 77; }
  local major
  major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
  [[ $major -ge 20 ]] || { echo "node $major is older than 20" >&2; return 77; }
  [[ -n $runloop_emulator_dir && -f $runloop_emulator_dir/runloop.mjs ]] || {
    echo "no tests/emulators/runloop.mjs" >&2
    return 77
  }
  mkdir -p "$dir"
  node "$runloop_emulator_dir/runloop.mjs" --dir "$dir" "$@" >"$dir/emulator.json" 2>"$dir/emulator.log" &
  runloop_pid=$!
  local line=
  for _ in $(seq 1 300); do
    line=$(head -n 1 "$dir/emulator.json" 2>/dev/null || true)
    [[ $line == *'}'* ]] && break
    kill -0 "$runloop_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [[ $line != *'}'* ]]; then
    echo "the Runloop emulator did not start: $(tail -c 2000 "$dir/emulator.log")" >&2
    return 1
  fi
  local fields
  fields=$(node -e '
    const j = JSON.parse(process.argv[1]);
    console.log([j.url, j.ca || "", j.devbox, j.api_key].join("\n"));' "$line") || return 1
  { read -r runloop_url; read -r runloop_ca; read -r runloop_devbox; read -r RUNLOOP_API_KEY; } <<<"$fields"
  export RUNLOOP_API_KEY
  [[ -n $runloop_url && -n $runloop_devbox && -n $RUNLOOP_API_KEY ]] || {
    echo "the Runloop emulator's line lacks url, devbox or api_key" >&2
    return 1
  }
}

# The provider flags for `tether` against the emulator just started.
runloop_flags() {
  local f=(--provider runloop --devbox "$runloop_devbox" --endpoint "$runloop_url")
  [[ -z $runloop_ca ]] || f+=(--ca-file "$runloop_ca")
  printf '%s\n' "${f[@]}"
}
