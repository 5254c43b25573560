#!/usr/bin/env bash
# emulator_modules (tests/lib/emulator_modules.sh), which every emulator's
# starter calls before using tests/emulators/node_modules: four callers at
# once (as ctest -j4 starts them) and a fifth that comes while the install is
# under way each return only once the tree is whole, `npm ci` runs once, a finished install is not
# redone, a changed lockfile is, and a failed install is not taken for one.
# A fake `npm` stands in for the registry: it empties node_modules first and
# fills it slowly, as `npm ci` does.
# Usage: emulators_setup_test.sh REPO_ROOT
set -euo pipefail
root=$(cd "$1" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
mkdir -p "$work/emu" "$work/bin"
cp "$root/tests/emulators/setup.sh" "$work/emu/"
echo '{"lockfileVersion": 3}' >"$work/emu/package-lock.json"
cat >"$work/bin/npm" <<'NPM'
#!/usr/bin/env bash
echo run >>"$FAKE_NPM_LOG"
[[ ${FAKE_NPM_FAIL:-} ]] && { rm -rf node_modules; mkdir -p node_modules/ws; exit 1; }
rm -rf node_modules
mkdir -p node_modules/ws
sleep 1
echo 'export {}' >node_modules/ws/index.js
echo '{}' >node_modules/.package-lock.json
NPM
chmod +x "$work/bin/npm"
export PATH="$work/bin:$PATH" FAKE_NPM_LOG=$work/npm.log
# Each caller records whether the tree was whole when setup.sh returned.
# shellcheck source=../lib/emulator_modules.sh
source "$root/tests/lib/emulator_modules.sh"
caller() {
  if emulator_modules "$work/emu" 2>/dev/null; then
    [[ -f $work/emu/node_modules/ws/index.js ]] && echo whole || echo partial
  else
    echo "failed"
  fi
}
for i in 1 2 3 4; do caller >"$work/caller.$i" & done
# A fifth caller starts while the install is under way (node_modules exists
# but is empty), the case that once failed conformance.kubernetes.
for _ in $(seq 1 50); do [[ -d $work/emu/node_modules/ws ]] && break; sleep 0.05; done
[[ -d $work/emu/node_modules/ws && ! -f $work/emu/node_modules/ws/index.js ]] ||
  bad "the fifth caller did not start during the install (the test did not test the race)"
caller >"$work/caller.5" &
wait
for i in 1 2 3 4 5; do
  [[ $(<"$work/caller.$i") == whole ]] || bad "caller $i returned with the tree $(<"$work/caller.$i")"
done
runs=$(wc -l <"$work/npm.log")
((runs == 1)) || bad "npm ci ran $runs times for five callers"
bash "$work/emu/setup.sh" >/dev/null
runs=$(wc -l <"$work/npm.log")
((runs == 1)) || bad "a whole install was redone ($runs runs)"
echo '{"lockfileVersion": 3, "changed": true}' >"$work/emu/package-lock.json"
bash "$work/emu/setup.sh" >/dev/null
runs=$(wc -l <"$work/npm.log")
((runs == 2)) || bad "a changed lockfile did not reinstall ($runs runs)"
echo '{"lockfileVersion": 3, "changed": 2}' >"$work/emu/package-lock.json"
rc=0; FAKE_NPM_FAIL=1 bash "$work/emu/setup.sh" >/dev/null 2>&1 || rc=$?
((rc != 0)) || bad "a failed npm ci returned 0"
rc=0; FAKE_NPM_FAIL=1 bash "$work/emu/setup.sh" >/dev/null 2>&1 || rc=$?
((rc != 0)) || bad "after a failed npm ci, the next call took the tree for installed"
((fail == 0)) && echo "ok: emulators_setup"
exit "$fail"
