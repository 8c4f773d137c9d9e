#!/usr/bin/env bash
# The package on a free-threaded CPython (3.13t, from scripts/freethreaded_env.sh) with a cp313t torch:
#   1. `pip install --no-build-isolation` of a copy of the tracked sources (what a user's source install does);
#   2. the GIL stays off: after `import torch` (the autoload hook publishes), `import torch_dlpack_bridge`
#      and `python -m torch_dlpack_bridge`, with no PYTHON_GIL in the environment;
#   3. the test suite with PYTHON_GIL=0 (tvm-ffi has no cp313t wheel: its tests skip); among its tests, a
#      library of the other kind of interpreter is refused (tests/test_loader.py, run here and on a GIL
#      interpreter: both directions), and threads race through export, import and allocation.
#
#   scripts/freethreaded_check.sh [torch version]     # default 2.12.0; writes scripts/freethreaded_check.md
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
torch_version=${1:-2.12.0}
python=$(scripts/freethreaded_env.sh "$torch_version")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/src"
git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$work/src"
"$python" -m pip uninstall -y -q torch_dlpack_bridge 2>/dev/null || true
"$python" -m pip install -q --no-build-isolation "$work/src"
export TORCH_DLPACK_BRIDGE_CACHE=$work/cache
unset PYTHON_GIL
cd "$work"  # outside the checkout: the installed package is what gets imported

gil_state='import sys; print("GIL enabled" if sys._is_gil_enabled() else "GIL disabled")'
"$python" -W error::RuntimeWarning -c "import torch, sys
assert hasattr(torch.Tensor, '__dlpack_c_exchange_api__') and 'torch_dlpack_bridge' in sys.modules, 'not published'
import torch_dlpack_bridge
print(torch_dlpack_bridge.build_info())
assert torch_dlpack_bridge.build_info()['python_abi'].endswith('t')
assert not sys._is_gil_enabled(), 'the GIL came back'
print('import torch with the hook: GIL disabled')"
"$python" -W error::RuntimeWarning -c "import runpy, sys
try:
    runpy.run_module('torch_dlpack_bridge', run_name='__main__')
except SystemExit as e:
    assert not e.code, e.code
assert not sys._is_gil_enabled(), 'the GIL came back'
print('python -m torch_dlpack_bridge: GIL disabled')"

log=${TMPDIR:-/tmp}/tdb-freethreaded-pytest.log
PYTHON_GIL=0 "$python" -m pytest -q -p no:cacheprovider "$repo"/tests/test_publish.py "$repo"/tests/test_export.py \
  "$repo"/tests/test_import.py "$repo"/tests/test_allocator.py "$repo"/tests/test_stream_cpu.py \
  "$repo"/tests/test_threads.py "$repo"/tests/test_loader.py "$repo"/tests/test_autoload.py \
  "$repo"/tests/test_consumer_header.py "$repo"/tests/test_bindings.py 2>&1 | tee "$log" | tail -n 5
summary=$(tail -n 1 "$log")
{
  echo "# Free-threaded CPython check"
  echo
  echo "\`scripts/freethreaded_check.sh $torch_version\` on $(date -u +%Y-%m-%d): $("$python" -VV | head -n 1), torch $torch_version."
  echo
  echo "- GIL after \`import torch\` (hook), \`import torch_dlpack_bridge\`, \`python -m torch_dlpack_bridge\`: disabled"
  echo "- suite with PYTHON_GIL=0: $summary"
} > "$repo/scripts/freethreaded_check.md"
cat "$repo/scripts/freethreaded_check.md"
