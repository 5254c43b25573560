#!/usr/bin/env bash
# Runs `tether conformance` against one real target, setting the target up
# first and tearing it down after:
#
#   run_target.sh TETHER TARGET
#
#   local     the built-in local provider, in a scratch directory
#   command   the command provider through plain `sh -c` on this machine
#   text      the same with the duplex-text tunnel (armored lines)
#   exchange  the same with the exchange tunnel (one-shot polls of a relay)
#   ssh       the command provider through OpenSSH: an sshd on 127.0.0.1 with
#             a throwaway host key and user key, started here
#   unshare   the command provider into an isolated sandbox: its own user,
#             mount (private /tmp), pid and network namespaces, entered with
#             nsenter
#   qemu      the aarch64 supervisor under qemu-aarch64 (user-mode emulation)
#   docker    the native docker provider against a real engine: podman's
#             Docker API service and a busybox container, private to the run
#             (tests/lib/podman_docker.sh)
#   podman    the command provider through `podman exec -i CTR sh -c` into
#             the same kind of container
#   docker-engine  the native docker provider against the Docker Engine
#             itself (Debian's dockerd 20.10, private to the run, no
#             network: tests/lib/docker_engine.sh), whose exec semantics
#             are not podman's
#   daytona-v2  the daytona provider against the Daytona emulator serving the
#             process API v2 too (--process-api both), which the provider
#             then uses; daytona-v2-faults with the emulator's faults
#   e2b       the e2b provider against the E2B emulator (tests/emulators/e2b.mjs)
#             over TLS
#   e2b-faults  the same with the emulator cutting streams, answering 5xx,
#             stalling and rotating envd's access token (401 until the
#             control plane is asked again) at random (seeded): every
#             failure must be reattached
#   boat      the boat provider against the Boat emulator (tests/emulators/boat.mjs)
#             over TLS: one-shot commands, so the exchange tunnel
#   boat-faults  the same with the emulator answering 5xx (2%) and answering
#             1-3 s late (2%; every case has 90 s), at random (seeded);
#             also 5xx after the call took effect (1%, the answer lost) and
#             429 with Retry-After (2%); a command the emulator saw run twice fails the run. (A
#             launch answered 5xx is sent again under its launch id, a new
#             relay and so a new command, at most 4 times (PROTOCOL.md 4.1);
#             past that it is OUTCOME_UNKNOWN and its case is run again once.)
#   runloop   the runloop provider against the Runloop emulator
#             (tests/emulators/runloop.mjs) over TLS: the text tunnel over
#             execute_async + SSE, streams ending with 408 every 2 s
#   runloop-faults  the same with SSE events cut mid-line (1%), 5xx (1%),
#             1-3 s late answers (1%) and 2-4 s stalls of a stream (2%);
#             also 5xx after the call took effect (2%, the answer lost) and
#             429 with Retry-After (1%); a command started twice, input
#             applied twice or a resend before Retry-After (as the emulator
#             sees them) fails the run. (A start whose execute_async meets a
#             5xx sends its launch again under the same launch id, in a start
#             script marked as a resend, at most 4 times (PROTOCOL.md 4.1);
#             input that meets a 5xx is OUTCOME_UNKNOWN, never sent again. A
#             start that runs out of resends is OUTCOME_UNKNOWN and its case
#             is run again once.)
#   runloop-exchange  the runloop provider on an emulator where sending stdin
#             kills the execution (--stdin-kills): tether must detect it and
#             run the exchange tunnel over the synchronous execute
#   daytona   the daytona provider against the Daytona emulator
#             (tests/emulators/daytona.mjs) over TLS: text only, so the text tunnel
#   daytona-faults  the same with the emulator cutting log streams mid-line,
#             answering 5xx, stalling 1-3 s and echoing input (seeded); also
#             5xx after the call took effect (the answer lost) and 429 with
#             Retry-After; a command started twice or input applied twice
#             (as the emulator sees them) fails the run. (Any 5xx on an input
#             gives the bridge up; a start that loses its bridge sends its
#             launch again under the same launch id, at most 4 times, then is
#             OUTCOME_UNKNOWN and its case is run again once.)
#   modal     the modal provider against the Modal emulator
#             (tests/emulators/modal.mjs) over gRPC with TLS: the binary tunnel
#             over the task command router
#   modal-faults  the same over h2c with streams reset mid-message (2%),
#             UNAVAILABLE on unary calls (3%, half of them after the call took
#             effect), 1-3 s stalls (1%) and router JWTs that expire every 3 s
#   boxd      the boxd provider against the boxd emulator
#             (tests/emulators/boxd.mjs) over gRPC with TLS: the binary tunnel
#             over the Exec stream (the call is the process)
#   boxd-faults  the same over h2c with Exec calls cut mid-stream (6%),
#             UNAVAILABLE before anything ran (4%), answers lost after the
#             command started (3%), 2-4 s stalls of output (1% of chunks)
#             and JWTs expired under a call (5%); seed 80 draws each kind
#             within the first 12 calls, so every kind fires in a run
#   kubernetes         the native kubernetes provider against the API server
#                      emulator (tests/emulators/kubernetes.mjs) over TLS, with
#                      the kubeconfig it wrote
#   kubernetes-faults  the same with cut streams, closes without a Status (5%
#                      of execs: at 1% the seed's ~45 execs drew none) and
#                      5xx upgrades injected (seeded)
#   kubernetes-v4      the same with a server that speaks only v4.channel.k8s.io
#
# Exits with the conformance run's status; 77 (skipped) when this machine
# cannot make the target (e.g. user namespaces disabled).
set -euo pipefail

tether=$1
target=$2
# Fault-injection targets: a case whose own start lost its setup to a cut
# (OUTCOME_UNKNOWN, the seed's answer there) runs once more, marked so; the
# seeded faults land wherever the run's timing puts them.
rerun=()
[[ $target != *-faults ]] || rerun=(--rerun-setup-cuts)
work=$(mktemp -d /tmp/tether-conformance-XXXXXX)
pids=()
cleanup() {
  set +e # (a failing step of the cleanup never changes the exit status)
  ! declare -F stop_docker_engine >/dev/null || stop_docker_engine
  ! declare -F stop_podman_docker >/dev/null || stop_podman_docker
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

skip() { echo "skipped: $*"; exit 77; }

# faults_fired NAME LOG SPEC [KIND=COUNT...]: counts the faults of each kind
# that SPEC (as given to --faults; not the seed) turns on, from the
# emulator's LOG: one " FAULT KIND ..." line per fault injected (the `expire`
# flag: " FAULT router JWT expired"); a KIND=COUNT argument gives a count the
# log has no line for. Prints the counts; returns 1 when any kind never
# fired: a fault target whose faults stopped firing is a plain run.
faults_fired() {
  local name=$1 log=$2 spec=$3 kind n counts='' none=() given
  shift 3
  for kind in $(tr ',' '\n' <<<"$spec" | sed 's/=.*//' | grep -vx seed || true); do
    n=
    for given in "$@"; do [[ $given != "$kind="* ]] || n=${given#*=}; done
    if [[ -z $n ]]; then
      case $kind in
        expire) n=$(grep -c ' FAULT router JWT expired' "$log" || true) ;;
        *) n=$(grep -cE " FAULT $kind( |\$)" "$log" || true) ;;
      esac
    fi
    counts+="${counts:+, }$n $kind"
    [[ ${n:-0} -gt 0 ]] || none+=("$kind")
  done
  echo "$name emulator: faults injected: ${counts:-none} (--faults $spec)"
  if [[ ${#none[@]} -gt 0 ]]; then
    echo "FAIL: $name emulator: no fault of kind ${none[*]} was injected: the run did not test them" >&2
    return 1
  fi
}

case $target in
  local)
    TETHER_LOCAL_ROOT=$work/local exec "$tether" conformance --provider local
    ;;
  command)
    TMPDIR=$work exec "$tether" conformance --provider command --prefix 'sh -c'
    ;;
  text|exchange)
    TMPDIR=$work exec "$tether" conformance --provider command --prefix 'sh -c' --tunnel "$target"
    ;;
  qemu)
    command -v qemu-aarch64 >/dev/null || skip "no qemu-aarch64"
    # A build without the musl supervisors has only this machine's native one.
    if [[ -n ${TETHER_SUPERVISOR_DIR:-} && ! -e $TETHER_SUPERVISOR_DIR/tether-supervisor-aarch64 ]]; then
      skip "no tether-supervisor-aarch64 in $TETHER_SUPERVISOR_DIR (TETHER_MUSL_SUPERVISORS=OFF)"
    fi
    TMPDIR=$work "$tether" conformance --provider command --prefix 'sh -c' \
      --arch aarch64 --emulator qemu-aarch64
    ;;
  ssh)
    # shellcheck source=../lib/loopback_sshd.sh
    source "$(dirname "${BASH_SOURCE[0]}")/../lib/loopback_sshd.sh"
    rc=0
    start_loopback_sshd "$work" || rc=$?
    [[ -z ${sshd_pid:-} ]] || pids+=("$sshd_pid")
    [[ $rc -ne 77 ]] || skip "no sshd or no free port"
    [[ $rc -eq 0 ]] || exit 1
    status=0
    "$tether" conformance --provider command --prefix "$ssh_cmd" || status=$?
    $ssh_cmd -O exit 2>/dev/null || true
    exit $status
    ;;
  unshare)
    command -v unshare >/dev/null && command -v nsenter >/dev/null || skip "no unshare/nsenter"
    # The sandbox's init: a private /tmp, then sleep as pid 1 of its own pid
    # namespace. Killing it ends everything inside.
    unshare --user --map-root-user --mount --pid --net --fork --mount-proc \
      sh -c 'mount -t tmpfs -o mode=1777 tmpfs /tmp && exec sleep 100000' >/dev/null 2>"$work/unshare.log" &
    pids+=($!)
    init=
    for _ in $(seq 1 50); do
      init=$(pgrep -P "${pids[0]}" -x sleep || true)
      [[ -n $init ]] && break
      sleep 0.1
    done
    [[ -n $init ]] || skip "cannot make user namespaces here: $(cat "$work/unshare.log")"
    # The cleanup kills the init itself: killing unshare alone left it (and
    # the namespace's leftover daemons, zombies under it) running for good.
    pids+=("$init")
    prefix="nsenter -t $init -U -m -p -n --preserve-credentials sh -c"
    # The host cannot see the sandbox's /tmp: check that it is private.
    marker=tether-unshare-$$
    $prefix "touch /tmp/$marker"
    [[ ! -e /tmp/$marker ]] || { echo "the sandbox's /tmp is not private"; exit 1; }
    status=0
    "$tether" conformance --provider command --prefix "$prefix" || status=$?
    exit $status
    ;;
  docker|podman)
    # shellcheck source=../lib/podman_docker.sh
    source "$(dirname "${BASH_SOURCE[0]}")/../lib/podman_docker.sh"
    rc=0
    start_podman_docker "$work" || rc=$?
    [[ $rc -ne 77 ]] || skip "podman cannot run containers here"
    [[ $rc -eq 0 ]] || exit 1
    status=0
    if [[ $target == docker ]]; then
      "$tether" conformance --provider docker --container "$podman_ctr" --endpoint "$docker_host" || status=$?
    else
      "$tether" conformance --provider command --prefix "$podman_cmd exec -i $podman_ctr sh -c" || status=$?
    fi
    exit $status
    ;;
  docker-engine)
    # shellcheck source=../lib/docker_engine.sh
    source "$(dirname "${BASH_SOURCE[0]}")/../lib/docker_engine.sh"
    rc=0
    start_docker_engine "$work" || rc=$?
    [[ $rc -ne 77 ]] || skip "the Docker Engine cannot run here"
    [[ $rc -eq 0 ]] || exit 1
    status=0
    "$tether" conformance --provider docker --container "$engine_ctr" --endpoint "$docker_host" || status=$?
    exit $status
    ;;
  e2b|e2b-faults)
    # shellcheck source=../lib/e2b_emulator.sh
    source "$(dirname "${BASH_SOURCE[0]}")/../lib/e2b_emulator.sh"
    args=(--tls)
    spec=seed=1,cut=0.02,http5xx=0.05,slow=0.05,rotate=0.02
    [[ $target == e2b ]] || args+=(--faults "$spec")
    rc=0
    start_e2b_emulator "$work/e2b" "${args[@]}" || rc=$?
    [[ -z ${e2b_pid:-} ]] || pids+=("$e2b_pid")
    [[ $rc -ne 77 ]] || skip "cannot run the E2B emulator here"
    [[ $rc -eq 0 ]] || exit 1
    mapfile -t flags < <(e2b_flags)
    status=0
    "$tether" conformance "${flags[@]}" "${rerun[@]}" || status=$?
    [[ $status -eq 0 ]] || tail -c 3000 "$work/e2b/emulator.log" >&2
    echo "e2b emulator: $(grep -c ' -> ' "$work/e2b/requests.log" || true) requests"
    if [[ $target == e2b-faults ]]; then faults_fired e2b "$work/e2b/requests.log" "$spec" || status=1; fi
    # The emulator's own check: the account API key sent to envd.
    if grep ' VIOLATION ' "$work/e2b/requests.log" >&2; then
      echo "FAIL: e2b emulator: the calls above broke a rule (VIOLATION lines)" >&2
      status=1
    fi
    # SIGTERM: the emulator kills the process groups it started.
    kill -TERM "$e2b_pid" 2>/dev/null || true
    wait "$e2b_pid" 2>/dev/null || true
    exit $status
    ;;
  boat|boat-faults)
    # shellcheck source=../lib/boat_emulator.sh
    source "$(dirname "${BASH_SOURCE[0]}")/../lib/boat_emulator.sh"
    args=(--tls)
    spec=seed=1,http5xx=0.02,slow=0.02,lost5xx=0.01,http429=0.02
    [[ $target == boat ]] || args+=(--faults "$spec")
    rc=0
    start_boat_emulator "$work/boat" "${args[@]}" || rc=$?
    [[ -z ${boat_pid:-} ]] || pids+=("$boat_pid")
    [[ $rc -ne 77 ]] || skip "cannot run the Boat emulator here"
    [[ $rc -eq 0 ]] || exit 1
    mapfile -t flags < <(boat_flags)
    status=0
    "$tether" conformance "${flags[@]}" "${rerun[@]}" || status=$?
    [[ $status -eq 0 ]] || tail -c 3000 "$work/boat/emulator.log" "$work/boat/requests.log" >&2
    echo "boat emulator: $(grep -c ' -> ' "$work/boat/requests.log" || true) requests"
    if [[ $target == boat-faults ]]; then faults_fired boat "$work/boat/requests.log" "$spec" || status=1; fi
    # The emulator's own check: a command run twice, a resend before Retry-After.
    if grep ' VIOLATION ' "$work/boat/requests.log" >&2; then
      echo "FAIL: boat emulator: the calls above broke a rule (VIOLATION lines)" >&2
      status=1
    fi
    # SIGTERM: the emulator kills the process groups it started.
    kill -TERM "$boat_pid" 2>/dev/null || true
    wait "$boat_pid" 2>/dev/null || true
    exit $status
    ;;
  runloop|runloop-faults|runloop-exchange)
    # shellcheck source=../lib/runloop_emulator.sh
    source "$(dirname "${BASH_SOURCE[0]}")/../lib/runloop_emulator.sh"
    args=(--tls --sse-ms 2000)
    spec=seed=1,cut=0.01,http5xx=0.01,slow=0.01,stall=0.02,lost5xx=0.02,http429=0.01
    [[ $target != runloop-faults ]] || args+=(--faults "$spec")
    [[ $target != runloop-exchange ]] || args+=(--stdin-kills)
    rc=0
    start_runloop_emulator "$work/runloop" "${args[@]}" || rc=$?
    [[ -z ${runloop_pid:-} ]] || pids+=("$runloop_pid")
    [[ $rc -ne 77 ]] || skip "cannot run the Runloop emulator here"
    [[ $rc -eq 0 ]] || exit 1
    mapfile -t flags < <(runloop_flags)
    status=0
    "$tether" conformance "${flags[@]}" "${rerun[@]}" || status=$?
    [[ $status -eq 0 ]] || tail -c 3000 "$work/runloop/emulator.log" "$work/runloop/requests.log" >&2
    echo "runloop emulator: $(grep -c ' -> ' "$work/runloop/requests.log" || true) requests," \
      "$(grep -c 'stream ends with 408' "$work/runloop/requests.log" || true) streams ended with 408"
    if [[ $target == runloop-faults ]]; then faults_fired runloop "$work/runloop/requests.log" "$spec" || status=1; fi
    # The emulator's own check: a command started twice, input applied twice,
    # a resend before Retry-After.
    if grep ' VIOLATION ' "$work/runloop/requests.log" >&2; then
      echo "FAIL: runloop emulator: the calls above broke a rule (VIOLATION lines)" >&2
      status=1
    fi
    kill -TERM "$runloop_pid" 2>/dev/null || true
    wait "$runloop_pid" 2>/dev/null || true
    exit $status
    ;;
  modal|modal-faults)
    # shellcheck source=../lib/modal_emulator.sh
    source "$(dirname "${BASH_SOURCE[0]}")/../lib/modal_emulator.sh"
    args=()
    spec=seed=1,cut=0.02,unavailable=0.03,slow=0.01,expire
    if [[ $target == modal ]]; then args+=(--tls); else args+=(--faults "$spec"); fi
    rc=0
    start_modal_emulator "$work/modal" "${args[@]}" || rc=$?
    [[ -z ${modal_pid:-} ]] || pids+=("$modal_pid")
    [[ $rc -ne 77 ]] || skip "cannot run the Modal emulator here"
    [[ $rc -eq 0 ]] || exit 1
    mapfile -t flags < <(modal_flags)
    status=0
    "$tether" conformance "${flags[@]}" "${rerun[@]}" || status=$?
    [[ $status -eq 0 ]] || tail -c 3000 "$work/modal/emulator.log" "$work/modal/requests.log" >&2
    # The emulator's own check: a control-plane credential on the router.
    if grep ' VIOLATION ' "$work/modal/requests.log" >&2; then
      echo "FAIL: modal emulator: the calls above broke a rule (VIOLATION lines)" >&2
      status=1
    fi
    # The emulator logs its fault counts when it shuts down (the only
    # record of its `slow` stalls): stop it first.
    kill -TERM "$modal_pid" 2>/dev/null || true
    wait "$modal_pid" 2>/dev/null || true
    echo "modal emulator: $(grep -c 'TaskExecStart .* pid' "$work/modal/requests.log" || true) execs," \
      "$(grep -c 'TaskGetCommandRouterAccess' "$work/modal/requests.log" || true) router JWTs"
    if [[ $target == modal-faults ]]; then
      slow=$({ grep ' shutdown .* faults {' "$work/modal/requests.log" | grep -o '"slow":[0-9]*' | tail -n 1 |
        cut -d: -f2; } || true)
      faults_fired modal "$work/modal/requests.log" "$spec" "slow=${slow:-0}" || status=1
    fi
    exit $status
    ;;
  boxd|boxd-faults)
    # shellcheck source=../lib/boxd_emulator.sh
    source "$(dirname "${BASH_SOURCE[0]}")/../lib/boxd_emulator.sh"
    args=()
    spec=seed=80,cut=0.06,unavailable=0.04,lost=0.03,stall=0.01,expire=0.05
    if [[ $target == boxd ]]; then args+=(--tls); else args+=(--faults "$spec"); fi
    rc=0
    start_boxd_emulator "$work/boxd" "${args[@]}" || rc=$?
    [[ -z ${boxd_pid:-} ]] || pids+=("$boxd_pid")
    [[ $rc -ne 77 ]] || skip "cannot run the boxd emulator here"
    [[ $rc -eq 0 ]] || exit 1
    mapfile -t flags < <(boxd_flags)
    status=0
    "$tether" conformance "${flags[@]}" "${rerun[@]}" || status=$?
    [[ $status -eq 0 ]] || tail -c 3000 "$work/boxd/emulator.log" "$work/boxd/requests.log" >&2
    # The emulator's own check: the API key sent to the gRPC endpoint.
    if grep ' VIOLATION ' "$work/boxd/requests.log" >&2; then
      echo "FAIL: boxd emulator: the calls above broke a rule (VIOLATION lines)" >&2
      status=1
    fi
    kill -TERM "$boxd_pid" 2>/dev/null || true
    wait "$boxd_pid" 2>/dev/null || true
    echo "boxd emulator: $(grep -c 'exec started' "$work/boxd/requests.log" || true) execs," \
      "$(grep -c 'auth/token -> 200' "$work/boxd/requests.log" || true) JWTs"
    if [[ $target == boxd-faults ]]; then
      faults_fired boxd "$work/boxd/requests.log" "$spec" \
        "expire=$(grep -c " FAULT expire" "$work/boxd/requests.log" || true)" || status=1
    fi
    exit $status
    ;;
  daytona|daytona-faults|daytona-v2|daytona-v2-faults)
    # shellcheck source=../lib/daytona_emulator.sh
    source "$(dirname "${BASH_SOURCE[0]}")/../lib/daytona_emulator.sh"
    args=(--tls)
    spec=seed=1,cut=0.01,http5xx=0.01,slow=0.01,lost5xx=0.01,http429=0.01
    case $target in
      daytona-faults) args+=(--force-echo --faults "$spec") ;;
      daytona-v2) args+=(--process-api both) ;;
      daytona-v2-faults)
        # (v2's cut is per log event, of which there are fewer than v1's
        # WebSocket messages: a higher rate, so that cuts happen)
        spec=seed=1,cut=0.03,http5xx=0.01,slow=0.01,lost5xx=0.01,http429=0.01
        args+=(--process-api both --faults "$spec") ;;
    esac
    rc=0
    start_daytona_emulator "$work/daytona" "${args[@]}" || rc=$?
    [[ -z ${daytona_pid:-} ]] || pids+=("$daytona_pid")
    [[ $rc -ne 77 ]] || skip "cannot run the Daytona emulator here"
    [[ $rc -eq 0 ]] || exit 1
    mapfile -t flags < <(daytona_flags)
    status=0
    "$tether" conformance "${flags[@]}" "${rerun[@]}" || status=$?
    [[ $status -eq 0 ]] || tail -c 3000 "$work/daytona/emulator.log" "$work/daytona/requests.log" >&2
    echo "daytona emulator: $(grep -c ' -> ' "$work/daytona/requests.log" || true) requests"
    if [[ $target == *-faults ]]; then faults_fired daytona "$work/daytona/requests.log" "$spec" || status=1; fi
    # Which process API carried the run: v2 where the emulator serves it
    # (no session exec at all), the session API otherwise.
    v2_calls=$(grep -cE 'POST /toolbox/[^ /]+/(process/v2/)?processes( |$)' "$work/daytona/requests.log" || true)
    v1_execs=$(grep -c 'POST /toolbox/[^ ]*/process/session/[^ ]*/exec' "$work/daytona/requests.log" || true)
    echo "daytona emulator: $v2_calls process API v2 creations, $v1_execs session execs"
    if [[ $target == daytona-v2* ]] && ((v2_calls == 0 || v1_execs != 0)); then
      echo "FAIL: the v2 target did not run over the process API v2" >&2
      status=1
    elif [[ $target != daytona-v2* ]] && ((v2_calls != 0 || v1_execs == 0)); then
      echo "FAIL: the v1 target did not run over the session API" >&2
      status=1
    fi
    # The emulator's own check: a command started twice, input applied twice,
    # a resend before Retry-After.
    if grep ' VIOLATION ' "$work/daytona/requests.log" >&2; then
      echo "FAIL: daytona emulator: the calls above broke a rule (VIOLATION lines)" >&2
      status=1
    fi
    kill -TERM "$daytona_pid" 2>/dev/null || true
    wait "$daytona_pid" 2>/dev/null || true
    exit $status
    ;;
  kubernetes|kubernetes-faults|kubernetes-v4)
    # shellcheck source=../lib/kubernetes_emulator.sh
    source "$(dirname "${BASH_SOURCE[0]}")/../lib/kubernetes_emulator.sh"
    faults=
    spec=seed=1,cut=0.01,noclose=0.05,http5xx=0.05
    [[ $target == kubernetes-faults ]] && faults=$spec
    [[ $target == kubernetes-v4 ]] && faults=v4only
    rc=0
    start_kubernetes_emulator "$work" "$faults" tls || rc=$?
    [[ -z ${emu_pid:-} ]] || pids+=("$emu_pid")
    [[ $rc -ne 77 ]] || skip "$emu_why"
    [[ $rc -eq 0 ]] || exit 1
    args=(--provider kubernetes --kubeconfig "$emu_kubeconfig" --pod "$emu_pod" --namespace "$emu_namespace")
    [[ -z $emu_container ]] || args+=(--container "$emu_container")
    status=0
    "$tether" conformance "${args[@]}" "${rerun[@]}" || status=$?
    [[ $status -eq 0 ]] || echo "emulator stderr: $(tail -c 2000 "$work/emulator.err")" >&2
    echo "kubernetes emulator: $(grep -c ' -> \| upgraded ' "$work/k8s/requests.log" || true) requests and execs"
    if [[ $target == kubernetes-faults ]]; then faults_fired kubernetes "$work/k8s/requests.log" "$spec" || status=1; fi
    # SIGTERM first: the emulator then kills what its pod still runs.
    kill -TERM "$emu_pid" 2>/dev/null || true
    wait "$emu_pid" 2>/dev/null || true
    exit $status
    ;;
  *)
    echo "unknown target '$target'" >&2
    exit 2
    ;;
esac
