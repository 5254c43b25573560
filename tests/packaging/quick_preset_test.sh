#!/usr/bin/env bash
# The quick preset (what a first `./dev run` builds): configures without the
# native providers and without the musl toolchain, and the CLI's build pulls
# in no HTTP/TLS code, no OpenSSL and no yaml-cpp; the native supervisor's
# copy is where that tree's CLI looks first. Configures only (seconds); the
# build itself is `./dev run`'s, timed in the README.
# Usage: quick_preset_test.sh REPO_ROOT
set -euo pipefail
repo=$(cd "$1" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

if ! (cd "$repo" && cmake --preset quick -B "$work/b") >"$work/configure.log" 2>&1; then
  cat "$work/configure.log"
  echo "FAIL: the quick preset does not configure"
  exit 1
fi
cache=$work/b/CMakeCache.txt
grep -qx 'TETHER_NATIVE_PROVIDERS:BOOL=OFF' "$cache" || bad "native providers not off"
grep -qx 'TETHER_MUSL_SUPERVISORS:BOOL=OFF' "$cache" || bad "musl supervisors not off"
grep -q '^OpenSSL' "$cache" && bad "OpenSSL was looked for"
grep -q '^yaml-cpp' "$cache" && bad "yaml-cpp was looked for"

inputs=$(ninja -C "$work/b" -t inputs tether)
grep -E '(^|/)host/(net|native|codec)/' <<<"$inputs" && bad "the CLI builds native provider code"
grep -q 'providers.cc' <<<"$inputs" || bad "the CLI lacks the registry"
link=$(ninja -C "$work/b" -t commands tether | tail -n 1)
grep -Eq -- '-lssl|libssl|yaml' <<<"$link" && bad "the CLI links OpenSSL or yaml-cpp: $link"
targets=$(ninja -C "$work/b" -t targets all)
grep -q '^tether_native_supervisor_copy:' <<<"$targets" || bad "no tether_native_supervisor_copy target"
grep -q "TETHER_BUILD_SUPERVISOR_DIR=.*$work/b/native-supervisors" "$work/b/build.ninja" ||
  bad "the CLI does not look in native-supervisors first"

((fail == 0)) && echo "quick_preset: all checks passed"
exit $fail
