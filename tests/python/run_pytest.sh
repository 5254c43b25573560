#!/usr/bin/env bash
# ctest entry point: run_pytest.sh LIBTETHER_C VENV_DIR [--install-only]
# Installs the Python package (python/) into a venv beside the build, the
# way the README says (`pip install ./python`, no network, Debian's cffi and
# pytest through --system-site-packages), with the library this build made,
# then runs its pytest suite from outside the source tree (so the installed
# package is the one imported). Exit 77 (skipped) without Debian's python3.
set -euo pipefail
lib=$1 venv=$2
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
py=/usr/bin/python3
if ! [[ -x $py ]] || ! $py -c 'import cffi, pytest, pytest_asyncio, venv' 2>/dev/null; then
  echo "Debian's python3 with cffi, pytest and pytest-asyncio is missing (packaging/setup.sh installs them): skipped"
  exit 77
fi
[[ -x $venv/bin/python ]] || $py -m venv --system-site-packages "$venv"
TETHER_LIBRARY=$lib "$venv/bin/pip" install --quiet --no-index --force-reinstall --no-deps "$root/python"
# pip builds in the tree: leave it clean.
rm -rf "$root/python/build" "$root/python/tether.egg-info"
[[ ${3:-} != --install-only ]] || exit 0
cd "$venv"
exec "$venv/bin/python" -m pytest -p no:cacheprovider -c "$root/python/pytest.ini" --rootdir "$root/python" \
  "$root/python/tests" -q
