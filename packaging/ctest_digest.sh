#!/usr/bin/env bash
# Prints, for every test the last ctest run of build tree $1 failed, the
# lines of its output that say why (doctest's ERROR/FATAL reports with their
# context, sanitizer reports, our own "FAILED" lines, a conformance table's or
# a CLI check's FAIL and an emulator's VIOLATION), capped per test.
#
# Why: a failing suite such as host_tests logs every case it ran (-d), so
# the reason is buried mid-output and CI excerpts only the head and tail of
# a run. `./dev test` calls this after a failed ctest so the reason is the
# last thing printed.
set -euo pipefail
tree=${1:?usage: ctest_digest.sh BUILD_TREE}
log=$tree/Testing/Temporary/LastTest.log
failed=$tree/Testing/Temporary/LastTestsFailed.log
[[ -f $log && -f $failed ]] || exit 0
while IFS=: read -r _ name; do
  [[ -n $name ]] || continue
  echo "== why $name failed (from $log):"
  # The test's output runs from its "Testing: NAME" header to "<end of output>".
  awk -v name="$name" '
    $0 ~ ("^[0-9]+/[0-9]+ Testing: " name "$") { inside = 1; next }
    inside && /^<end of output>$/ { inside = 0 }
    inside { print }
  ' "$log" |
    grep -a -n -E -B4 -A12 '(^|[[:space:]])FAIL([[:space:]]|$)|VIOLATION|ERROR|FATAL|FAILED|Sanitizer|runtime error|Assertion|terminate called|Segmentation|Timeout|timed out' |
    head -n 80 || echo "   (no ERROR/FATAL/FAILED lines; see $log)"
done <"$failed"
