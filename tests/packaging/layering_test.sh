#!/usr/bin/env bash
# cmake/check_layers.sh passes the real tree and refuses each kind of
# violation, one at a time, in a small tree of its own: a check that could
# not fail would let the floor plan rot.
#   layering_test.sh REPO_ROOT
set -uo pipefail
repo=$1
check=$repo/cmake/check_layers.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

bash "$check" "$repo" || fail "the real tree does not pass"

# A tree with every folder of host/ and one clean file in each.
clean_tree() {
  rm -rf "$tmp/t" && mkdir -p "$tmp/t"
  local f
  for f in base core support install transports tunnel process net codec native registry conformance capi cli; do
    mkdir -p "$tmp/t/host/$f"
    echo '#include "absl/status/status.h"' >"$tmp/t/host/$f/x.cc"
  done
  mkdir -p "$tmp/t/protocol" "$tmp/t/supervisor" "$tmp/t/include/tether"
  echo '#include "tether/errors.h"' >>"$tmp/t/host/core/x.cc"
  echo '#include "host/tunnel/session.h"' >>"$tmp/t/host/process/x.cc"
  echo '#include "tether/process.h"' >>"$tmp/t/host/cli/x.cc"
}
# expect_refused LABEL FILE LINE [MESSAGE]: adding LINE to FILE fails the check, saying MESSAGE.
expect_refused() {
  local label=$1 file=$2 line=$3 message=${4:-layering:}
  clean_tree
  mkdir -p "$(dirname "$tmp/t/$file")"
  echo "$line" >>"$tmp/t/$file"
  local out
  if out=$(bash "$check" "$tmp/t" 2>&1); then
    fail "$label: passed"
  elif [[ $out != *"$message"* ]]; then
    fail "$label: refused without saying '$message': $out"
  fi
}

clean_tree
bash "$check" "$tmp/t" || fail "the clean tree does not pass"

expect_refused 'base includes from above' host/base/x.cc '#include "host/process/state.h"' 'host/base/ includes only from no other folder'
expect_refused 'tunnel includes process' host/tunnel/x.cc '#include "host/process/reference.h"' 'host/tunnel/ includes only from base support install'
expect_refused 'native includes the registry' host/native/e2b/x.cc '#include "host/registry/native_providers.h"'
expect_refused 'native uses the process API' host/native/x.cc '#include "tether/process.h"' 'uses only the public headers'
expect_refused 'install uses a transport' host/install/x.cc '#include <tether/local_transport.h>'
expect_refused 'core uses the Transport interface' host/core/x.cc '#include "tether/transport.h"'
expect_refused 'core uses Asio' host/core/x.cc '#include <boost/asio/post.hpp>' 'sans-I/O'
expect_refused 'base makes a system call' host/base/x.cc '#include <unistd.h>' 'sans-I/O'
expect_refused 'a folder outside the plan' host/misc/x.cc '' 'no place in the floor plan'
expect_refused 'protocol does I/O' protocol/x.cc '#include <sys/socket.h>' 'protocol has no I/O'
expect_refused 'the supervisor uses the host' supervisor/x.cc '#include "host/base/wire_errors.h"'
expect_refused 'a public header includes an internal one' include/tether/x.h '#include "host/process/state.h"'
expect_refused 'the host includes the supervisor' host/cli/x.cc '#include "supervisor/daemon.h"'
expect_refused 'a file loose in host/' host/x.cc '' 'loose in host/'
expect_refused 'an include of a loose host/ header' host/cli/x.cc '#include "host/session.h"' 'no loose headers'

if ((failures > 0)); then
  echo "layering_test: $failures failed" >&2
  exit 1
fi
echo "layering_test: the real tree passes; 15 kinds of violation refused"
