#!/usr/bin/env bash
# Writes the seed corpus of attachment_core_fuzzer: the scenarios a host and
# a child play out with a supervisor (output with acks until the exit and
# its acknowledgement, zstd and a small window, a lost connection and a
# reattach past evicted output, a control attachment, stdin with EOF, a
# terminal, a second host refused as busy, detach and leases, and hostile
# bytes), in the input layout of attachment_core_fuzzer.cc: a config byte,
# then operations. Plain bytes: no protoc needed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
out=corpus/attachment_core
mkdir -p "$out"
seed() {  # seed NAME HEX...: one input from hex bytes
  local name=$1
  shift
  printf '%s' "$*" | tr -d ' \n' | xxd -r -p >"$out/$name"
}
# Operations (attachment_core_fuzzer.cc Harness::Step; K = connection 0..2):
#   K0 send an envelope: kind, generation mode, then its operands
#     kind 0 hello: flags (1 wrong secret, 2 control, 4 zstd, 8/16/24
#       ticket: newest/later expiry/bad mac, 32 other version, 64 window
#       u16 x 64 follows), then per stream 0 zero, 1 end, 2 begin
#     kind 1 stdin: mode (0 at the end), length u16; 2 stdin_eof: mode
#     kind 3 ack: flags (1 window u16, 4 exit), per stream 0 sent 1 acked
#       2 ring end; 4 signal u8; 5 terminate u16; 6 resize u16 u8;
#       7 status; 8 ping u64; 9 detach
#   K3 raw bytes (n, bytes)   K4 deliver n   K5 deliver all and write all
#   K6 write 1-4 batches      07 child writes (stream, n u16)
#   08 stream EOF (1 stdout, else stderr; 2 and the child exited)
#   K9 new connection         Ka hang up    0b stdin pump   0c time u16 ms
#   Kd host acks everything received (and the exit once seen)
hello="00 00 00 00 00"   # right secret, no ticket, resume at 0
seed exit_after_output \
  00  00 $hello  05  07 00 27 10  05  0d 05  07 01 01 00  05 0d 05 \
  08 01  08 02  05  0d 05
seed zstd_small_window \
  08  00 00 00 44 00 01 00 00  05 \
  07 00 9c 40  07 01 9c 40  06 00  0d 04 00  06 01  0d 05  0d 05 0d 05
seed zstd_compressible \
  04  00 00 00 04 00 00  05  07 00 ff ff  05 0d 05 07 01 80 00 05 0d 05
seed reattach_after_eviction \
  00  00 $hello  05  07 00 0f a0  0a  0c 07 d0  07 00 27 10 \
  19  10 00 00 08 00 00  15  1d 15  08 03 08 00 15 1d 15
seed control_attachment \
  00  00 $hello  05  19  10 00 00 0a 00 00  15 \
  10 07 00  10 08 00 01 02 03 04 05 06 07 08  10 04 00 13  10 05 00 64  15 \
  10 01 00 00 00 10  15
seed stdin_with_eof \
  00  00 $hello  05  00 01 00 00 03 e8  04 00  0b 05  06 00 \
  00 01 00 00 00 10  04 00  00 02 00 00  05  0b 7f  0b 01  05
seed stdin_child_closed \
  00  00 $hello  05  00 01 00 00 10 00  05  0b 00  00 01 00 00 00 20  05
seed terminal_resize \
  01  00 $hello  05  00 06 00 00 50 18  00 06 00 00 00 00  00 04 00 1c  05 \
  07 00 01 00  05  0d  05
seed busy_then_free \
  00  00 $hello  05  19  10 00 00 08 00 00  15  0a  19  10 00 00 08 00 00  15
seed detach_and_lease \
  00  00 $hello  05  00 09 00  05  09  00 00 00 00 00 00  0c 27 10  05 \
  0c ff ff  09  00 00 00 08 00 00  05
seed stale_generation_and_garbage \
  00  00 $hello  05  00 07 01  00 08 02 00 00 00 00 00 00 00 01  05 \
  03 05 de ad be ef 00  05
seed launch_failed \
  10  00 $hello  05  0d 05
seed wrong_secret \
  00  00 00 00 01 00 00  05
seed ack_beyond_output \
  00  00 $hello  05  07 00 00 10  05  00 03 00 03 00  05
