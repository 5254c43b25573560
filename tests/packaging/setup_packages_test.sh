#!/usr/bin/env bash
# packaging/setup.sh --packages (the Debian packages step of ./dev run and
# ./dev test): silent when every package is installed; otherwise it names
# the missing ones before installing, uses sudo only when not root, and
# stops with the list and the command to run when it cannot install them.
# Never runs apt-get for real: the non-root cases run as `nobody` with a
# fake sudo that records its arguments.
# Usage: setup_packages_test.sh REPO_ROOT
set -euo pipefail
repo=$(cd "$1" && pwd)
setup=$repo/packaging/setup.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
fail=0
bad() { echo "FAIL: $*"; fail=1; }
missing=tether-test-no-such-package

# Runs setup.sh --packages as nobody with PATH=$1:<system>; the rest of the
# arguments are VAR=VALUE for its environment. Sets out, err, rc.
as_nobody() {
  local path=$1
  shift
  local cache=$work/cache.$RANDOM
  mkdir -p "$cache" && chown nobody "$cache"
  rc=0
  setpriv --reuid=nobody --regid=nogroup --clear-groups \
    env -i HOME=/ PATH="$path:/usr/sbin:/usr/bin:/sbin:/bin" TETHER_CACHE_DIR="$cache" \
    TETHER_PROGRESS=plain "$@" bash "$setup" --packages \
    >"$work/out" 2>"$work/err" </dev/null || rc=$?
  out=$(<"$work/out") err=$(<"$work/err")
}

# A fake sudo: `sudo -n true` and `sudo -v` answer as $1 says (yes: no
# password needed; no: a password is required); every call is recorded.
fake_sudo() {
  local dir=$work/sudo-$1
  mkdir -p "$dir"
  cat >"$dir/sudo" <<EOF
#!/bin/sh
echo "\$*" >>$work/sudo-calls
if [ "$1" = no ]; then echo "sudo: a password is required" >&2; exit 1; fi
exit 0
EOF
  chmod 755 "$dir/sudo"
  : >"$work/sudo-calls"
  chmod 666 "$work/sudo-calls"
  printf '%s' "$dir"
}

# 1. Everything installed (this machine has run setup): no output at all.
rc=0
TETHER_CACHE_DIR=$work/cache-root TETHER_PROGRESS=plain bash "$setup" --packages \
  >"$work/out" 2>"$work/err" </dev/null || rc=$?
((rc == 0)) || bad "all installed: exit $rc: $(cat "$work/err")"
[[ ! -s $work/out && ! -s $work/err ]] || bad "all installed: printed: $(cat "$work/out" "$work/err")"

# 2. Not root, no sudo: stops and names the package and the command.
nosudo=$work/empty-bin
mkdir -p "$nosudo"
if command -v sudo >/dev/null; then
  echo "skip: sudo is installed here, case 2 needs a PATH without it"
else
  as_nobody "$nosudo" TETHER_SETUP_EXTRA_PACKAGES=$missing
  ((rc == 1)) || bad "no sudo: exit $rc"
  [[ $err == *"missing: $missing"* ]] || bad "no sudo: package not named: $err"
  [[ $err == *"sudo is not installed"* ]] || bad "no sudo: reason not given: $err"
  [[ $err == *"apt-get install --no-install-recommends $missing   (as root)"* ]] ||
    bad "no sudo: no command to run: $err"
  [[ -z $out ]] || bad "no sudo: wrote to stdout: $out"
fi

# 3. Not root, sudo needs a password, not interactive: stops, sudo only asked -n.
dir=$(fake_sudo no)
as_nobody "$dir" TETHER_SETUP_EXTRA_PACKAGES=$missing
((rc == 1)) || bad "sudo with password: exit $rc"
[[ $err == *"sudo needs a password and this run is not interactive"* ]] ||
  bad "sudo with password: reason not given: $err"
[[ $err == *"$missing"* ]] || bad "sudo with password: package not named: $err"
[[ "$(cat "$work/sudo-calls")" == "-n true" ]] ||
  bad "sudo with password: sudo called as: $(cat "$work/sudo-calls")"

# 4. Not root, passwordless sudo: says what it installs first, then apt-get
#    through sudo (the fake one: nothing is installed).
dir=$(fake_sudo yes)
as_nobody "$dir" TETHER_SETUP_EXTRA_PACKAGES=$missing
((rc == 0)) || bad "passwordless sudo: exit $rc: $err"
[[ $err == *"installing 1 Debian package(s) with sudo apt-get: $missing"* ]] ||
  bad "passwordless sudo: no announcement: $err"
grep -q "^-n apt-get update" "$work/sudo-calls" || bad "passwordless sudo: no apt-get update"
grep -q "^-n env DEBIAN_FRONTEND=noninteractive apt-get install .* $missing\$" "$work/sudo-calls" ||
  bad "passwordless sudo: no apt-get install: $(cat "$work/sudo-calls")"
[[ -z $out ]] || bad "passwordless sudo: wrote to stdout: $out"

# 5. Root with everything installed never calls sudo, even when on PATH.
dir=$(fake_sudo yes)
rc=0
PATH="$dir:$PATH" TETHER_CACHE_DIR=$work/cache-root TETHER_PROGRESS=plain bash "$setup" --packages \
  >"$work/out" 2>"$work/err" </dev/null || rc=$?
((rc == 0)) || bad "root: exit $rc"
[[ ! -s $work/sudo-calls ]] || bad "root: sudo called: $(cat "$work/sudo-calls")"

# 6. What each kind of run needs: a first `./dev run` (quick) only the
#    compiler, CMake and the libraries the CLI and a native supervisor link;
#    a release build adds OpenSSL and the packaging tools; ./dev test the rest.
lists() { TETHER_SETUP_FOR=$1 bash "$setup" --print-packages | sort; }
quick=$(lists quick) run=$(lists run) all=$(lists "")
[[ -z $(comm -23 <(echo "$quick") <(echo "$run")) ]] || bad "quick needs packages a release build does not"
[[ -z $(comm -23 <(echo "$run") <(echo "$all")) ]] || bad "a release build needs packages ./dev test does not"
for p in libssl-dev libyaml-cpp-dev npm clang podman; do
  grep -qxF "$p" <<<"$quick" && bad "quick installs $p"
done
for p in g++ build-essential cmake ninja-build libprotobuf-dev protobuf-compiler libabsl-dev libzstd-dev; do
  [[ $p == g++ ]] && continue  # (build-essential brings it)
  grep -qxF "$p" <<<"$quick" || bad "quick lacks $p"
done
grep -qxF libssl-dev <<<"$run" || bad "a release build lacks libssl-dev"
grep -qxF clang <<<"$all" || bad "./dev test lacks clang"

((fail == 0)) && echo "setup_packages: all cases passed"
exit $fail
