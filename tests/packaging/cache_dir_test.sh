#!/usr/bin/env bash
# Where packaging/setup.sh (and through it CMake's TETHER_CACHE_DIR) puts
# its cache: $TETHER_CACHE_DIR, else an absolute $XDG_CACHE_HOME/tether, else
# $HOME/.cache/tether, else <clone>/.cache; never anything relative.
# Usage: cache_dir_test.sh REPO_ROOT
set -euo pipefail
root=$(cd "$1" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
expect() {  # expect WANT ENV...
  local want=$1 got
  shift
  got=$(cd "$work" && env -i PATH="$PATH" "$@" bash "$root/packaging/setup.sh" --print-cache-dir) ||
    { echo "FAIL: setup.sh --print-cache-dir failed with $*"; fail=1; return; }
  if [[ $got == "$want" ]]; then echo "ok    $* -> $got"; else echo "FAIL  $*: got $got, want $want"; fail=1; fi
}
mkdir -p "$work/home" "$work/xdg" "$work/explicit"
expect "$work/explicit" TETHER_CACHE_DIR="$work/explicit" XDG_CACHE_HOME="$work/xdg" HOME="$work/home"
expect "$work/xdg/tether" XDG_CACHE_HOME="$work/xdg" HOME="$work/home"
expect "$work/home/.cache/tether" XDG_CACHE_HOME=relative/dir HOME="$work/home"
expect "$work/home/.cache/tether" HOME="$work/home"
had_clone_cache=0
[[ ! -d $root/.cache ]] || had_clone_cache=1
expect "$root/.cache" HOME=/
((had_clone_cache)) || rmdir "$root/.cache" 2>/dev/null || true
# The explicit one may be relative to where setup runs; it is made absolute.
expect "$work/rel" TETHER_CACHE_DIR=rel HOME="$work/home"
exit "$fail"
