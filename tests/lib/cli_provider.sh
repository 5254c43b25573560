# Sourced by the provider CLI tests (tests/cli/<provider>_test.sh): what
# each of them does before and around its own checks. Sources checks.sh.
#
#   cli_provider_init NAME "$@"   the script's arguments: one executable
#       tether, else the usage line and exit 2. Sets TETHER (absolute), WORK
#       (a new directory tether-NAME-test.XXXXXX under $TMPDIR) and an EXIT
#       trap (cli_provider_cleanup) that TERMs the pids in `emulators`, then
#       kills what still runs with $WORK/ in its argv and removes $WORK.
#   cli_provider_start PROVIDER TITLE DIR [EMULATOR ARGS...]
#       start_PROVIDER_emulator DIR ARGS (tests/lib/PROVIDER_emulator.sh,
#       sourced by the script), its pid into `emulators`, FLAGS from
#       PROVIDER_flags; exit 77 ("cannot run the TITLE emulator") when it
#       cannot run here, exit 1 when it failed.
#   run NAME [ARGS...]            `tether ARGS...` with stdin from $STDIN,
#       stdout to $WORK/NAME.out, stderr to $WORK/NAME.err; sets STATUS.
#       Time-limited (120 s).
#   expect_status CHECK WANT RUN  pass when STATUS is WANT
#   same_file CHECK GOT WANT      pass when the files are the same bytes
#   all_bytes FILE [TIMES]        the bytes 0..255 into FILE, TIMES over;
#       all_bytes_fmt is a printf format of the same 256 bytes
# and checks against `tether run "${FLAGS[@]}"`, each described at it.

# shellcheck source=checks.sh
source "$(dirname "${BASH_SOURCE[0]}")/checks.sh"

cli_provider_init() {
  local name=$1
  shift
  if [[ $# -ne 1 || ! -x $1 ]]; then
    echo "usage: $0 PATH_TO_TETHER" >&2
    exit 2
  fi
  TETHER=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/tether-$name-test.XXXXXX")
  emulators=()
  STDIN=/dev/null
  trap cli_provider_cleanup EXIT
}

# Processes started from this run's directories (the emulators' sandbox
# processes, the supervisors' daemons among them).
our_pids() {
  local d argv
  for d in /proc/[0-9]*; do
    argv=$( { tr '\0' ' ' <"$d/cmdline"; } 2>/dev/null || true)
    [[ $argv == *"$WORK/"* ]] && echo "${d#/proc/}"
  done
}
cli_provider_cleanup() {
  set +e # (a failing step of the cleanup never changes the exit status)
  local p
  for p in "${emulators[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  sleep 0.3
  for p in $(our_pids); do [[ $p == "$$" ]] || kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}

cli_provider_start() {
  local provider=$1 title=$2 rc=0 pid
  shift 2
  "start_${provider}_emulator" "$@" || rc=$?
  pid=${provider}_pid
  [[ -z ${!pid:-} ]] || emulators+=("${!pid}")
  if [[ $rc -eq 77 ]]; then
    echo "skipped: cannot run the $title emulator here"
    exit 77
  fi
  [[ $rc -eq 0 ]] || exit 1
  mapfile -t FLAGS < <("${provider}_flags")
}

run() {
  local name=$1
  shift
  STATUS=0
  timeout -k 5 120 "$TETHER" "$@" <"$STDIN" >"$WORK/$name.out" 2>"$WORK/$name.err" || STATUS=$?
}
expect_status() {  # expect_status CHECK WANT RUN
  if [[ $STATUS -eq $2 ]]; then
    pass "$1"
  else
    fail "$1" "exit status $STATUS, want $2" "stderr: $(head -c 500 "$WORK/$3.err" 2>/dev/null || true)"
  fi
}
same_file() {  # same_file CHECK GOT WANT
  if cmp -s "$2" "$3"; then
    pass "$1"
  else
    fail "$1" "got:  $(od -An -c "$2" | head -c 300)" "want: $(od -An -c "$3" | head -c 300)"
  fi
}

all_bytes_fmt=
for _i in $(seq 0 255); do printf -v _o '\\%03o' "$_i"; all_bytes_fmt+=$_o; done
unset _i _o
all_bytes() {
  local i
  # shellcheck disable=SC2059 # (the format is the bytes)
  for ((i = 0; i < ${2:-1}; i++)); do printf "$all_bytes_fmt"; done >"$1"
}

# printf_checks: every byte value, printed by printf in the sandbox, arrives
# exactly (and printf exits 0).
printf_checks() {
  all_bytes "$WORK/all.bin"
  run printf run "${FLAGS[@]}" -- sh -c "printf '$all_bytes_fmt'"
  same_file "every byte value printed in the sandbox arrives exactly" "$WORK/printf.out" "$WORK/all.bin"
  expect_status "printf exits 0" 0 printf
}

# exit_checks RUN [LABEL]: stdout and stderr pass through apart, and the
# child's exit status 7; the checks' names start with "LABEL: ".
exit_checks() {
  local p=${2:+$2: }
  run "$1" run "${FLAGS[@]}" -- sh -c 'printf out; echo err >&2; exit 7'
  printf out >"$WORK/out.want"
  printf 'err\n' >"$WORK/err.want"
  same_file "${p}stdout passes through" "$WORK/$1.out" "$WORK/out.want"
  same_file "${p}stderr passes through" "$WORK/$1.err" "$WORK/err.want"
  expect_status "${p}the child's exit status 7 passes through" 7 "$1"
}

# tether_child_of PID: the child of PID (`timeout`) that runs $TETHER, if any.
tether_child_of() {
  local d stat a
  for d in /proc/[0-9]*; do
    stat=
    IFS= read -r stat 2>/dev/null <"$d/stat" || continue
    stat=${stat##*) } # after the command name: state ppid ...
    [[ $stat == ?" $1 "* ]] || continue
    a=
    IFS= read -r -d '' a 2>/dev/null <"$d/cmdline" || true
    if [[ $a == "$TETHER" ]]; then
      echo "${d#/proc/}"
      return 0
    fi
  done
  return 0
}

# stream_checks: after printf_checks, every byte value and 1 MiB of random
# bytes through stdin and stdout, stdin EOF, exit statuses, SIGTERM to
# tether (delivered to the child's process group) and a pty of a given size.
stream_checks() {
  cat "$WORK/all.bin" "$WORK/all.bin" "$WORK/all.bin" >"$WORK/all3.bin"
  STDIN=$WORK/all3.bin
  run cat run "${FLAGS[@]}" -- cat
  same_file "every byte value on stdin comes back through cat (and EOF ends it)" "$WORK/cat.out" "$WORK/all3.bin"
  expect_status "cat exits 0" 0 cat

  head -c 1048576 /dev/urandom >"$WORK/rand.bin"
  STDIN=$WORK/rand.bin
  run rand run "${FLAGS[@]}" -- sh -c 'cat; echo done >&2'
  same_file "1 MiB of random bytes through stdin and stdout" "$WORK/rand.out" "$WORK/rand.bin"
  STDIN=/dev/null
  run randout run "${FLAGS[@]}" -- sh -c 'head -c 1048576 /dev/urandom > r.bin && sha256sum r.bin | cut -c1-64 >&2 && cat r.bin && rm r.bin'
  if [[ $(wc -c <"$WORK/randout.out") -eq 1048576 && "$(sha256sum <"$WORK/randout.out" | cut -c1-64)" == "$(tr -d '\n' <"$WORK/randout.err")" ]]; then
    pass "1 MiB of random bytes made in the sandbox arrives exactly (sha256 from the sandbox)"
  else
    fail "1 MiB of random bytes made in the sandbox arrives exactly" "got $(wc -c <"$WORK/randout.out") bytes" \
      "stderr: $(head -c 300 "$WORK/randout.err")"
  fi

  # (wc counts what came, then ends)
  printf 'one\ntwo\nthree' >"$WORK/wc.in"
  STDIN=$WORK/wc.in
  run wc run "${FLAGS[@]}" -- sh -c 'wc -c; echo after-eof'
  STDIN=/dev/null
  printf '13\nafter-eof\n' >"$WORK/wc.want"
  same_file "stdin EOF reaches the child" "$WORK/wc.out" "$WORK/wc.want"

  exit_checks exit
  run exit0 run "${FLAGS[@]}" -- true
  expect_status "exit status 0" 0 exit0
  run killed run "${FLAGS[@]}" -- sh -c 'kill -KILL $$'
  expect_status "a child killed by SIGKILL: 137" 137 killed

  # SIGTERM to tether itself (not to `timeout`, which would send it to its
  # whole process group): the child records it in a file in the sandbox and
  # exits 115, which tether passes on (dying of the signal it would give 143).
  local tpid bg got st
  STATUS=0
  timeout -k 5 120 "$TETHER" run "${FLAGS[@]}" -- sh -c 'trap "echo TERM >>tether-sig.got; exit 115" TERM
    echo started; n=0; while [ $n -lt 600 ]; do sleep 0.1; n=$((n + 1)); done' </dev/null >"$WORK/sig.out" 2>"$WORK/sig.err" &
  bg=$!
  tpid=
  for _ in $(seq 1 300); do
    [[ -n $tpid ]] || tpid=$(tether_child_of "$bg")
    if [[ -n $tpid ]] && grep -q started "$WORK/sig.out" 2>/dev/null; then break; fi
    sleep 0.1
  done
  if [[ -n $tpid ]] && grep -q started "$WORK/sig.out"; then
    kill -TERM "$tpid"
    wait "$bg" || STATUS=$?
    st=$STATUS
    run sig.got run "${FLAGS[@]}" -- sh -c 'cat tether-sig.got; rm -f tether-sig.got'
    got=$(tr '\n' ' ' <"$WORK/sig.got.out")
    if [[ $st -eq 115 && $got == "TERM " ]]; then
      pass "SIGTERM to tether reaches the child, and tether exits with its status (115)"
    else
      fail "SIGTERM to tether reaches the child, and tether exits with its status (115)" \
        "exit status $st, want 115; the child got: '${got% }', want 'TERM'" \
        "stderr: $(head -c 500 "$WORK/sig.err")" "$(head -c 300 "$WORK/sig.got.err")"
    fi
  else
    kill -KILL "$bg" ${tpid:+"$tpid"} 2>/dev/null || true
    wait "$bg" || true
    fail "SIGTERM to tether reaches the child, and tether exits with its status (115)" \
      "the child did not start within 30 s (tether's pid: ${tpid:-not found})" \
      "stdout: $(head -c 200 "$WORK/sig.out")" "stderr: $(head -c 500 "$WORK/sig.err")"
  fi

  run pty run "${FLAGS[@]}" --pty --cols 101 --rows 33 -- sh -c 'test -t 0 && test -t 1 && echo tty; stty size'
  printf 'tty\r\n33 101\r\n' >"$WORK/pty.want"
  same_file "a pty of 101x33" "$WORK/pty.out" "$WORK/pty.want"
}

# expect_not_found RUN CHECK ID OTHER: with OTHER in place of the sandbox ID
# in FLAGS, tether fails with an error that says "not found" and names OTHER.
expect_not_found() {
  local other
  mapfile -t other < <(printf '%s\n' "${FLAGS[@]}" | sed "s/^$3\$/$4/")
  run "$1" run "${other[@]}" -- true
  if [[ $STATUS -ne 0 ]] && grep -qi 'not found' "$WORK/$1.err" && grep -q "$4" "$WORK/$1.err"; then
    pass "$2"
  else
    fail "$2" "status $STATUS" "stderr: $(head -c 500 "$WORK/$1.err")"
  fi
}

# expect_key_refused VAR: a wrong API key in VAR is a clear error that shows
# neither that key nor the right one.
expect_key_refused() {
  local good=${!1} bad=tether-wrong-key-$RANDOM$RANDOM
  local -x "$1=$bad"
  run badkey run "${FLAGS[@]}" -- true
  if [[ $STATUS -ne 0 ]] && grep -qi 'api key' "$WORK/badkey.err" && ! grep -q "$bad" "$WORK/badkey.err" &&
     ! grep -q "$good" "$WORK/badkey.err"; then
    pass "a wrong API key is a clear error without the key in it"
  else
    fail "a wrong API key is a clear error without the key in it" "status $STATUS" \
      "stderr: $(head -c 500 "$WORK/badkey.err")"
  fi
}

# expect_key_named WHAT VAR [VAR...]: with none of the VARs set, tether
# fails with an error that names the first ("no WHAT: the error names VAR").
expect_key_named() {
  local what=$1
  shift
  (unset "$@"; run nokey run "${FLAGS[@]}" -- true; echo "$STATUS" >"$WORK/nokey.status")
  if [[ $(cat "$WORK/nokey.status") -ne 0 ]] && grep -q "$1" "$WORK/nokey.err"; then
    pass "no $what: the error names $1"
  else
    fail "no $what: the error names $1" "stderr: $(head -c 500 "$WORK/nokey.err")"
  fi
}
