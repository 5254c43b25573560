#!/usr/bin/env bash
# The shipped supervisors: static, stripped, under 2 MiB, and runnable (the
# aarch64 one under qemu-aarch64).
set -euo pipefail
dir=$1
max=$((2 * 1024 * 1024))
fail=0
for arch in x86_64 aarch64; do
  bin=$dir/tether-supervisor-$arch
  desc=$(file -b "$bin")
  size=$(stat -c %s "$bin")
  echo "$arch: $size bytes: $desc"
  [[ $desc == *"statically linked"* ]] || { echo "FAIL: $arch is not statically linked"; fail=1; }
  [[ $desc == *"stripped"* && $desc != *"not stripped"* ]] || { echo "FAIL: $arch is not stripped"; fail=1; }
  ((size < max)) || { echo "FAIL: $arch is $size bytes, limit $max"; fail=1; }
done
[[ $(file -b "$dir/tether-supervisor-x86_64") == *x86-64* ]] || { echo "FAIL: wrong arch"; fail=1; }
[[ $(file -b "$dir/tether-supervisor-aarch64") == *aarch64* ]] || { echo "FAIL: wrong arch"; fail=1; }
"$dir/tether-supervisor-x86_64" --version | grep -q 'protocol' || { echo "FAIL: x86_64 --version"; fail=1; }
qemu-aarch64 "$dir/tether-supervisor-aarch64" --version | tee /dev/stderr | grep -q 'protocol' ||
  { echo "FAIL: aarch64 --version under qemu"; fail=1; }
exit $fail
