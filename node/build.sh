#!/usr/bin/env bash
# Builds the addon (build/tether.node) against a libtether_c.so:
#
#   node/build.sh [LIBTETHER_C]     (default: $TETHER_LIBTETHER_C, else
#                                    ../build/release/host/capi/libtether_c.so)
#
# It is also the package's install script, so `npm install ./node` (in a
# project of yours, after `./dev build`) builds the addon: npm has then
# already fetched the headers (a dependency), and nothing else is fetched.
#
# What it needs: a C compiler (Debian's gcc, which packaging/setup.sh
# installs), Node >= 20 with npm, and the Node-API headers from the npm
# registry (node-api-headers, pinned in package-lock.json; `npm ci` fetches
# them once). No node-gyp, no download of Node's own headers: the addon uses
# Node-API only, whose ABI is stable across Node versions.
#
# The addon finds libtether_c.so where it was when built (an rpath), or
# through LD_LIBRARY_PATH; TETHER_NODE_ADDON names another addon (lib/native.mjs).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
lib=${1:-${TETHER_LIBTETHER_C:-$root/build/release/host/capi/libtether_c.so}}
[[ -f $lib ]] || { echo "node/build.sh: $lib not found (build it: ./dev build)" >&2; exit 2; }
lib=$(cd "$(dirname "$lib")" && pwd)/$(basename "$lib")
cd "$here"
stamp=node_modules/.tether-installed
want=$(sha256sum package-lock.json | cut -d' ' -f1)
# Run by npm as the install script: npm installed the dependencies.
# (--ignore-scripts below: `npm ci` here must not run this script again.)
if [[ ${npm_lifecycle_event:-} == install && -f node_modules/node-api-headers/include/node_api.h ]]; then
  :
elif ! [[ -f $stamp && $(<"$stamp") == "$want" ]]; then
  exec 9>"$here/.setup.lock"
  flock 9
  if ! [[ -f $stamp && $(<"$stamp") == "$want" ]]; then
    npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
    echo "$want" >"$stamp.tmp" && mv "$stamp.tmp" "$stamp"
  fi
  exec 9>&-
fi
out=${TETHER_NODE_BUILD_DIR:-$here/build}
mkdir -p "$out"
${CC:-cc} -std=c11 -O2 -g -fPIC -shared -fvisibility=hidden -Wall -Wextra -Werror \
  -I"$here/node_modules/node-api-headers/include" -I"$root/include" \
  -o "$out/tether.node.tmp" "$here/src/addon.c" \
  "$lib" -Wl,-rpath,"$(dirname "$lib")"
mv "$out/tether.node.tmp" "$out/tether.node"
echo "$out/tether.node"
