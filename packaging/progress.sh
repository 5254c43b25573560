# shellcheck shell=bash
# Progress reporting for ./dev and packaging/setup.sh (sourced, not run).
#
# Everything goes to stderr; stdout is never written. On a terminal (stderr
# is a tty and TERM is not dumb) one status line is rewritten in place and
# only lasting notes scroll; otherwise each stage is one plain line.
# TETHER_PROGRESS=tty|plain overrides the detection.
#
#   progress_init NAME          prefix of every line ("setup", "dev")
#   progress_status TEXT        tty: rewrite the status line; plain: nothing
#   progress_stage TEXT         tty: status line; plain: "NAME: TEXT"
#   progress_note TEXT          a lasting line (both modes)
#   progress_clear              tty: erase the status line
#   progress_run LABEL LOG PARSER CMD...
#                               runs CMD with stdout+stderr into LOG (stdin
#                               /dev/null), showing LABEL, PARSER's view of
#                               LOG and the elapsed time once it has taken a
#                               moment (plain: the LABEL line after 2 s); on
#                               failure shows the log (progress_fail)
#   progress_fail LABEL LOG     shows the end of LOG (and where it is)
#   progress_ninja LOG          PARSER for ninja logs: "[12/40]"
#   TETHER_PROGRESS_ALSO=LABEL|LOG  a ninja build the caller runs meanwhile,
#                               shown at the end of jobs_run's status line
#   progress_elapsed SECONDS    "1:05"

progress_init() {
  PROGRESS_NAME=$1
  PROGRESS_SHOWN=0
  case ${TETHER_PROGRESS:-auto} in
    tty|plain) PROGRESS_MODE=$TETHER_PROGRESS ;;
    *)
      PROGRESS_MODE=plain
      [[ ! -t 2 || ${TERM:-dumb} == dumb ]] || PROGRESS_MODE="tty"
      ;;
  esac
  PROGRESS_COLS=80
  if [[ $PROGRESS_MODE == tty ]]; then
    local cols
    cols=$(stty size 2>/dev/null </dev/tty | cut -d' ' -f2 || true)
    if [[ $cols =~ ^[0-9]+$ ]] && ((cols > 20)); then PROGRESS_COLS=$cols; fi
  fi
  return 0
}

progress_elapsed() { printf '%d:%02d' $(($1 / 60)) $(($1 % 60)); }

progress_status() {
  [[ $PROGRESS_MODE == tty ]] || return 0
  local line="$PROGRESS_NAME: $*"
  # One terminal line: never wrap (a wrapped line cannot be rewritten).
  printf '\r\033[K%s' "${line:0:$((PROGRESS_COLS - 1))}" >&2
  PROGRESS_SHOWN=1
}

progress_clear() {
  if [[ $PROGRESS_MODE == tty && $PROGRESS_SHOWN == 1 ]]; then
    printf '\r\033[K' >&2
    PROGRESS_SHOWN=0
  fi
}

progress_note() {
  progress_clear
  printf '%s: %s\n' "$PROGRESS_NAME" "$*" >&2
}

progress_stage() {
  if [[ $PROGRESS_MODE == tty ]]; then
    progress_status "$*"
  else
    printf '%s: %s\n' "$PROGRESS_NAME" "$*" >&2
  fi
}

progress_ninja() {
  [[ -f $1 ]] || return 0
  tail -c 8192 "$1" | tr '\r' '\n' | grep -oE '^\[[^]]*[0-9]+/[0-9]+\]' | tail -n 1 || true
}

# Shows why LABEL failed: its log from ninja's first "FAILED:" (a build
# error), else the end of it, and where the whole log is.
progress_fail() {
  local label=$1 log=$2 lines first
  progress_clear
  lines=$(wc -l <"$log" 2>/dev/null || echo 0)
  first=$(grep -n -m1 '^FAILED: ' "$log" 2>/dev/null | cut -d: -f1 || true)
  if [[ -n $first ]]; then
    printf '%s: %s failed; %s from line %d:\n' "$PROGRESS_NAME" "$label" "$log" "$first" >&2
    tail -n "+$first" "$log" | head -n 150 >&2
  elif ((lines > 80)); then
    printf '%s: %s failed; the last 80 of %d lines of %s:\n' "$PROGRESS_NAME" "$label" "$lines" "$log" >&2
    tail -n 80 "$log" >&2
  else
    printf '%s: %s failed; %s:\n' "$PROGRESS_NAME" "$label" "$log" >&2
    cat "$log" >&2
  fi
  printf '%s: %s failed (log: %s)\n' "$PROGRESS_NAME" "$label" "$log" >&2
}

progress_run() {
  local label=$1 log=$2 parser=$3
  shift 3
  local start=$SECONDS rc=0 pid shown=0 tick=0
  # A step that ends within a moment (everything up to date) shows nothing.
  "$@" >"$log" 2>&1 </dev/null &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    if [[ $PROGRESS_MODE == tty ]]; then
      ((tick < 3)) ||
        progress_status "$label $($parser "$log") $(progress_elapsed $((SECONDS - start)))"
    elif ((!shown && SECONDS - start >= 2)); then
      progress_stage "$label"
      shown=1
    fi
    if ((tick < 10)); then sleep 0.1; else sleep 0.5; fi
    tick=$((tick + 1))
  done
  wait "$pid" || rc=$?
  if ((rc != 0)); then
    progress_fail "$label" "$log"
    return "$rc"
  fi
  return 0
}

progress_none() { :; }

# TETHER_PROGRESS_ALSO="LABEL|LOG": work the caller runs meanwhile (a ninja
# build logging into LOG), shown at the end of the status line.
progress_also() {
  [[ -n ${TETHER_PROGRESS_ALSO:-} ]] || return 0
  printf ' | %s %s' "${TETHER_PROGRESS_ALSO%%|*}" "$(progress_ninja "${TETHER_PROGRESS_ALSO#*|}")"
}

# Parallel jobs, each one a command with its output in its own log.
#   jobs_add LABEL LOG PARSER CMD...   queue a job (CMD may be a function)
#   jobs_run MAX TITLE                 run the queue, MAX at a time, showing
#                                      TITLE, the count done and each running
#                                      job's LABEL with PARSER's view of its
#                                      log; on the first failure stops the
#                                      others and shows the failed job's log
JOBS_LABEL=() JOBS_LOG=() JOBS_PARSER=() JOBS_CMD=()

jobs_add() {
  local q
  JOBS_LABEL+=("$1") JOBS_LOG+=("$2") JOBS_PARSER+=("$3")
  shift 3
  printf -v q '%q ' "$@"
  JOBS_CMD+=("$q")
}

# Stops every running job (each one is its own process group).
jobs_stop() {
  local pid
  for pid in "${JOBS_RUNNING_PIDS[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
  for pid in "${JOBS_RUNNING_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  JOBS_RUNNING_PIDS=()
}

jobs_run() {
  local max=$1 title=$2 total=${#JOBS_CMD[@]} next=0 done=0 failed=-1
  local start=$SECONDS i rc text tick=0
  local -a running=() still=() pids=()
  JOBS_RUNNING_PIDS=()
  ((total)) || return 0
  # Each job in its own process group (set -m while it starts; only then, or
  # bash reports finished jobs on stderr), so that stopping one stops its
  # make, ninja and compilers too; signals to us stop them all.
  trap 'jobs_stop; progress_clear; exit 130' INT TERM HUP
  while ((next < total || ${#running[@]})); do
    while ((failed < 0 && next < total && ${#running[@]} < max)); do
      mkdir -p "$(dirname "${JOBS_LOG[next]}")"
      set -m
      eval "${JOBS_CMD[next]}" >"${JOBS_LOG[next]}" 2>&1 </dev/null &
      pids[next]=$!
      set +m
      running+=("$next")
      [[ $PROGRESS_MODE == tty ]] || progress_stage "${JOBS_LABEL[next]}"
      next=$((next + 1))
    done
    still=()
    for i in "${running[@]}"; do
      if kill -0 "${pids[i]}" 2>/dev/null; then still+=("$i"); continue; fi
      rc=0
      wait "${pids[i]}" 2>/dev/null || rc=$?
      done=$((done + 1))
      ((rc == 0 || failed >= 0)) || failed=$i
    done
    running=("${still[@]}")
    JOBS_RUNNING_PIDS=()
    for i in "${running[@]}"; do JOBS_RUNNING_PIDS+=("${pids[i]}"); done
    if ((failed >= 0)); then
      jobs_stop
      running=()
      break
    fi
    if [[ $PROGRESS_MODE == tty ]]; then
      text="$title ($done/$total)"
      for i in "${running[@]}"; do
        text+=" | ${JOBS_LABEL[i]} $(${JOBS_PARSER[i]} "${JOBS_LOG[i]}")"
      done
      text+=$(progress_also)
      progress_status "$text $(progress_elapsed $((SECONDS - start)))"
    fi
    # Quick polls first, so that short jobs cost no waiting.
    if ((tick < 10)); then sleep 0.1; else sleep 0.5; fi
    tick=$((tick + 1))
  done
  trap - INT TERM HUP
  local failed_label='' failed_log=''
  ((failed < 0)) || failed_label=${JOBS_LABEL[failed]} failed_log=${JOBS_LOG[failed]}
  JOBS_LABEL=() JOBS_LOG=() JOBS_PARSER=() JOBS_CMD=()
  if ((failed >= 0)); then
    progress_fail "$failed_label" "$failed_log"
    return 1
  fi
  return 0
}
