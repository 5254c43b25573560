#!/usr/bin/env bash
# Lists the tests a ctest run skipped (exit 77, SKIP_RETURN_CODE) with the
# end of their output, which says why (a tool, a package or node_modules
# missing), from the JUnit report `ctest --output-junit FILE` wrote.
# Outside CI it only lists them and succeeds. Under CI (CI=true, 1 or yes)
# a skip fails: CI runs everything, so a missing tool is a failure of the
# setup, not a pass.
#
#   packaging/ctest_skips.sh JUNIT_FILE
set -euo pipefail
junit=${1:?usage: ctest_skips.sh JUNIT_FILE}
[[ -f $junit ]] || { echo "ctest_skips: no report at $junit" >&2; exit 1; }
skipped=$(python3 - "$junit" <<'PY'
import sys, xml.etree.ElementTree as ET
for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    if case.find("skipped") is None and case.get("status") not in ("notrun", "disabled"):
        continue
    out = (case.findtext("system-out") or "").strip().splitlines()
    why = " | ".join(line.strip() for line in out[-3:] if line.strip()) or "(no output)"
    print(f"{case.get('name')}: {why}")
PY
)
[[ -n $skipped ]] || exit 0
n=$(wc -l <<<"$skipped")
case ${CI:-} in
  true | 1 | yes)
    echo "ctest_skips: $n test(s) skipped; under CI a skip is a failure:" >&2
    sed 's/^/  SKIPPED /' <<<"$skipped" >&2
    exit 1
    ;;
  *)
    echo "ctest_skips: $n test(s) skipped (a failure under CI=true):" >&2
    sed 's/^/  skipped /' <<<"$skipped" >&2
    ;;
esac
