#!/usr/bin/env bash
# ctest entry point: install_test.sh LIBTETHER_C
# `npm install ./node` as a user does it, in a project of theirs: the
# package's files as a fresh clone has them (git's list, no node_modules, no
# build/) are copied to a scratch directory, a new npm project installs that
# folder, npm runs the install script (build.sh) against this build's
# libtether_c (TETHER_LIBTETHER_C), and a program of the project imports
# "@tether/node" by name and runs a process: exact bytes and the exit code.
# Prints how long the install took (the issue's bound is 2 minutes; a
# benchmark figure, not asserted). Exit 77 as run_test.sh.
set -euo pipefail
lib=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
for tool in node npm git "${CC:-cc}"; do
  command -v "$tool" >/dev/null 2>&1 || { echo "$tool not found: skipped"; exit 77; }
done
scratch=$(mktemp -d "${TMPDIR:-/tmp}/tether-node-install-XXXXXX")
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/clone" "$scratch/app"
# The package and the headers it compiles against, as committed (plus any
# change in the work tree to those files: this tests the tree under test).
(cd "$root" && git ls-files -z --cached --others --exclude-standard node include |
  grep -zv '^node/\(node_modules\|build\)/' | xargs -0 tar cf -) | tar xf - -C "$scratch/clone"
[[ -f $scratch/clone/node/package.json && ! -e $scratch/clone/node/node_modules && ! -e $scratch/clone/node/build ]] ||
  { echo "FAILED: the copy is not a clean package" >&2; exit 1; }
cd "$scratch/app"
printf '{"name":"app","version":"1.0.0","private":true,"type":"module"}\n' >package.json
start=$(date +%s%N)
TETHER_LIBTETHER_C=$lib npm install --no-audit --no-fund --foreground-scripts "$scratch/clone/node"
end=$(date +%s%N)
echo "npm install ./node took $(((end - start) / 1000000)) ms"
[[ -f $scratch/clone/node/build/tether.node ]] || { echo "FAILED: the install script built no addon" >&2; exit 1; }
cat >check.mjs <<'JS'
import * as tether from "@tether/node";
const sandbox = tether.local();
try {
  const all = Uint8Array.from({ length: 256 }, (_, i) => i);
  const r = await sandbox.exec({ command: { kind: "argv", argv: ["sh", "-c", "cat; exit 3"] }, stdin: all });
  console.log(JSON.stringify({ same: Buffer.compare(Buffer.from(r.stdoutBytes), Buffer.from(all)) === 0, n: r.stdoutBytes.length, exitCode: r.exitCode }));
} finally {
  sandbox.close();
}
JS
got=$(node check.mjs)
echo "$got"
[[ $got == '{"same":true,"n":256,"exitCode":3}' ]] || { echo "FAILED: unexpected result from the installed package" >&2; exit 1; }
echo "OK: the installed package ran a process with exact bytes and its exit code"
