#!/usr/bin/env bash
# Writes the seed corpus of message_handler_fuzzer: frame sequences a real
# supervisor sends (output with EOFs, exit, acks, status, gaps, errors), in
# the input layout of message_handler_fuzzer.cc. Needs protoc.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
out=corpus/message_handler
mkdir -p "$out"
rec() {  # rec FLAGS TEXT: one record
  local bin
  bin=$(mktemp)
  printf '%s' "$2" | protoc --proto_path=../protocol --encode=tether.wire.Envelope ../protocol/tether.proto >"$bin"
  local len
  len=$(stat -c %s "$bin")
  printf "\\x$(printf %02x "$1")\\x$(printf %02x $((len >> 8)))\\x$(printf %02x $((len & 255)))"
  cat "$bin"
  rm -f "$bin"
}
out1=$(rec 1 'output { stream: STREAM_STDOUT offset: 0 data: "x" }' | base64 -w0)
eof1=$(rec 1 'output { stream: STREAM_STDOUT offset: 1 eof: true }' | base64 -w0)
eof2=$(rec 1 'output { stream: STREAM_STDERR offset: 0 data: "err" eof: true }' | base64 -w0)
exit0=$(rec 1 'exit { code: 3 }' | base64 -w0)
ack=$(rec 1 'stdin_ack { offset: 1 }' | base64 -w0)
status=$(rec 1 'status { phase: PHASE_RUNNING pid: 4242 }' | base64 -w0)
gap=$(rec 1 'output_gap { stream: STREAM_STDOUT from: 1 to: 100 }' | base64 -w0)
err=$(rec 1 'error { code: ERROR_INPUT_CLOSED message: "closed" }' | base64 -w0)
fatal=$(rec 1 'error { code: ERROR_PROTOCOL message: "bad" fatal: true }' | base64 -w0)
pong=$(rec 3 'pong { nonce: 1 }' | base64 -w0)
big=$(rec 3 "output { stream: STREAM_STDOUT offset: 0 data: \"$(head -c 3000 /dev/zero | tr '\0' a)\" }" | base64 -w0)
d() { printf '%s' "$1" | base64 -d; }
{ d "$out1"; d "$eof1"; d "$eof2"; d "$exit0"; } >"$out/seed-output-eof-exit"
{ d "$ack"; d "$out1"; d "$status"; d "$pong"; } >"$out/seed-ack-status-pong"
{ d "$out1"; d "$gap"; d "$eof2"; } >"$out/seed-gap"
{ d "$err"; d "$fatal"; } >"$out/seed-errors"
{ d "$big"; d "$out1"; d "$exit0"; } >"$out/seed-compressed-replay-early-exit"
{ d "$out1"; d "$out1"; d "$eof1"; d "$eof2"; d "$exit0"; d "$exit0"; } >"$out/seed-duplicates"
ls "$out" | wc -l
