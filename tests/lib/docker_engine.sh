# Sourced by tests: the real Docker Engine (Debian's docker.io: dockerd
# 20.10 with its own containerd), private to the caller, beside podman's
# compatible API (podman_docker.sh): their exec semantics differ, so the
# docker provider is proven against both.
#
#   source tests/lib/docker_engine.sh
#   start_docker_engine "$work" || exit $?   # 77: no dockerd, or it cannot run here
#   trap stop_docker_engine EXIT             # (or call it from your own cleanup)
#
# sets
#   engine_ctr      the running container's name (busybox, `sleep` as pid 1,
#                   --network none)
#   docker_sock     the engine's Unix socket; docker_host=unix://$docker_sock
#
# dockerd runs with its data root, exec root and pid file under $1/dockerd,
# no bridge and no iptables rules: nothing of the machine's own Docker (if
# any) is touched. The image is the same busybox root file system tar that
# podman_docker.sh builds and caches, imported through the API.

# shellcheck source=podman_docker.sh
source "$(dirname "${BASH_SOURCE[0]}")/podman_docker.sh"

_docker_engine_dir=
_docker_engine_pid=
engine_ctr=

# curl against the private engine: _engine_api METHOD PATH [CURL ARGS...]
_engine_api() {
  local method=$1 path=$2
  shift 2
  curl -sS --max-time 60 --unix-socket "$docker_sock" -X "$method" "$@" "http://d/v1.41$path"
}

start_docker_engine() {
  local work=$1 d i
  command -v dockerd >/dev/null && command -v curl >/dev/null && command -v busybox >/dev/null ||
    { echo "skipped: needs dockerd, curl and busybox (apt-get install docker.io curl busybox-static)" >&2; return 77; }
  d=$work/dockerd
  mkdir -p "$d" && chmod 700 "$d" || return 1
  _docker_engine_dir=$d
  docker_sock=$d/docker.sock
  docker_host=unix://$docker_sock
  dockerd --host "$docker_host" --data-root "$d/data" --exec-root "$d/exec" --pidfile "$d/docker.pid" \
    --bridge none --iptables=false --ip-masq=false --userland-proxy=false >"$d/dockerd.log" 2>&1 &
  _docker_engine_pid=$!
  for i in $(seq 1 150); do
    [[ $(curl -s --max-time 2 --unix-socket "$docker_sock" http://d/_ping 2>/dev/null) == OK ]] && break
    if ! kill -0 "$_docker_engine_pid" 2>/dev/null; then
      echo "skipped: dockerd cannot run here: $(tail -3 "$d/dockerd.log")" >&2
      _docker_engine_pid=
      return 77
    fi
    sleep 0.1
  done
  [[ $(curl -s --max-time 2 --unix-socket "$docker_sock" http://d/_ping 2>/dev/null) == OK ]] ||
    { echo "dockerd did not answer GET /_ping in 15 s: $(tail -5 "$d/dockerd.log")" >&2; return 1; }
  _podman_rootfs_tar || { echo "could not make the busybox root file system" >&2; return 1; }
  local repo=tether-busybox tag=${_podman_tar##*/busybox-rootfs-}
  tag=${tag%.tar}
  _engine_api POST "/images/create?fromSrc=-&repo=$repo&tag=$tag" -H 'Content-Type: application/x-tar' \
    --data-binary "@$_podman_tar" >"$d/import.log" 2>&1 ||
    { echo "dockerd could not import the image: $(tail -c 500 "$d/import.log")" >&2; return 1; }
  engine_ctr=tether-$$-$RANDOM
  local body
  body=$(printf '{"Image":"%s:%s","Cmd":["sleep","1000000"],"HostConfig":{"NetworkMode":"none"}}' "$repo" "$tag")
  if ! _engine_api POST "/containers/create?name=$engine_ctr" -H 'Content-Type: application/json' -d "$body" \
        -o "$d/create.json" -w '%{http_code}' >"$d/create.code" 2>&1 || [[ $(cat "$d/create.code") != 201 ]] ||
     ! _engine_api POST "/containers/$engine_ctr/start" -o "$d/start.out" -w '%{http_code}' >"$d/start.code" 2>&1 ||
     [[ $(cat "$d/start.code") != 204 ]]; then
    echo "skipped: dockerd cannot run a container here: $(cat "$d/create.json" "$d/start.out" 2>/dev/null | head -c 500)" >&2
    engine_ctr=
    return 77
  fi
  return 0
}

# Removes the container, stops dockerd (and its containerd) and removes the
# private root (idempotent; never fails its caller).
stop_docker_engine() {
  local -
  set +e
  [[ -n $_docker_engine_dir ]] || return 0
  local d=$_docker_engine_dir m
  if [[ -n $engine_ctr && -n $_docker_engine_pid ]]; then
    _engine_api DELETE "/containers/$engine_ctr?force=true" >/dev/null 2>&1
  fi
  engine_ctr=
  if [[ -n $_docker_engine_pid ]]; then
    kill "$_docker_engine_pid" 2>/dev/null
    # (Our child: `wait` reaps it. The watchdog ends a dockerd that hangs.)
    ( trap 'exit 0' TERM; sleep 10 & wait $!; kill -9 "$_docker_engine_pid" 2>/dev/null ) >/dev/null 2>&1 &
    local killer=$!
    wait "$_docker_engine_pid" 2>/dev/null
    kill "$killer" 2>/dev/null
    wait "$killer" 2>/dev/null
    _docker_engine_pid=
  fi
  # Its containerd and shims (their command lines name the private root).
  _podman_wait_stragglers "$d"
  for _ in 1 2 3; do
    while read -r _ m _; do
      case $m in "$d"/*) umount -l "$m" 2>/dev/null ;; esac
    done </proc/mounts
    rm -rf "$d" 2>/dev/null && break
    sleep 0.2
  done
  [[ ! -e $d ]] || echo "stop_docker_engine: could not remove $d" >&2
  _docker_engine_dir=
}
