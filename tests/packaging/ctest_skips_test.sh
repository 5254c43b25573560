#!/usr/bin/env bash
# packaging/ctest_skips.sh, what `./dev test` runs after each ctest: it
# lists skipped tests with their reason, and fails under CI=true only.
# Usage: ctest_skips_test.sh REPO_ROOT
set -euo pipefail
skips=$(cd "$1" && pwd)/packaging/ctest_skips.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
cat >"$work/skipped.xml" <<'XML'
<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="Linux-c++" tests="2" failures="0" disabled="0" skipped="1" hostname="" time="1">
  <testcase name="passes" classname="passes" time="0.1" status="run"><system-out>ok</system-out></testcase>
  <testcase name="conformance.e2b" classname="conformance.e2b" time="0.2" status="notrun">
    <skipped message="SKIP_RETURN_CODE=77"/>
    <system-out>starting
e2b emulator: npm ci failed; skipping</system-out>
  </testcase>
</testsuite>
XML
cat >"$work/clean.xml" <<'XML'
<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="Linux-c++" tests="1" failures="0" disabled="0" skipped="0" hostname="" time="1">
  <testcase name="passes" classname="passes" time="0.1" status="run"><system-out>ok</system-out></testcase>
</testsuite>
XML
rc=0; out=$(env -u CI bash "$skips" "$work/skipped.xml" 2>&1) || rc=$?
((rc == 0)) || bad "outside CI a skip should not fail (rc $rc): $out"
grep -q 'conformance.e2b: .*npm ci failed' <<<"$out" || bad "the skip and its reason are not listed: $out"
rc=0; out=$(CI=true bash "$skips" "$work/skipped.xml" 2>&1) || rc=$?
((rc == 1)) || bad "under CI=true a skip should fail (rc $rc): $out"
grep -q 'SKIPPED conformance.e2b' <<<"$out" || bad "CI output does not name the skipped test: $out"
grep -q 'passes' <<<"$out" && bad "a test that ran is listed: $out"
rc=0; out=$(CI=true bash "$skips" "$work/clean.xml" 2>&1) || rc=$?
((rc == 0)) && [[ -z $out ]] || bad "no skips should print nothing and pass (rc $rc): $out"
rc=0; out=$(CI=true bash "$skips" "$work/missing.xml" 2>&1) || rc=$?
((rc != 0)) || bad "a missing report should fail"
((fail == 0)) && echo "ok: ctest_skips"
exit "$fail"
