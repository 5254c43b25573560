#!/usr/bin/env bash
# A provider endpoint that lies cannot rewrite the user's terminal: error
# text from a server reaches tether's stderr bounded, with every control
# character, C1 control and bidirectional override escaped.
#
#   tests/cli/hostile_endpoint_test.sh path/to/tether
#
# The endpoint (tests/lib/hostile_http.py) answers every request of the
# E2B, Boat, Daytona and Runloop adapters with an error whose text carries
# an OSC title change, a screen clear, colours, a C1 CSI, a right-to-left
# override, NUL, a carriage return and fake "tether:" lines; as JSON (the
# usual API error), as plain text, and followed by 4 MiB; and a 302 and a
# 307 whose Location (the same origin, or another one that records what
# reaches it) must not be followed. Each check also
# requires that the hostile text did reach the message (escaped), so that
# it cannot pass because the server's words were dropped.
set -euo pipefail

here=$(dirname "${BASH_SOURCE[0]}")
# shellcheck source=../lib/checks.sh
source "$here/../lib/checks.sh"
if [[ $# -ne 1 || ! -x $1 ]]; then
  echo "usage: $0 PATH_TO_TETHER" >&2
  exit 2
fi
TETHER=$1
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tether-hostile-test.XXXXXX")
server=
cleanup() {
  [[ -z $server ]] || kill "$server" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

start_server() {  # start_server STATUS KIND: sets URL
  [[ -z $server ]] || { kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true; }
  rm -f "$WORK/port" "$WORK/requests" "$WORK/away-port" "$WORK/elsewhere"
  python3 "$here/../lib/hostile_http.py" "$WORK" "$1" "$2" &
  server=$!
  local n=0
  while [[ ! -s $WORK/port ]]; do
    ((++n < 500)) || { echo "the hostile endpoint did not start" >&2; exit 1; }
    kill -0 "$server" 2>/dev/null || { echo "the hostile endpoint exited" >&2; exit 1; }
    sleep 0.01
  done
  URL=http://127.0.0.1:$(cat "$WORK/port")
}

# inert FILE: no byte a terminal acts on (C0 but the newline ending each
# line, DEL, UTF-8 C1 controls, bidi and zero-width format characters).
inert() {
  python3 - "$1" <<'PY'
import re, sys
data = open(sys.argv[1], "rb").read()
bad = re.search(rb"[\x00-\x09\x0b-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80[\x8b-\x8f\xa8-\xae]|\xe2\x81[\xa0-\xa9]|\xef\xbb\xbf", data)
sys.exit(0 if bad is None else 1)
PY
}

declare -A flags=(
  [e2b]="--provider e2b --sandbox sbx-1"
  [boat]="--provider boat --sandbox sbx-1"
  [daytona]="--provider daytona --sandbox sbx-1"
  [runloop]="--provider runloop --devbox dbx-1"
)
export E2B_API_KEY=e2b_key-hostile BOAT_API_KEY=boat-key-hostile DAYTONA_API_KEY=dtn-key-hostile \
  RUNLOOP_API_KEY=ak-key-hostile

for answer in "400 json" "500 text" "403 huge" "404 json" "302 redirect" "307 redirect" "302 away" "307 away"; do
  # shellcheck disable=SC2086
  start_server $answer
  for provider in e2b boat daytona runloop; do
    name="$provider ${answer// /-}"
    extra=()
    [[ $provider != e2b ]] || extra=(--sandbox-url "$URL")
    status=0
    # shellcheck disable=SC2086
    timeout -k 5 120 "$TETHER" run ${flags[$provider]} --endpoint "$URL" "${extra[@]}" -- true \
      </dev/null >"$WORK/out" 2>"$WORK/err" || status=$?
    if [[ $status -eq 0 || $status -ge 128 ]]; then
      fail "$name: tether fails cleanly" "status $status (want 1..127)" "$(head -c 400 "$WORK/err" | cat -v)"
      continue
    fi
    if [[ ! -s $WORK/requests ]]; then
      fail "$name: tether asked the endpoint" "no request reached it" "$(head -c 400 "$WORK/err" | cat -v)"
      continue
    fi
    if inert "$WORK/err"; then
      pass "$name: stderr holds no control or format character"
    else
      fail "$name: stderr holds no control or format character" "$(head -c 600 "$WORK/err" | cat -v)"
    fi
    size=$(stat -c %s "$WORK/err")
    if [[ $size -le 4096 ]]; then
      pass "$name: stderr is bounded ($size bytes)"
    else
      fail "$name: stderr is bounded" "$size bytes"
    fi
    if [[ $answer == *redirect ]]; then
      # No provider documents a redirect: none is followed, with the
      # credentials or at all (the server saw requests, none redirected).
      if grep -q ' /redirected' "$WORK/requests"; then
        fail "$name: no redirect is followed" "$(cat "$WORK/requests")"
      else
        pass "$name: no redirect is followed"
      fi
    fi
    if [[ $answer == *away ]]; then
      # Nor one to another origin: its listener (127.0.0.2) is up and
      # records any request, with the credential headers it carried.
      if [[ ! -s $WORK/away-port ]]; then
        fail "$name: no redirect to another origin is followed" "the other origin's listener did not start"
      elif [[ -e $WORK/elsewhere ]]; then
        fail "$name: no redirect to another origin is followed" "$(cut -c1-200 "$WORK/elsewhere")"
      else
        pass "$name: no redirect to another origin is followed (nothing reached 127.0.0.2:$(cat "$WORK/away-port"))"
      fi
    fi
    # The server's words are there, escaped: the checks above saw them.
    if grep -q 'PWNED\\x1b]0;owned\\x07' "$WORK/err"; then
      pass "$name: the server's text is quoted, escaped"
    else
      fail "$name: the server's text is quoted, escaped" "$(head -c 600 "$WORK/err" | cat -v)"
    fi
  done
done

echo "$((CHECKS - FAILED))/$CHECKS checks passed"
[[ $FAILED -eq 0 ]]
