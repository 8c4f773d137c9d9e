"""What the distributions hold: a wheel built from the sdist where torch cannot be imported (as under pip's
default build isolation) must not carry a table library built against some other torch (the table is then
built at first import for the torch actually installed), and every install carries the sources that build
needs, the consumer headers and the autoload hook.
"""

import os
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CSRC = sorted(name for name in os.listdir(os.path.join(ROOT, "csrc")) if name.endswith((".cpp", ".cc", ".h")))
INCLUDE = os.path.join(ROOT, "torch_dlpack_bridge", "include", "torch_dlpack_bridge")
HEADERS = sorted(name for name in os.listdir(INCLUDE) if name.endswith(".h"))


def run(*command, cwd, env=None):
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    return result


@pytest.fixture(scope="module")
def isolated_wheel(tmp_path_factory):
    """The sdist of this checkout, then a wheel built from it by pip where torch cannot be imported: what pip's
    default build isolation gives, without downloading its build requirements (the tests download nothing
    beyond what the README's step 1 installed, which the build uses here)."""
    pytest.importorskip("build")
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", str(out), ROOT, cwd=ROOT)
    (sdist,) = out.glob("torch_dlpack_bridge-*.tar.gz")
    no_torch = tmp_path_factory.mktemp("no_torch")
    (no_torch / "torch").mkdir()
    (no_torch / "torch" / "__init__.py").write_text("raise ImportError('torch is not in an isolated build')\n")
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w",
        str(out), str(sdist), cwd=str(out), env=dict(os.environ, PYTHONPATH=str(no_torch)))
    (wheel,) = out.glob("torch_dlpack_bridge-*.whl")
    return wheel


def test_isolated_build_from_sdist_ships_no_table_library_but_its_sources(isolated_wheel):
    names = zipfile.ZipFile(isolated_wheel).namelist()
    assert not [n for n in names if n.startswith("torch_dlpack_bridge/_lib/")], \
        "an isolated build cannot see the installed torch: it must not compile a table for any torch"
    assert sorted(n.rsplit("/", 1)[1] for n in names if n.startswith("torch_dlpack_bridge/_csrc/")) == CSRC
    assert {"consumer.h", "tensor.h", "view.h", "pybind11.h"} <= set(HEADERS)  # a listing that found them
    for header in HEADERS:
        assert f"torch_dlpack_bridge/include/torch_dlpack_bridge/{header}" in names
    assert "torch_dlpack_bridge/cmake/torch_dlpack_bridgeConfig.cmake" in names
    assert "torch_dlpack_bridge/check/cases.py" in names  # the conformance checker
    assert "torch_dlpack_bridge/_probe.abi3.so" in names
    assert {"torch_dlpack_bridge_autoload.pth", "torch_dlpack_bridge_autoload.start",
            "_torch_dlpack_bridge_autoload.py"} <= set(names)
    assert not [n for n in names if "autoload/" in n], "the hook ships once, at the top"


def test_wheel_is_tagged_for_every_cpython_from_3_9(isolated_wheel):
    assert "-cp39-abi3-" in isolated_wheel.name
