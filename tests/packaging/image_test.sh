#!/usr/bin/env bash
# The custom-image path end to end with a real engine: packages the
# supervisor (packaging/release.sh --supervisor-only, from this build tree),
# builds packaging/Containerfile.example with podman on the private busybox
# base of tests/lib/podman_docker.sh (no registry), starts a container of the
# image, checks the installed supervisor's --version inside, runs
# `tether conformance --provider docker --no-upload` through podman's Docker
# API service, and then counts the supervisors in the container: the only
# one must be the package's /usr/libexec/tether/tether-supervisor (nothing
# uploaded under /tmp/tether-*/bin, /var/tmp/..., anywhere).
#
#   tests/packaging/image_test.sh PATH_TO_TETHER BUILD_DIR
#
# Never skips: a machine where podman cannot build or run the image fails.
# TETHER_IMAGE_TEST_ALLOW_UPLOAD=1 drops --no-upload and the zero-upload
# assertion (the uploads found are reported instead): for a host that has
# no --no-upload yet.
set -uo pipefail

if [[ $# -ne 2 || ! -x $1 || ! -d $2 ]]; then
  echo "usage: $0 PATH_TO_TETHER BUILD_DIR" >&2
  exit 2
fi
TETHER=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
BUILD=$(cd "$2" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$here/../.." && pwd)
allow_upload=${TETHER_IMAGE_TEST_ALLOW_UPLOAD:-0}
# shellcheck source=../lib/checks.sh
source "$here/../lib/checks.sh"
# shellcheck source=../lib/podman_docker.sh
source "$here/../lib/podman_docker.sh"

start=$SECONDS
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tether-image-test.XXXXXX")
cleanup() {
  stop_podman_docker
  rm -rf "$WORK"
}
trap cleanup EXIT

finish() {
  echo "image_test: $CHECKS checks, $FAILED failed, $((SECONDS - start)) s"
  [[ $FAILED -eq 0 ]] || exit 1
  exit 0
}
abort() {  # a step the rest depends on failed
  fail "$@"
  finish
}

version=$("$TETHER" --version | sed -n 's/^tether \([0-9][0-9.]*\) .*/\1/p')
[[ -n $version ]] || abort "tether --version names a version" "$("$TETHER" --version 2>&1 | head -3)"
debarch=$(dpkg --print-architecture)
deb=tether-supervisor_${version}_${debarch}.deb

# 1. The package, from this build tree's supervisors (nothing is built).
if TETHER_RELEASE_BUILD=$BUILD TETHER_DIST_DIR=$WORK/dist \
    "$REPO/packaging/release.sh" --no-build --supervisor-only >"$WORK/release.log" 2>&1 &&
   [[ -f $WORK/dist/$deb ]]; then
  pass "release.sh --supervisor-only made $deb"
else
  abort "release.sh --supervisor-only made $deb" "$(tail -20 "$WORK/release.log")"
fi
listing=$(dpkg-deb -c "$WORK/dist/$deb")
if grep -Eq '^-rwxr-xr-x root/root +[0-9]+ .* \./usr/libexec/tether/tether-supervisor$' <<<"$listing" &&
   [[ $(dpkg-deb -f "$WORK/dist/$deb" Package Version Architecture) == \
      "Package: tether-supervisor"$'\n'"Version: $version"$'\n'"Architecture: $debarch" ]] &&
   [[ -z $(dpkg-deb -f "$WORK/dist/$deb" Depends) ]]; then
  pass "the package installs /usr/libexec/tether/tether-supervisor 0755 root, no dependencies"
else
  fail "the package installs /usr/libexec/tether/tether-supervisor 0755 root, no dependencies" \
    "$listing" "$(dpkg-deb -f "$WORK/dist/$deb")"
fi

# 2. The image, from the example recipe, on the private busybox base.
rc=0
start_podman_docker "$WORK" || rc=$?
[[ $rc -eq 0 ]] || abort "podman runs containers here (tests/lib/podman_docker.sh, exit $rc)"
image=localhost/tether-image-test:$$
# TARGETARCH is set by podman itself; passing it keeps the test independent
# of that (buildah versions differ).
if $podman_cmd build --pull=never --network=none --ulimit nofile=20000:20000 \
    --build-arg "BASE=$podman_image" --build-arg "TARGETARCH=$debarch" \
    -f "$REPO/packaging/Containerfile.example" -t "$image" "$WORK/dist" >"$WORK/build.log" 2>&1; then
  pass "podman build -f packaging/Containerfile.example (busybox base, no registry)"
else
  abort "podman build -f packaging/Containerfile.example (busybox base, no registry)" \
    "$(tail -25 "$WORK/build.log")"
fi

# Our container replaces the library's plain one, so that
# stop_podman_docker removes ours.
$podman_cmd rm -f -t 0 "$podman_ctr" >/dev/null 2>&1
podman_ctr=tether-image-$$-$RANDOM
if ! $podman_cmd run -d --name "$podman_ctr" --network none \
      --ulimit nofile=20000:20000 --ulimit nproc=4096:4096 \
      "$image" sleep 1000000 >"$WORK/run.log" 2>&1; then
  abort "a container of the image starts" "$(tail -5 "$WORK/run.log")"
fi
out=$($podman_cmd exec "$podman_ctr" /usr/libexec/tether/tether-supervisor --version 2>&1)
if [[ $out == "tether-supervisor $version (protocol "* ]]; then
  pass "/usr/libexec/tether/tether-supervisor --version in the container: $out"
else
  fail "/usr/libexec/tether/tether-supervisor --version in the container" "$out"
fi
want=$(sha256sum <"$BUILD/supervisors/tether-supervisor-$(uname -m)" | cut -d' ' -f1)
have=$($podman_cmd exec "$podman_ctr" sha256sum /usr/libexec/tether/tether-supervisor 2>&1 | cut -d' ' -f1)
if [[ $have == "$want" ]]; then
  pass "the installed supervisor is this build's"
else
  fail "the installed supervisor is this build's" "sha256 $have, build $want"
fi
# busybox's dpkg recorded it, as a package manager does.
if $podman_cmd exec "$podman_ctr" grep -qx 'Package: tether-supervisor' /var/lib/dpkg/status; then
  pass "dpkg in the image lists tether-supervisor as installed"
else
  fail "dpkg in the image lists tether-supervisor as installed" \
    "$($podman_cmd exec "$podman_ctr" cat /var/lib/dpkg/status 2>&1 | head -10)"
fi

# 3. The conformance suite through the Docker API, with no upload.
args=(conformance --provider docker --container "$podman_ctr" --endpoint "$docker_host")
if [[ $allow_upload == 1 ]]; then
  echo "note: TETHER_IMAGE_TEST_ALLOW_UPLOAD=1: without --no-upload, uploads are reported, not refused"
else
  args+=(--no-upload)
fi
status=0
"$TETHER" "${args[@]}" >"$WORK/conformance.log" 2>&1 || status=$?
sed 's/^/    /' "$WORK/conformance.log"
what="tether conformance --provider docker${args[7]:+ ${args[7]}} passes in the image"
if [[ $status -eq 0 ]]; then
  pass "$what"
else
  fail "$what" "exit status $status"
fi

# 4. Count the supervisors in the container: every file system but /proc
# and /sys (so a tmpfs /tmp, /run or /dev/shm is searched too), and not
# dpkg's records (/var/lib/dpkg/info/tether-supervisor.list).
$podman_cmd exec "$podman_ctr" find / \( -path /proc -o -path /sys -o -path /var/lib/dpkg \) -prune \
  -o -name 'tether-supervisor*' -print >"$WORK/found" 2>"$WORK/find.err"
uploads=$(grep -vx /usr/libexec/tether/tether-supervisor "$WORK/found")
count=$(grep -c . <<<"$uploads")
if ! grep -qx /usr/libexec/tether/tether-supervisor "$WORK/found"; then
  fail "find sees the installed supervisor" "$(cat "$WORK/found" "$WORK/find.err")"
elif [[ $allow_upload == 1 ]]; then
  echo "note: $count supervisor file(s) uploaded into the container${uploads:+:}"
  [[ -z $uploads ]] || sed 's/^/    /' <<<"$uploads"
elif [[ $count -ne 0 ]]; then
  fail "no supervisor was written into the container" "$count found:" "$uploads"
elif [[ $status -ne 0 ]]; then
  # Nothing uploaded proves little when the suite did not run.
  echo "note: 0 supervisors uploaded, but conformance failed (exit $status)"
else
  pass "no supervisor was written into the container (0 uploads)"
fi

finish
