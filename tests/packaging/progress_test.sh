#!/usr/bin/env bash
# packaging/progress.sh, what ./dev run and packaging/setup.sh show while
# they work: never a byte on stdout; plain lines without a terminal, a
# rewritten status line on one; a failed step shows its log; stopping the
# runner stops its jobs' whole process groups.
# Usage: progress_test.sh REPO_ROOT
set -euo pipefail
lib=$(cd "$1" && pwd)/packaging/progress.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# Runs bash code $2 with progress.sh sourced, TETHER_PROGRESS=$1; sets out, err, rc.
run() {
  rc=0
  TETHER_PROGRESS=$1 bash -c "set -euo pipefail; source '$lib'; progress_init t; $2" \
    >"$work/out" 2>"$work/err" </dev/null || rc=$?
  out=$(<"$work/out") err=$(<"$work/err")
}

# 1. Plain: one line per job started, nothing else when all succeed.
run plain "
  jobs_add 'job one' $work/1.log progress_none sh -c 'echo one-output'
  jobs_add 'job two' $work/2.log progress_none sh -c 'echo two-output'
  jobs_run 2 things"
((rc == 0)) || bad "plain: exit $rc: $err"
[[ $err == $'t: job one\nt: job two' ]] || bad "plain: stderr is: $err"
[[ -z $out ]] || bad "plain: stdout: $out"
grep -qx two-output "$work/2.log" || bad "plain: job output not in its log"

# 2. A failing job: the runner fails and shows that job's log.
run plain "
  jobs_add 'good' $work/g.log progress_none sleep 0.3
  jobs_add 'broken' $work/b.log progress_none sh -c 'echo the-reason-it-broke; exit 3'
  jobs_run 2 things"
((rc == 1)) || bad "failure: exit $rc"
[[ $err == *"t: broken failed"* && $err == *the-reason-it-broke* && $err == *"$work/b.log"* ]] ||
  bad "failure: log not shown: $err"
[[ -z $out ]] || bad "failure: stdout: $out"

# 3. Terminal mode: the status line is rewritten in place (\r, erase line)
#    with the parser's view of the log, and erased at the end.
run tty "
  progress_run 'building' $work/n.log progress_ninja sh -c 'echo \"[3/10] Building x\"; sleep 1.2'
  progress_clear"
((rc == 0)) || bad "tty: exit $rc: $err"
[[ $err == *$'\r\033[K'"t: building [3/10] 0:0"* ]] || bad "tty: no status line: $(printf %q "$err")"
[[ $err == *$'\r\033[K' ]] || bad "tty: status line not erased at the end: $(printf %q "$err")"
[[ $err != *$'\n'* ]] || bad "tty: a status line scrolled: $(printf %q "$err")"
[[ -z $out ]] || bad "tty: stdout: $out"

# 3b. A step that ends at once (everything up to date) shows nothing at all.
run tty "progress_run 'building' $work/q.log progress_ninja true; progress_clear"
[[ -z $err && -z $out ]] || bad "quick tty step printed: $(printf %q "$err$out")"
run plain "progress_run 'building' $work/q.log progress_ninja true"
[[ -z $err && -z $out ]] || bad "quick plain step printed: $(printf %q "$err$out")"
run plain "progress_run 'building' $work/q.log progress_ninja sleep 2.5"
[[ $err == "t: building" ]] || bad "slow plain step: $(printf %q "$err")"

# 4. A note is a lasting line in both modes.
run tty "progress_status working; progress_note 'ready in 1:00'"
[[ $err == *$'\r\033[Kt: ready in 1:00' && "$(tail -c 1 "$work/err" | od -An -c)" == *'\n'* ]] ||
  bad "tty note: $(printf %q "$err")"

# 5. TERM to the runner stops every job's process group (grandchildren too).
rc=0
TETHER_PROGRESS=plain bash -c "source '$lib'; progress_init t
  jobs_add 'long' $work/l.log progress_none sh -c 'sleep 300 & echo \$! >$work/grandchild; wait'
  jobs_run 2 things" >/dev/null 2>&1 </dev/null &
runner=$!
for _ in $(seq 50); do [[ -s $work/grandchild ]] && break; sleep 0.1; done
kill -TERM "$runner"
wait "$runner" || rc=$?
((rc == 130)) || bad "stop: runner exit $rc"
grandchild=$(<"$work/grandchild")
for _ in $(seq 20); do kill -0 "$grandchild" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$grandchild" 2>/dev/null; then
  bad "stop: the job's grandchild $grandchild still runs"
  kill "$grandchild"
fi

((fail == 0)) && echo "progress: all cases passed"
exit $fail
