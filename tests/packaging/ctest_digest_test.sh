#!/usr/bin/env bash
# packaging/ctest_digest.sh, what `./dev test` prints after a failed ctest:
# the failing test's ERROR lines out of a long log, nothing of the tests
# that passed, and a pointer to the log when a failure printed no reason.
# Usage: ctest_digest_test.sh REPO_ROOT
set -euo pipefail
digest=$(cd "$1" && pwd)/packaging/ctest_digest.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
mkdir -p "$work/Testing/Temporary"
{
  echo "1/3 Testing: host_tests"
  echo "Output:"
  for i in $(seq 1 500); do echo "0.01 s: case $i"; done
  echo "/src/tests/host/process/process_test.cc:42: ERROR: CHECK_EQ( got, want ) is NOT correct!"
  echo "  values: CHECK_EQ( abc, abd )"
  for i in $(seq 501 900); do echo "0.01 s: case $i"; done
  echo "<end of output>"
  echo "2/3 Testing: passing_test"
  echo "Output:"
  echo "ERROR: a line a passing test printed"
  echo "<end of output>"
  echo "3/3 Testing: conformance.ssh"
  echo "Output:"
  echo "nothing useful"
  echo "<end of output>"
} >"$work/Testing/Temporary/LastTest.log"
printf '1:host_tests\n3:conformance.ssh\n' >"$work/Testing/Temporary/LastTestsFailed.log"
out=$(bash "$digest" "$work")
grep -q 'why host_tests failed' <<<"$out" || bad "no header for host_tests: $out"
grep -q 'process_test.cc:42: ERROR' <<<"$out" || bad "the ERROR line is missing: $out"
grep -q 'values: CHECK_EQ( abc, abd )' <<<"$out" || bad "the ERROR's context is missing: $out"
grep -q 'passing test' <<<"$out" && bad "a passing test's output was shown: $out"
grep -q 'case 200$' <<<"$out" && bad "lines far from the ERROR were shown"
grep -q 'why conformance.ssh failed' <<<"$out" || bad "no header for conformance.ssh"
grep -q 'no ERROR/FATAL/FAILED lines' <<<"$out" || bad "no pointer to the log for a silent failure: $out"
(($(wc -l <<<"$out") < 40)) || bad "digest too long: $(wc -l <<<"$out") lines"
# No ctest run yet: nothing to say, and no failure of its own.
out=$(bash "$digest" "$work/none") || bad "failed on a tree without a ctest log"
[[ -z $out ]] || bad "printed for a tree without a ctest log: $out"
((fail == 0)) && echo "ctest digest: all checks passed"
exit "$fail"
