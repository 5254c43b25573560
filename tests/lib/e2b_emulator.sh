# Sourced: starts the E2B emulator (tests/emulators/e2b.mjs) for the e2b
# conformance targets, the CLI test and the benchmark.
#
#   start_e2b_emulator DIR [EMULATOR ARGS...]   e.g. --tls, --faults SPEC, --envd-version V
#
# Returns 0 with e2b_pid, e2b_url, e2b_ca (a PEM file, or empty), e2b_sandbox
# and E2B_API_KEY (exported) set; 77 when this machine cannot run it (no
# node, no emulator, its node modules cannot be installed); 1 when it failed
# to come up. The emulator's sandbox processes run with TMPDIR=DIR.
e2b_emulator_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../emulators" 2>/dev/null && pwd || true)
# shellcheck source=emulator_modules.sh
source "$(dirname "${BASH_SOURCE[0]}")/emulator_modules.sh"

start_e2b_emulator() {
  local dir=$1
  shift
  e2b_pid=
  command -v node >/dev/null || { echo "no node" >&2; return 77; }
  [[ -n $e2b_emulator_dir && -f $e2b_emulator_dir/e2b.mjs ]] || { echo "no tests/emulators/e2b.mjs" >&2; return 77; }
  emulator_modules "$e2b_emulator_dir" || return
  mkdir -p "$dir"
  TMPDIR=$dir node "$e2b_emulator_dir/e2b.mjs" --dir "$dir" "$@" >"$dir/emulator.json" 2>"$dir/emulator.log" &
  e2b_pid=$!
  local line=
  for _ in $(seq 1 300); do
    line=$(head -n 1 "$dir/emulator.json" 2>/dev/null || true)
    [[ $line == *'}'* ]] && break
    kill -0 "$e2b_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [[ $line != *'}'* ]]; then
    echo "the E2B emulator did not start: $(tail -c 2000 "$dir/emulator.log")" >&2
    return 1
  fi
  local fields
  fields=$(node -e '
    const j = JSON.parse(process.argv[1]);
    const fs = require("fs");
    let ca = j.ca || "";
    if (ca.startsWith("-----BEGIN")) { fs.writeFileSync(process.argv[2], ca); ca = process.argv[2]; }
    console.log([j.url, ca, j.sandbox, j.api_key].join("\n"));' "$line" "$dir/ca.pem") || return 1
  { read -r e2b_url; read -r e2b_ca; read -r e2b_sandbox; read -r E2B_API_KEY; } <<<"$fields"
  export E2B_API_KEY
  [[ -n $e2b_url && -n $e2b_sandbox ]] || { echo "the E2B emulator's line lacks url or sandbox: $line" >&2; return 1; }
}

# The provider flags for `tether` against the emulator just started.
e2b_flags() {
  local f=(--provider e2b --sandbox "$e2b_sandbox" --endpoint "$e2b_url" --sandbox-url "$e2b_url")
  [[ -z $e2b_ca ]] || f+=(--ca-file "$e2b_ca")
  printf '%s\n' "${f[@]}"
}
