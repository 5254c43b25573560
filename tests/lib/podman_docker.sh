# Sourced by tests and benchmarks: a real container engine serving Docker's
# Engine API, private to the caller. Podman (Debian's, with runc and
# cgroupfs: see /work/shared/TOOLCHAIN.md) runs with its own storage root,
# run root and tmp dir under $1, so nothing touches the machine's podman
# state; the container has no network (no bridge, no firewall rules).
#
#   source tests/lib/podman_docker.sh
#   start_podman_docker "$work" || exit $?    # 77: podman cannot run containers here
#   trap stop_podman_docker EXIT              # (or call it from your own cleanup)
#
# sets
#   podman_cmd      podman with the private root (add a subcommand); one
#                   line of words without quotes (usable as a --prefix)
#   podman_ctr      the running container's name (busybox, `sleep` as pid 1)
#   podman_image    the busybox image it runs
#   docker_sock     the API's Unix socket; docker_host=unix://$docker_sock
#   podman_service_pid
#
# A static (musl) supervisor runs in the bare busybox container. When the
# one tether will install ($TETHER_SUPERVISOR_DIR/tether-supervisor-ARCH) is
# dynamically linked (a build with TETHER_MUSL_SUPERVISORS=OFF), the host's
# /usr/lib, /lib and /lib64 are mounted read-only into the container so that
# it can run there too.
#
# The busybox root file system tar is cached (keyed by busybox's sha256) in
# $TETHER_PODMAN_CACHE (default /tmp/tether-podman-cache-UID); importing it
# into the private root takes about half a second.

_podman_docker_work=
podman_service_pid=

_podman_rootfs_tar() {
  local cache=${TETHER_PODMAN_CACHE:-/tmp/tether-podman-cache-$(id -u)} busybox hash tmp c
  busybox=$(command -v busybox) || return 1
  # (v2: the recipe below; bump it when the recipe changes)
  hash=v2-$(sha256sum "$busybox" | cut -c1-16)
  podman_image=localhost/tether-busybox:$hash
  _podman_tar=$cache/busybox-rootfs-$hash.tar
  [[ -s $_podman_tar ]] && return 0
  mkdir -p "$cache" && chmod 700 "$cache" || return 1
  tmp=$(mktemp -d "$cache/build-XXXXXX") || return 1
  mkdir -p "$tmp/rootfs/bin" "$tmp/rootfs/tmp" "$tmp/rootfs/etc"
  cp "$busybox" "$tmp/rootfs/bin/busybox"
  chmod 1777 "$tmp/rootfs/tmp"
  # Every applet (sh, cat, seq, pwd, ...) as a link, as a busybox image has.
  for c in $("$busybox" --list); do
    [[ $c == busybox || -e $tmp/rootfs/bin/$c ]] || ln -s busybox "$tmp/rootfs/bin/$c"
  done
  echo 'root:x:0:0:root:/root:/bin/sh' > "$tmp/rootfs/etc/passwd"
  echo 'root:x:0:' > "$tmp/rootfs/etc/group"
  tar -C "$tmp/rootfs" -cf "$tmp/rootfs.tar" . && mv -f "$tmp/rootfs.tar" "$_podman_tar"
  local rc=$?
  rm -rf "$tmp"
  return $rc
}

# start_podman_docker WORK: returns 0, 77 (cannot here) or 1 (a failure).
start_podman_docker() {
  local work=$1 i
  _podman_docker_work=$work
  command -v podman >/dev/null && command -v runc >/dev/null && command -v busybox >/dev/null ||
    { echo "skipped: needs podman, runc and busybox (apt-get install podman runc busybox-static)" >&2; return 77; }
  _podman_rootfs_tar || { echo "cannot build the busybox root file system tar" >&2; return 1; }
  local p=$work/podman
  mkdir -p "$p/storage" "$p/run" "$p/tmp" "$p/xdg"
  chmod 700 "$p/xdg"
  # A private, empty containers.conf: the machine's own settings do not leak
  # in. (Set for podman only: the caller's environment is left alone.)
  : > "$p/containers.conf"
  podman_cmd="env XDG_RUNTIME_DIR=$p/xdg CONTAINERS_CONF=$p/containers.conf podman --root $p/storage --runroot $p/run --tmpdir $p/tmp --runtime runc --cgroup-manager=cgroupfs --events-backend=file"
  if ! $podman_cmd image exists "$podman_image" 2>/dev/null; then
    $podman_cmd import -q "$_podman_tar" "$podman_image" >"$p/import.log" 2>&1 ||
      { echo "skipped: podman cannot import an image here: $(tail -3 "$p/import.log")" >&2; return 77; }
  fi
  podman_ctr=tether-$$-$RANDOM
  local -a libs=()
  local sup=${TETHER_SUPERVISOR_DIR:-}/tether-supervisor-$(uname -m)
  if [[ -n ${TETHER_SUPERVISOR_DIR:-} && -f $sup ]] && LC_ALL=C grep -qa 'ld-linux' "$sup"; then
    # (merged /usr: /lib and /lib64 are links into /usr, and the loader's
    # own link is absolute, through /lib)
    libs=(-v "$(readlink -f /usr/lib):/usr/lib:ro" -v "$(readlink -f /lib):/lib:ro")
    [[ -e /lib64 ]] && libs+=(-v "$(readlink -f /lib64):/lib64:ro")
  fi
  # TETHER_PODMAN_SHARE=DIR: DIR is bind-mounted at the same path, read-write
  # (a test that reads back what the container's processes wrote there).
  [[ -z ${TETHER_PODMAN_SHARE:-} ]] || libs+=(-v "$TETHER_PODMAN_SHARE:$TETHER_PODMAN_SHARE")
  # (The machine's hard RLIMIT_NOFILE is 20000: runc must not ask for more.)
  if ! $podman_cmd run -d --name "$podman_ctr" --network none "${libs[@]}" \
        --ulimit nofile=20000:20000 --ulimit nproc=4096:4096 \
        "$podman_image" sleep 1000000 >"$p/run.log" 2>&1; then
    echo "skipped: podman cannot run a container here: $(tail -3 "$p/run.log")" >&2
    $podman_cmd rm -f -t 0 "$podman_ctr" >/dev/null 2>&1
    podman_ctr=
    return 77
  fi
  docker_sock=$p/docker.sock
  docker_host=unix://$docker_sock
  $podman_cmd system service --time=0 "$docker_host" >"$p/service.log" 2>&1 &
  podman_service_pid=$!
  for i in $(seq 1 100); do
    [[ $(curl -s --max-time 2 --unix-socket "$docker_sock" http://d/_ping 2>/dev/null) == OK ]] && return 0
    kill -0 "$podman_service_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "the podman API service did not answer GET /_ping: $(tail -5 "$p/service.log")" >&2
  return 1
}

# Waits (1 s, then kills them) for the processes that still use the
# private root once the container is gone: conmon (exec sessions' conmons
# outlive their container for several seconds) and the `podman container
# cleanup` it runs, which would mount the storage again.
_podman_wait_stragglers() {
  local - root=$1 i
  set +e
  local -a pids
  for i in $(seq 1 60); do
    mapfile -t pids < <(pgrep -f -- "$root" || true)
    [[ ${#pids[@]} -eq 0 ]] && return 0
    [[ $i -ge 10 ]] && kill -9 "${pids[@]}" 2>/dev/null
    sleep 0.1
  done
}

# Stops the service, removes the container and the whole private root
# (idempotent).
stop_podman_docker() {
  # Cleanup never fails its caller: it runs from EXIT traps of scripts
  # under errexit, where a kill of a process that has just gone (the
  # watchdog below, a straggler) would end the script with that status.
  local -
  set +e
  [[ -n $_podman_docker_work ]] || return 0
  local p=$_podman_docker_work/podman m
  if [[ -n $podman_service_pid ]]; then
    kill "$podman_service_pid" 2>/dev/null || true
    # (Our child: `wait` reaps it; a kill -0 loop would see the zombie.)
    # The watchdog's `wait` is interruptible, so killing it ends it at once.
    ( trap 'exit 0' TERM; sleep 5 & wait $!; kill -9 "$podman_service_pid" 2>/dev/null ) >/dev/null 2>&1 &
    local killer=$!
    wait "$podman_service_pid" 2>/dev/null || true
    kill "$killer" 2>/dev/null
    wait "$killer" 2>/dev/null
    podman_service_pid=
  fi
  if [[ -n ${podman_ctr:-} ]]; then
    $podman_cmd rm -f -t 0 "$podman_ctr" >/dev/null 2>&1 || true
    podman_ctr=
  fi
  _podman_wait_stragglers "$p/storage"
  # Whatever is still mounted under the root (the storage's own bind mount,
  # a container that refused to go) is unmounted before the tree goes.
  for _ in 1 2 3; do
    while read -r _ m _; do
      case $m in "$p"/*) umount -l "$m" 2>/dev/null || true ;; esac
    done < /proc/mounts
    rm -rf "$p" 2>/dev/null && break
    sleep 0.2
  done
  [[ ! -e $p ]] || echo "stop_podman_docker: could not remove $p" >&2
  _podman_docker_work=
}
