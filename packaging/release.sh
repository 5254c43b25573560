#!/usr/bin/env bash
# Release artifacts from the release preset's build, written into dist/:
#
#   tether-supervisor-VERSION-ARCH.tar.gz       (ARCH: x86_64, aarch64) the
#     stripped static supervisor as tether-supervisor-VERSION-ARCH/tether-supervisor
#     with a SHA256SUMS beside it; plus the tarball's own .sha256
#   tether-supervisor_VERSION_DEBARCH.deb       (DEBARCH: amd64, arm64) installs
#     /usr/libexec/tether/tether-supervisor (0755); static, so no dependencies
#   tether-host-VERSION-HOSTARCH.tar.gz (+ .sha256)  `cmake --install` of the
#     host build: bin/tether, lib/ (libtether_host_*.a, ...), include/tether/,
#     lib/cmake/tether/ (find_package(tether)), libexec/tether/ (both supervisors)
#   tether_VERSION_HOSTDEBARCH.deb             the same under /usr
#   SHA256SUMS                                  every artifact above
#
# VERSION is the CMake project version (protocol/version.h's kTetherVersion);
# the built supervisors must report it. Reproducible: every file's mtime is
# SOURCE_DATE_EPOCH (default: the last commit's time), owners are root,
# members are sorted, gzip stores no name or time; two runs on the same
# commit and build give byte-identical artifacts. Idempotent: the build is
# incremental and dist/ is replaced only once every artifact is made.
#
# Usage: packaging/release.sh [--no-build] [--no-host-deb] [--supervisor-only]
#   --no-build         package what the build tree already holds (no cmake --build)
#   --no-host-deb      skip tether_VERSION_ARCH.deb
#   --supervisor-only  only the supervisor tarballs and packages (and SHA256SUMS)
# Env: TETHER_RELEASE_BUILD (build tree, default build/release; configured
#      with the release preset when missing), TETHER_DIST_DIR (default dist),
#      TETHER_DEB_MAINTAINER, SOURCE_DATE_EPOCH.
# Needs: packaging/setup.sh done (the musl toolchain), dpkg-deb, dpkg-shlibdeps
# (dpkg-dev), file, gzip, strip.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${TETHER_RELEASE_BUILD:-$REPO/build/release}
DIST=${TETHER_DIST_DIR:-$REPO/dist}
MAINTAINER=${TETHER_DEB_MAINTAINER:-tether maintainers <maintainers@tether.invalid>}
ARCHES=(x86_64 aarch64)
declare -A DEBARCH=([x86_64]=amd64 [aarch64]=arm64)
declare -A FILE_ARCH=([x86_64]=x86-64 [aarch64]=aarch64)

die() { printf 'release: error: %s\n' "$*" >&2; exit 1; }
log() { printf 'release: %s\n' "$*" >&2; }

do_build=1 want_host_deb=1 host=1
for a in "$@"; do
  case $a in
    --no-build) do_build=0 ;;
    --no-host-deb) want_host_deb=0 ;;
    --supervisor-only) host=0 want_host_deb=0 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $a (try --help)" ;;
  esac
done

for tool in dpkg-deb dpkg-shlibdeps file gzip tar sha256sum cmake strip; do
  command -v "$tool" >/dev/null || die "$tool is not installed (packaging/setup.sh installs it)"
done

# The version, from the one place it is defined.
VERSION=$(sed -n 's/^project(tether VERSION \([0-9][0-9.]*\)[ )].*/\1/p' "$REPO/CMakeLists.txt")
[[ $VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] ||
  die "cannot read the version from 'project(tether VERSION x.y.z ...)' in $REPO/CMakeLists.txt"

if ((do_build)); then
  # Both supervisors (a tree a first `./dev run` made has only the host's).
  arches=$(sed -n 's/^TETHER_MUSL_ARCHES:STRING=//p' "$BUILD/CMakeCache.txt" 2>/dev/null || true)
  if [[ ! -f $BUILD/build.ninja || $arches != "x86_64;aarch64" ]]; then
    [[ $BUILD == "$REPO/build/release" ]] ||
      die "$BUILD is not a configured build tree with both supervisors (configure it with -DTETHER_MUSL_ARCHES='x86_64;aarch64', or unset TETHER_RELEASE_BUILD)"
    log "configuring the release preset"
    (cd "$REPO" && cmake --preset release "-DTETHER_MUSL_ARCHES=x86_64;aarch64" >/dev/null)
  fi
  targets=(tether_supervisors)
  ((host)) && targets+=(tether)
  log "building ${targets[*]} in $BUILD"
  cmake --build "$BUILD" --target "${targets[@]}" >&2
fi
[[ -f $BUILD/CMakeCache.txt ]] || die "$BUILD is not a build tree (run without --no-build)"
built_version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$BUILD/CMakeCache.txt")
[[ $built_version == "$VERSION" ]] ||
  die "$BUILD was configured for version '$built_version', the source says $VERSION: reconfigure it"
grep -q '^TETHER_MUSL_SUPERVISORS:BOOL=ON' "$BUILD/CMakeCache.txt" ||
  die "$BUILD has TETHER_MUSL_SUPERVISORS off: a release needs the static musl supervisors"

# Checks that a built supervisor is the static, stripped binary for its
# architecture and (when it runs here) reports VERSION.
check_supervisor() {
  local arch=$1 bin=$2 desc out
  [[ -f $bin ]] || die "no supervisor at $bin (build the target tether_supervisors)"
  desc=$(file -b "$bin")
  [[ $desc == *"statically linked"* ]] || die "$bin is not statically linked: $desc"
  [[ $desc == *stripped* && $desc != *"not stripped"* ]] || die "$bin is not stripped: $desc"
  [[ $desc == *"${FILE_ARCH[$arch]}"* ]] || die "$bin is not an $arch binary: $desc"
  if [[ $arch == "$(uname -m)" ]]; then
    out=$("$bin" --version) || die "$bin --version failed"
  elif [[ $arch == aarch64 ]] && command -v qemu-aarch64 >/dev/null; then
    out=$(qemu-aarch64 "$bin" --version) || die "qemu-aarch64 $bin --version failed"
  else
    return 0
  fi
  [[ $out == "tether-supervisor $VERSION "* ]] || die "$bin says '$out', expected version $VERSION"
}

SDE=${SOURCE_DATE_EPOCH:-$(git -C "$REPO" log -1 --format=%ct 2>/dev/null || echo 0)}
[[ $SDE =~ ^[0-9]+$ ]] || die "SOURCE_DATE_EPOCH must be seconds since the epoch, not '$SDE'"
export SOURCE_DATE_EPOCH=$SDE  # dpkg-deb uses it for the ar and control members

mkdir -p "$DIST"
DIST=$(cd "$DIST" && pwd)
STAGE=$(mktemp -d "$DIST/.stage.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
OUT=$STAGE/out
mkdir -p "$OUT"

# Owner-independent modes (the umask of whoever runs this does not matter)
# and one mtime for everything under $1.
normalize() {
  chmod -R u+rwX,go+rX,go-w "$1"
  find "$1" -exec touch -h -d "@$SDE" {} +
}

# tgz DIR NAME: DIR's NAME/ subtree as $OUT/NAME.tar.gz, and its .sha256.
tgz() {
  local dir=$1 name=$2
  tar -C "$dir" --sort=name --format=gnu --owner=0 --group=0 --numeric-owner \
      --mtime="@$SDE" -cf - "$name" | gzip -9n >"$OUT/$name.tar.gz"
  (cd "$OUT" && sha256sum "$name.tar.gz" >"$name.tar.gz.sha256")
}

# deb ROOT NAME: ROOT (with DEBIAN/control) as $OUT/NAME, with the
# DEBIAN/md5sums that dpkg --verify and debsums read.
deb() {
  local root=$1 name=$2
  (cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z |
     xargs -0r md5sum >DEBIAN/md5sums)
  normalize "$root"
  dpkg-deb --root-owner-group -Zxz --build "$root" "$OUT/$name" >/dev/null ||
    die "dpkg-deb could not build $name"
}

installed_size() { du -k -s --apparent-size --exclude=DEBIAN "$1" | cut -f1; }

# --- the supervisor, per architecture --------------------------------------
for arch in "${ARCHES[@]}"; do
  bin=$BUILD/supervisors/tether-supervisor-$arch
  check_supervisor "$arch" "$bin"
  name=tether-supervisor-$VERSION-$arch
  mkdir -p "$STAGE/tar/$name"
  install -m 0755 "$bin" "$STAGE/tar/$name/tether-supervisor"
  (cd "$STAGE/tar/$name" && sha256sum tether-supervisor >SHA256SUMS)
  normalize "$STAGE/tar/$name"
  tgz "$STAGE/tar" "$name"

  root=$STAGE/deb-$arch
  mkdir -p "$root/DEBIAN" "$root/usr/libexec/tether"
  install -m 0755 "$bin" "$root/usr/libexec/tether/tether-supervisor"
  cat >"$root/DEBIAN/control" <<EOF
Package: tether-supervisor
Version: $VERSION
Architecture: ${DEBARCH[$arch]}
Maintainer: $MAINTAINER
Installed-Size: $(installed_size "$root")
Section: admin
Priority: optional
Description: tether's in-sandbox process supervisor (static)
 The static musl tether-supervisor, installed as
 /usr/libexec/tether/tether-supervisor where the tether host finds it, so
 that sandboxes started from an image with this package need no upload.
 Statically linked: it depends on nothing in the image.
EOF
  deb "$root" "tether-supervisor_${VERSION}_${DEBARCH[$arch]}.deb"
done

# --- the host library and CLI ------------------------------------------------
# host_tarball NAME: `cmake --install` into $STAGE/host/NAME, packed.
host_tarball() {
  local name=$1 want
  [[ -x $BUILD/host/tether ]] || die "no CLI at $BUILD/host/tether (build the target tether)"
  # --strip strips the CLI (the supervisors are stripped already).
  cmake --install "$BUILD" --prefix "$STAGE/host/$name" --strip >"$STAGE/install.log" 2>&1 ||
    { cat "$STAGE/install.log" >&2; die "cmake --install $BUILD failed"; }
  # Debug info out of the static libraries too, as Debian's dh_strip does
  # (RelWithDebInfo; the embedded supervisors are data and stay).
  find "$STAGE/host/$name" -name '*.a' -exec strip --strip-debug {} + ||
    die "strip --strip-debug failed on the installed static libraries"
  for want in bin/tether include/tether/process.h lib/cmake/tether/tetherConfig.cmake \
              libexec/tether/tether-supervisor-x86_64 libexec/tether/tether-supervisor-aarch64; do
    [[ -e $STAGE/host/$name/$want ]] || die "the install of $BUILD has no $want"
  done
  normalize "$STAGE/host/$name"
  tgz "$STAGE/host" "$name"
}

# host_deb NAME DEBARCH: the tree host_tarball installed, under /usr.
host_deb() {
  local name=$1 debarch=$2 root=$STAGE/deb-host shlibs devdeps
  mkdir -p "$root/DEBIAN"
  cp -a "$STAGE/host/$name" "$root/usr"
  # The CLI's shared libraries, as Debian package names (dpkg-shlibdeps
  # wants a debian/control beside it; only the Depends line is used).
  mkdir -p "$STAGE/shlibs/debian"
  printf 'Source: tether\n\nPackage: tether\nArchitecture: any\n' >"$STAGE/shlibs/debian/control"
  shlibs=$(cd "$STAGE/shlibs" && dpkg-shlibdeps -O "$root/usr/bin/tether" 2>"$STAGE/shlibdeps.log" |
           sed -n 's/^shlibs:Depends=//p') ||
    { cat "$STAGE/shlibdeps.log" >&2; die "dpkg-shlibdeps failed on bin/tether"; }
  [[ -n $shlibs ]] || die "dpkg-shlibdeps found no libraries for bin/tether"
  # What find_package(tether) looks for (cmake/tetherConfig.cmake.in).
  devdeps="libprotobuf-dev (>= 3.21), libabsl-dev, libzstd-dev, libboost1.81-dev, libboost-json1.81-dev"
  cat >"$root/DEBIAN/control" <<EOF
Package: tether
Version: $VERSION
Architecture: $debarch
Maintainer: $MAINTAINER
Installed-Size: $(installed_size "$root")
Depends: $shlibs, $devdeps
Section: devel
Priority: optional
Description: run processes in cloud sandboxes with exact, uniform control
 The tether CLI (/usr/bin/tether), the host library libtether with its
 headers and CMake package (find_package(tether), target tether::host), and
 the static supervisors for x86_64 and aarch64 in /usr/libexec/tether/,
 which tether uploads into a sandbox that has none.
EOF
  deb "$root" "tether_${VERSION}_${debarch}.deb"
}

if ((host)); then
  host_tarball "tether-host-$VERSION-$(uname -m)"
  ((want_host_deb == 0)) || host_deb "tether-host-$VERSION-$(uname -m)" "$(dpkg --print-architecture)"
fi

# --- dist/ --------------------------------------------------------------------
(cd "$OUT" && sha256sum -- *.tar.gz *.deb >SHA256SUMS)
# Replace what a previous run left (of any version) only now that all is made.
find "$DIST" -maxdepth 1 -type f \( -name 'tether*.tar.gz' -o -name 'tether*.tar.gz.sha256' \
     -o -name 'tether*.deb' -o -name SHA256SUMS \) -delete
mv "$OUT"/* "$DIST"/
log "version $VERSION in $DIST:"
(cd "$DIST" && find . -maxdepth 1 -type f -printf '%f\t%s bytes\n' | sort) >&2
