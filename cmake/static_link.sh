#!/usr/bin/env bash
# Link launcher (the CXX_LINKER_LAUNCHER of the `tether` CLI, TETHER_STATIC_CLI
# in cmake/BuildSpeed.cmake): runs the link command it is given with every
# third-party shared library replaced by its static archive where the system
# has one (Debian ships .a beside .so for abseil, protobuf, gRPC, OpenSSL,
# yaml-cpp, zstd, Boost), and libstdc++ and libgcc linked in.
#
# Why: the dynamic CLI loaded about 60 shared libraries (40 of them abseil's)
# at every start, whatever the command, and ld.so's symbol lookups and page
# faults were ~90% of `tether version`'s 26-33 ms (issue 32). Each agent tool
# call pays a CLI start. Statically, one copy of each library is linked, so
# no library's state is duplicated (all of gRPC's abseil is the same archive
# as ours).
#
# Only full paths under the system's library directories (as CMake writes
# them for imported targets) and -lNAME are rewritten; glibc's own libraries
# (c, m, dl, rt, pthread, util, resolv) stay shared: a static glibc cannot
# resolve names or users. A library without an archive stays shared, so the
# link never fails for want of one.
set -euo pipefail
keep_shared='^(c|m|dl|rt|pthread|util|resolv|gcc_s|stdc\+\+)$'
multiarch=$("$1" -print-multiarch 2>/dev/null || true)
args=()
for a in "$@"; do
  name='' dir=''
  if [[ $a =~ ^(/usr(/local)?/lib(64)?(/[A-Za-z0-9_-]+)?)/lib([^/]+)\.so(\.[0-9.]+)?$ ]]; then
    dir=${BASH_REMATCH[1]} name=${BASH_REMATCH[5]}
  elif [[ $a =~ ^-l([A-Za-z0-9_+.-]+)$ ]]; then
    name=${BASH_REMATCH[1]}
    for d in ${multiarch:+/usr/lib/$multiarch} /usr/lib /usr/local/lib; do
      [[ -f $d/lib$name.a ]] && { dir=$d; break; }
    done
  fi
  if [[ -n $name && -n $dir && ! $name =~ $keep_shared && -f $dir/lib$name.a ]]; then
    args+=("$dir/lib$name.a")
  else
    args+=("$a")
  fi
done
exec "${args[@]}" -static-libstdc++ -static-libgcc
