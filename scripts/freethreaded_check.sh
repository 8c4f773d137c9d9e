#!/usr/bin/env bash
# The package on a free-threaded CPython (3.13t, from scripts/freethreaded_env.sh) with a cp313t torch:
#   1. `pip install --no-build-isolation` of a copy of the tracked sources (what a user's source install does);
#   2. the GIL stays off: after `import torch` (the autoload hook publishes), `import torch_dlpack_bridge`
#      and `python -m torch_dlpack_bridge`, with no PYTHON_GIL in the environment;
#   3. a library built for the other kind of interpreter is refused (both directions, by its build info);
#   4. the test suite with PYTHON_GIL=0 (tvm-ffi has no cp313t wheel: its tests skip).
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

# This interpreter's library, planted where a GIL interpreter looks (sys.abiflags made "" before the import):
# refused by its build info, naming both (tests/test_loader.py checks the reverse from a GIL interpreter).
"$python" - <<'EOF'
import os, shutil, subprocess, sys, tempfile
import torch, torch_dlpack_bridge
from torch_dlpack_bridge import _build, _loader
nightly = "{}.{}.0.dev20261101".format(*_build.version_tuple(torch.__version__))
os.environ[_loader.CACHE_ENV] = cache = tempfile.mkdtemp()
target = _build.TorchTarget(nightly, bool(torch._C._GLIBCXX_USE_CXX11_ABI), False, "/", "gil")
folder = _loader.cache_dir(target, torch_dlpack_bridge.__version__)
os.makedirs(folder, mode=0o700)
shutil.copy(torch_dlpack_bridge.build_info()["library"], os.path.join(folder, target.library_name))
code = (f"import sys; sys.abiflags = ''; import torch; torch.__version__ = {nightly!r}\n"
        "try:\n    import torch_dlpack_bridge\nexcept ImportError as e:\n    print(e)\n")
env = dict(os.environ, TORCH_DLPACK_BRIDGE_AUTOLOAD="0", TORCH_DLPACK_BRIDGE_BUILD="0")
out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout
assert "and free-threaded CPython (cp" in out and "not for the running torch" in out, out
assert "and a CPython with a GIL" in out, out
print("a free-threaded library under a GIL interpreter's name: refused:", out.strip())
shutil.rmtree(cache)
EOF

PYTHON_GIL=0 "$python" -m pytest -q -p no:cacheprovider -x "$repo"/tests/test_publish.py "$repo"/tests/test_export.py \
  "$repo"/tests/test_import.py "$repo"/tests/test_allocator.py "$repo"/tests/test_stream_cpu.py \
  "$repo"/tests/test_threads.py "$repo"/tests/test_loader.py "$repo"/tests/test_autoload.py \
  "$repo"/tests/test_consumer_header.py "$repo"/tests/test_bindings.py 2>&1 | tee "$work/pytest.log" | tail -n 5
summary=$(tail -n 1 "$work/pytest.log")
{
  echo "# Free-threaded CPython check"
  echo
  echo "\`scripts/freethreaded_check.sh $torch_version\` on $(date -u +%Y-%m-%d): $("$python" -VV | head -n 1), torch $torch_version."
  echo
  echo "- GIL after \`import torch\` (hook), \`import torch_dlpack_bridge\`, \`python -m torch_dlpack_bridge\`: disabled"
  echo "- a free-threaded library under a GIL interpreter's name: refused (ImportError naming both)"
  echo "- suite with PYTHON_GIL=0: $summary"
} > "$repo/scripts/freethreaded_check.md"
cat "$repo/scripts/freethreaded_check.md"
