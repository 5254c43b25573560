# Sourced by the CLI test scripts: one line per check, counted.
#   pass NAME            ok    NAME
#   fail NAME DETAIL...  FAIL  NAME, then each detail indented
# FAILED and CHECKS hold the counts for the script's summary and status.
FAILED=0
CHECKS=0
pass() {
  CHECKS=$((CHECKS + 1))
  printf 'ok    %s\n' "$1"
}
fail() {
  CHECKS=$((CHECKS + 1))
  FAILED=$((FAILED + 1))
  printf 'FAIL  %s\n' "$1"
  shift
  local line
  for line in "$@"; do printf '        %s\n' "$line"; done
}
