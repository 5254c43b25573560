#!/usr/bin/env bash
# Refuses includes that cross the layers (README, Architecture). Run at
# configure time by CMakeLists.txt (a violation stops the build) and as the
# ctest `layering`.
#
#   protocol/        no I/O: nothing from host/, supervisor/ or the public
#                    host headers; no socket, file or process headers
#   supervisor/      protocol only: nothing from host/ or include/tether/
#                    (except the generated tether/protocol/)
#   host/core/       the host's sans-I/O cores: no Asio, no system headers,
#                    nothing from the rest of host/ but the value types and
#                    error codes (process_types.h, errors.h, wire_errors.h,
#                    output_helpers.h)
#   include/tether/  the public headers: only each other (no internals)
#   host/            nothing from supervisor/
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
refuse host/core 'boost/|sys/|unistd\.h|fcntl\.h|host/(internal|tunnel|cli|conformance|net|native)/|host/(session|reference)\.h|tether/(process|transport|local_transport|command_transport|exec|providers|shell_setup|supervisor_binary)\.h|supervisor/' \
  'the host core is sans-I/O: value types and protocol only'
refuse include/tether 'host/|protocol/|supervisor/|tether/protocol/' \
  'public headers include only public headers (and absl, boost, the standard library)'
refuse host 'supervisor/' 'the host never includes supervisor code'
exit $bad
