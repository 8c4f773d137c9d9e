"""Type stubs of modules built with the binding headers: pybind11-stubgen and nanobind's stubgen turn the example
modules (examples/axpy_pybind11, examples/axpy_nanobind: typed parameters, a typed output) into .pyi files, and mypy
checks a small user script against them: correct calls pass, incorrect ones are reported, line by line.

The casters name a tensor parameter `torch_dlpack_bridge.typing.DLPackTensor` (what a caller passes: a torch.Tensor,
a NumPy array, anything with __dlpack__), a typed one `typing.Annotated[DLPackTensor, dict(dtype='float32', ...)]`
(the constraints in the metadata), a returned tensor `typing.Any` (the producer's type). pybind11-stubgen and mypy are
test dependencies for this file only (set-up installs them); without them it skips, saying which is missing.
"""
import os
import re
import subprocess
import sys
import sysconfig

import pytest

import torch_dlpack_bridge
from example_packages import install_once

pytest.importorskip("pybind11_stubgen", reason="pybind11-stubgen is not installed (the set-up command installs it)")
pytest.importorskip("mypy", reason="mypy is not installed (the set-up command installs it)")

TENSOR = "torch_dlpack_bridge.typing.DLPackTensor"
X = f"typing.Annotated[{TENSOR}, dict(dtype='float32', shape=(None,), device='cpu', writable=False)]"
Y = f"typing.Annotated[{TENSOR}, dict(dtype='float32', shape=(None,), order='C', device='cpu', writable=True)]"
RESULT = "typing.Annotated[typing.Any, dict(dtype='float32', order='C')]"

# A user's script: every call here is correct, and mypy must accept it.
GOOD = """\
import numpy as np
import torch

import {m}

x, y = torch.arange(3.0), torch.ones(3)
{m}.axpy_(2.0, x, y)
{m}.axpy_(2, np.ones(3, dtype=np.float32), y)
{m}.axpy_(a=1.5, x=x, y=y)
out = {m}.scaled_copy(0.5, x)
print(out.sum())
total: float = {m}.sum(x) + {m}.sum(np.ones(3, dtype=np.float32))
"""

# Incorrect calls, one per line from line 5 on, each with the error mypy must report there.
BAD = [
    ("{m}.axpy_(2.0, [1.0, 2.0, 3.0], y)", "arg-type", 'Argument 2 to "axpy_" has incompatible type "list[float]"; '
                                                       'expected "DLPackTensor"'),
    ('{m}.axpy_(2.0, x, "y")', "arg-type", 'Argument 3 to "axpy_" has incompatible type "str"; expected "DLPackTensor"'),
    ("{m}.sum(3)", "arg-type", 'Argument 1 to "sum" has incompatible type "int"; expected "DLPackTensor"'),
    ('{m}.scaled_copy("a", x)', "arg-type", 'Argument 1 to "scaled_copy" has incompatible type "str"'),
    ("{m}.scaled_copy(2.0)", "call-arg", 'Missing positional argument "x" in call to "scaled_copy"'),
    ("name: str = {m}.sum(x)", "assignment", 'Incompatible types in assignment (expression has type "float", '
                                             'variable has type "str")'),
    ("{m}.axpy_(2.0, x, y, z=y)", "call-arg", 'Unexpected keyword argument "z" for "axpy_"'),
]
BAD_HEADER = "import torch\n\nimport {m}\nx, y = torch.ones(3), torch.ones(3)\n"  # 4 lines

STUBGEN = {
    "axpy_pybind11": lambda out: [sys.executable, "-m", "pybind11_stubgen", "axpy_pybind11", "-o", out],
    # nanobind's stubgen leaves out names with one trailing underscore unless told: torch's in-place convention.
    "axpy_nanobind": lambda out: [sys.executable, "-m", "nanobind.stubgen", "-m", "axpy_nanobind", "--include-private",
                                  "-o", os.path.join(out, "axpy_nanobind.pyi")],
}


def run(cmd, **env):
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=dict(os.environ, **env))
    return res.returncode, res.stdout + res.stderr


@pytest.fixture(scope="session")
def stubs(tmp_path_factory):
    """{module: stub text}, written into one directory (the first entry of mypy's path)."""
    out = str(tmp_path_factory.mktemp("stubs"))
    texts = {}
    for name, cmd in STUBGEN.items():
        rc, output = run(cmd(out), PYTHONPATH=install_once(name, tmp_path_factory))
        assert rc == 0, output
        with open(os.path.join(out, name + ".pyi")) as f:
            texts[name] = f.read()
    return out, texts


@pytest.mark.parametrize("name", list(STUBGEN))
def test_stub_types_tensors_as_what_a_caller_passes(stubs, name):
    text = stubs[1][name]
    print(text)
    # nanobind's stubgen imports typing's names; pybind11-stubgen keeps them qualified.
    plain = text.replace("typing.", "").replace("from typing import Annotated, Any\n", "")
    for expected in (X, Y, RESULT):
        assert expected.replace("typing.", "") in plain
    assert re.search(rf"def sum\(x: {re.escape(TENSOR)}\) -> float", text)
    assert "import torch_dlpack_bridge.typing" in text
    assert "tensor[" not in text  # not the old, invalid notation


def mypy_path(stub_dir):
    """The stubs, then (for an editable install, which mypy cannot see through its import hook) this checkout."""
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(torch_dlpack_bridge.__file__)))
    site = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    return os.pathsep.join([stub_dir] + ([] if package_parent in site else [package_parent]))


def test_mypy_accepts_correct_calls_and_reports_incorrect_ones(stubs, tmp_path):
    stub_dir, _ = stubs
    files, expected = [], set()
    for name in STUBGEN:
        good = tmp_path / f"good_{name}.py"
        good.write_text(GOOD.format(m=name))
        bad = tmp_path / f"bad_{name}.py"
        bad.write_text(BAD_HEADER.format(m=name) + "".join(call.format(m=name) + "\n" for call, _, _ in BAD))
        files += [str(good), str(bad)]
        expected |= {(bad.name, 5 + i, code, message) for i, (_, code, message) in enumerate(BAD)}
    config = tmp_path / "mypy.ini"
    # As for an installed package (mypy reports no errors inside site-packages): this package's own modules are
    # read but not reported on; the stubs and the scripts are.
    config.write_text("[mypy]\n[mypy-torch_dlpack_bridge.*]\nignore_errors = True\n")
    rc, output = run([sys.executable, "-m", "mypy", "--config-file", str(config), "--cache-dir",
                      str(tmp_path / "cache"), "--no-error-summary", "--hide-error-context", *files],
                     MYPYPATH=mypy_path(stub_dir))
    print(output)
    errors = re.findall(r"^(.+?):(\d+): error: (.*)  \[([\w-]+)\]$", output, re.M)
    assert errors, output
    got = {(os.path.basename(f), int(line), code, message) for f, line, message, code in errors}
    assert {(f, line, code) for f, line, code, _ in got} == {(f, line, code) for f, line, code, _ in expected}
    for f, line, code, message in expected:
        assert any(g[:3] == (f, line, code) and g[3].startswith(message) for g in got), (f, line, message, output)
    assert not [line for line in output.splitlines() if "good_" in line]  # correct calls: no error, no note
    assert rc == 1
