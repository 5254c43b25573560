#!/usr/bin/env bash
# Writes the seed corpus of supervisor_handler_fuzzer: request sequences a
# host sends a supervisor (stdin with EOF and acks, pty resize and signals,
# terminate, detach and reattach, exit acknowledgement) and the hostile ones
# (stale generations, stdin holes, acks beyond what was sent, a wrong
# secret, oversize and corrupt zstd frames), in the input layout of
# supervisor_handler_fuzzer.cc: a config byte, then records. Needs protoc.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
out=corpus/supervisor_handler
mkdir -p "$out"
byte() { printf "\\x$(printf %02x "$1")"; }
raw() {  # raw FLAGS FILE: one record holding FILE's bytes
  local len
  len=$(stat -c %s "$2")
  byte "$1"; byte $((len >> 8)); byte $((len & 255))
  cat "$2"
}
rec() {  # rec FLAGS TEXT: one record holding an Envelope
  local bin
  bin=$(mktemp)
  printf '%s' "$2" | protoc --proto_path=../protocol --encode=tether.wire.Envelope ../protocol/tether.proto >"$bin"
  raw "$1" "$bin"
  rm -f "$bin"
}
# Record flags (supervisor_handler_fuzzer.cc): 1 generation, 2 zstd, 4 our
# secret in a Hello, 8 stale generation, 16 round trip, 32 ack what was
# received, 64 raw bytes, 128 reconnect first; 255 pause 4 ms x payload[0].
# Config: 1 wrong secret, 2 no Hello from the fuzzer, 4 zstd, 8 pty, 16 stdin
# closed, 32/64/96 child (sh cat+echo, flood, true), 128 small window and ring.
{ byte 0
  rec 17 'stdin_data { offset: 0 data: "hello\n" }'
  rec 17 'stdin_eof { offset: 6 }'
  rec 49 'ack { }'
  rec 1 'status_request { }'
  rec 17 'ping { nonce: 7 }'
} >"$out/seed-stdin-eof-ack"
{ byte 8
  rec 17 'stdin_data { offset: 0 data: "ab\n" }'
  rec 1 'resize { size { cols: 100 rows: 40 } }'
  rec 1 'signal { signal: 28 }'
  rec 49 'ack { }'
  rec 17 'terminate { grace_ms: 50 }'
  rec 49 'ack { }'
} >"$out/seed-pty-resize-signal-terminate"
{ byte 32
  rec 8 'stdin_data { offset: 0 data: "stale" }'
  rec 8 'ack { stdout_offset: 0 }'
  rec 17 'stdin_data { offset: 0 data: "abc" }'
  rec 17 'stdin_data { offset: 1 data: "bcdef" }'
  rec 1 'stdin_eof { offset: 6 }'
  rec 49 'ack { }'
} >"$out/seed-stale-generation-replayed-stdin"
{ byte 0
  rec 1 'stdin_data { offset: 0 data: "x" }'
  rec 17 'stdin_data { offset: 5 data: "hole" }'
} >"$out/seed-stdin-hole"
{ byte 0
  rec 17 'stdin_data { offset: 0 data: "x" }'
  rec 1 'ack { stdout_offset: 1000 exit: true }'
} >"$out/seed-ack-beyond-sent"
{ byte $((4 | 64 | 128))
  for _ in 1 2 3 4 5 6; do rec 49 'ack { window_bytes: 8192 }'; done
  rec 17 'stdin_eof { offset: 0 }'
  rec 49 'ack { }'
} >"$out/seed-flood-small-window-zstd"
{ byte 0
  rec 17 'stdin_data { offset: 0 data: "x" }'
  rec 1 'detach { }'
  rec 148 'hello { min_version: 1 max_version: 1 stdout_offset: 0 zstd: true }'
  rec 17 'stdin_data { offset: 1 data: "y" }'
  rec 49 'ack { }'
  rec 132 'hello { min_version: 1 max_version: 1 stdout_offset: 99 }'
} >"$out/seed-detach-reattach"
bad=$(mktemp)
{ byte 0
  printf 'T\xe7\x01\x01\x00\x00\x00\x10'; head -c 16 /dev/zero
} >"$bad"
{ byte 0
  rec 17 'status_request { }'
  raw 64 "$bad"
} >"$out/seed-corrupt-zstd-frame"
printf 'T\xe7\x01\x00\x7f\xff\xff\xff' >"$bad"
{ byte 0
  raw 64 "$bad"
} >"$out/seed-oversize-frame"
rm -f "$bad"
{ byte 1
  rec 1 'status_request { }'
} >"$out/seed-wrong-secret"
{ byte 96
  rec 49 'ack { }'
  rec 49 'ack { exit: true }'
  rec 132 'hello { min_version: 1 max_version: 1 }'
} >"$out/seed-true-exit-acked"
{ byte $((2 | 16))
  rec 4 'hello { window_bytes: 4096 zstd: true }'
  rec 3 "stdin_data { offset: 0 data: \"$(head -c 3000 /dev/zero | tr '\0' a)\" }"
  rec 1 'stdin_eof { offset: 0 }'
  rec 1 'signal { signal: 0 }'
  rec 1 'signal { signal: 19 }'
  rec 1 'resize { size { cols: 1 rows: 1 } }'
  rec 17 'signal { signal: 18 }'
} >"$out/seed-stdin-closed-own-hello"
{ byte $((64 | 128))
  rec 17 'detach { }'
  rec 145 'hello { min_version: 1 max_version: 1 secret: "wrong-secret-wrong-secret" }'
  rec 148 'hello { min_version: 1 max_version: 1 window_bytes: 65536 }'
  for _ in 1 2 3; do rec 49 'ack { }'; done
} >"$out/seed-flood-detached-evicted-gap"
{ byte 8
  rec 17 'stdin_data { offset: 0 data: "abc" }'
  rec 17 'stdin_eof { offset: 3 }'
  rec 49 'ack { }'
  rec 17 'stdin_data { offset: 3 data: "late" }'
  rec 1 'resize { size { cols: 0 rows: 5 } }'
  rec 49 'ack { }'
} >"$out/seed-pty-stdin-eof"
{ byte $((4 | 64))
  for _ in 1 2 3 4 5 6 7 8; do rec 49 'ack { }'; done
  rec 17 'stdin_data { offset: 0 data: "after the flood" }'
  rec 49 'ack { }'
} >"$out/seed-flood-zstd-incompressible-stderr"
{ byte $((64 | 128))
  rec 49 'ack { }'
  byte 255; byte 0; byte 1; byte 30
  rec 132 'hello { min_version: 1 max_version: 1 }'
  rec 49 'ack { }'
  rec 148 'hello { min_version: 1 max_version: 1 }'
  byte 255; byte 0; byte 1; byte 10
  rec 148 'hello { min_version: 1 max_version: 1 }'
  rec 49 'ack { }'
} >"$out/seed-lease-expiry-lost-connection"
ls "$out" | wc -l
