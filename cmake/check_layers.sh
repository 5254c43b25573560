#!/usr/bin/env bash
# Refuses includes that cross the layers (README, docs/architecture.md,
# host/CMakeLists.txt). Run at configure time by CMakeLists.txt (a violation
# stops the build) and as the ctest `layering` (tests/packaging/
# layering_test.sh shows it refusing each kind of violation).
#
#   protocol/        no I/O: nothing from host/, supervisor/ or the public
#                    host headers; no socket, file or process headers
#   supervisor/      protocol only: nothing from host/ or include/tether/
#                    (except the generated tether/protocol/)
#   include/tether/  the public headers: only each other (no internals)
#   host/            nothing from supervisor/; each folder includes only
#                    the folders below it (HOST_FLOORS) and the public
#                    headers of those folders (PUBLIC_HEADERS); base/ and
#                    core/ are sans-I/O (no Asio, no system headers)
set -uo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 2
bad=0
refuse() {  # refuse DIR REGEX WHY
  local dir=$1 re=$2 why=$3 hits
  [[ -d $dir ]] || return 0
  hits=$(grep -rnE --include='*.h' --include='*.cc' "^[[:space:]]*#[[:space:]]*include[[:space:]]*[<\"]($re)" "$dir" || true)
  if [[ -n $hits ]]; then
    echo "layering: $dir: $why" >&2
    echo "$hits" >&2
    bad=1
  fi
}
refuse protocol 'host/|supervisor/|tether/[a-z_]+\.h|boost/|sys/socket|sys/wait|unistd\.h|fcntl\.h' \
  'protocol has no I/O and depends on nothing above it'
refuse supervisor 'host/|tether/[a-z_]+\.h' 'the supervisor depends on protocol only'
refuse include/tether 'host/|protocol/|supervisor/|tether/protocol/' \
  'public headers include only public headers (and absl, boost, the standard library)'
refuse host 'supervisor/' 'the host never includes supervisor code'

# The floor plan of host/, bottom up: each folder and the folders it may
# include from (besides itself).
declare -A HOST_FLOORS=(
  [base]=''
  [core]='base'
  [support]='base'
  [install]='base support'
  [transports]='base support install'
  [tunnel]='base support install'
  [process]='base core support install tunnel'
  [net]='base support'
  [codec]='base'
  [native]='base support install transports tunnel net codec'
  [registry]='base support install transports tunnel process net codec native'
  [conformance]='base core support install transports tunnel process'
  [capi]='base core support install transports tunnel process net codec native registry'
  [cli]='base core support install transports tunnel process net codec native registry conformance'
)
# The public headers (include/tether/) by the folder that defines them;
# `interface` ones (abstract types) may be used from support/ up.
declare -A PUBLIC_HEADERS=(
  [base]='errors output_helpers process_types'
  [interface]='transport provider_info'
  [install]='shell_setup supervisor_binary'
  [transports]='local_transport command_transport'
  [process]='process exec'
  [native]='providers/[a-z_]+'
  [registry]='providers'
  [capi]='tether'
)
for dir in host/*/; do
  folder=$(basename "$dir")
  if [[ -z ${HOST_FLOORS[$folder]+set} ]]; then
    echo "layering: $dir: a folder of host/ with no place in the floor plan (HOST_FLOORS)" >&2
    bad=1
    continue
  fi
  allowed=" $folder ${HOST_FLOORS[$folder]} "
  [[ $folder == base || $folder == core ]] || allowed+="interface "
  others='' headers=''
  for other in "${!HOST_FLOORS[@]}"; do
    [[ $allowed == *" $other "* ]] || others+="${others:+|}$other"
  done
  for owner in "${!PUBLIC_HEADERS[@]}"; do
    [[ $allowed == *" $owner "* ]] && continue
    read -ra owned <<<"${PUBLIC_HEADERS[$owner]}"  # (no pathname expansion of providers/[a-z_]+)
    for h in "${owned[@]}"; do headers+="${headers:+|}$h"; done
  done
  [[ -z $others ]] || refuse "$dir" "host/($others)/" "host/$folder/ includes only from ${HOST_FLOORS[$folder]:-no other folder} (the floor plan)"
  [[ -z $headers ]] || refuse "$dir" "tether/($headers)\\.h" "host/$folder/ uses only the public headers of the folders below it"
done
# Every source of host/ is in a folder of the plan: none loose in host/
# itself, and no include of one.
for f in host/*; do
  [[ -f $f && $f != host/CMakeLists.txt ]] || continue
  echo "layering: $f: a file loose in host/, outside the floor plan" >&2
  bad=1
done
refuse host 'host/[a-z_]+\.h' 'host/ has no loose headers: each is in a folder of the plan'
sans_io='boost/|sys/|unistd\.h|fcntl\.h|supervisor/'
refuse host/base "$sans_io" 'host/base is sans-I/O: value types and protocol only'
refuse host/core "$sans_io" 'the host core is sans-I/O: value types and protocol only'
exit $bad
