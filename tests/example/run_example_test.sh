#!/usr/bin/env bash
# Installs the build tree $1 into a scratch prefix, builds the example $2
# against it with find_package(tether), and runs it with the installed
# supervisors.
set -euo pipefail
# $4/$5: the build's compiler and linker flags (sanitizers must match); $6
# ON when the build has the native providers, whose example must then build
# and pass too.
build=$1 example=$2 config=${3:-Release} cxxflags=${4:-} ldflags=${5:-} native=${6:-OFF}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$example" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_BUILD_TYPE="${config:-Release}" -DCMAKE_CXX_FLAGS="$cxxflags" \
  -DCMAKE_EXE_LINKER_FLAGS="$ldflags" >/dev/null
cmake --build "$work/build" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
supdir="$work/prefix/libexec/tether"
if ! ls "$supdir"/tether-supervisor-* >/dev/null 2>&1; then
  # A build without the musl supervisors installs none; use the test's copy.
  supdir=${TETHER_SUPERVISOR_DIR:?no installed supervisors and no TETHER_SUPERVISOR_DIR}
fi
root=$(mktemp -d)
chmod 700 "$root"
TETHER_SUPERVISOR_DIR="$supdir" TETHER_LOCAL_ROOT="$root" "$work/build/embed"
rm -rf "$root"
if [ "$native" = ON ]; then
  [ -x "$work/build/embed_native" ] || { echo "embed_native was not built from the installed package"; exit 1; }
  # (a socket path where no engine listens)
  "$work/build/embed_native" "$work/no-engine.sock"
elif [ -e "$work/build/embed_native" ]; then
  echo "embed_native was built from a package without the native providers"; exit 1
fi
