# Sourced: starts the Daytona emulator (tests/emulators/daytona.mjs, needs the
# `ws` package from tests/emulators/node_modules) for the daytona conformance
# targets, the CLI test and the benchmark.
#
#   start_daytona_emulator DIR [EMULATOR ARGS...]   e.g. --tls, --faults SPEC, --force-echo
#
# Returns 0 with daytona_pid, daytona_url (the API URL), daytona_ca (a PEM
# file, or empty), daytona_sandbox and DAYTONA_API_KEY (exported) set; 77
# when this machine cannot run it (no node 20, no emulator, its node modules
# cannot be installed); 1 when it failed to come up.
daytona_emulator_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../emulators" 2>/dev/null && pwd || true)
# shellcheck source=emulator_modules.sh
source "$(dirname "${BASH_SOURCE[0]}")/emulator_modules.sh"

start_daytona_emulator() {
  local dir=$1
  shift
  daytona_pid=
  command -v node >/dev/null || { echo "no node" >&2; return 77; }
  local major
  major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
  [[ $major -ge 20 ]] || { echo "node $major is older than 20" >&2; return 77; }
  [[ -n $daytona_emulator_dir && -f $daytona_emulator_dir/daytona.mjs ]] || { echo "no tests/emulators/daytona.mjs" >&2; return 77; }
  emulator_modules "$daytona_emulator_dir" || return
  mkdir -p "$dir"
  node "$daytona_emulator_dir/daytona.mjs" --dir "$dir" "$@" >"$dir/emulator.json" 2>"$dir/emulator.log" &
  daytona_pid=$!
  local line=
  for _ in $(seq 1 300); do
    line=$(head -n 1 "$dir/emulator.json" 2>/dev/null || true)
    [[ $line == *'}'* ]] && break
    kill -0 "$daytona_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [[ $line != *'}'* ]]; then
    echo "the Daytona emulator did not start: $(tail -c 2000 "$dir/emulator.log")" >&2
    return 1
  fi
  local fields
  fields=$(node -e '
    const j = JSON.parse(process.argv[1]);
    console.log([j.url, j.ca || "", j.sandbox, j.api_key].join("\n"));' "$line") || return 1
  { read -r daytona_url; read -r daytona_ca; read -r daytona_sandbox; read -r DAYTONA_API_KEY; } <<<"$fields"
  export DAYTONA_API_KEY
  [[ -n $daytona_url && -n $daytona_sandbox && -n $DAYTONA_API_KEY ]] || {
    echo "the Daytona emulator's line lacks url, sandbox or api_key" >&2
    return 1
  }
}

# The provider flags for `tether` against the emulator just started.
daytona_flags() {
  local f=(--provider daytona --sandbox "$daytona_sandbox" --endpoint "$daytona_url")
  [[ -z $daytona_ca ]] || f+=(--ca-file "$daytona_ca")
  printf '%s\n' "${f[@]}"
}
