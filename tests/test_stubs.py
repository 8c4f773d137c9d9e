"""Type stubs of modules built with the binding headers: pybind11-stubgen and nanobind's stubgen turn the example
modules (examples/axpy_pybind11, examples/axpy_nanobind: typed parameters, a typed output; examples/first_kernel:
overloads on dtype alone) into .pyi files, and mypy checks a small user script against them as a user runs it
after README's set-up (only the stubs' folder on MYPYPATH; the package found where it is installed): correct calls
pass, incorrect ones are reported, line by line, and nothing else is.

The casters name a tensor parameter `torch_dlpack_bridge.typing.DLPackTensor` (what a caller passes: a torch.Tensor,
a NumPy array, anything with __dlpack__), a typed one `typing.Annotated[DLPackTensorOf[typing.Literal['float32']],
dict(dtype='float32', ...)]` (the constraints in the metadata, the dtype in the type too, so that overloads on dtype
differ in type), a returned tensor `typing.Any` (the producer's type). pybind11-stubgen and mypy are
test dependencies for this file only (set-up installs them); without them it skips, saying which is missing.
"""
import os
import re
import subprocess
import sys

import pytest

from example_packages import build_first_kernel_once, install_once

pytest.importorskip("pybind11_stubgen", reason="pybind11-stubgen is not installed (the set-up command installs it)")
pytest.importorskip("mypy", reason="mypy is not installed (the set-up command installs it)")

TENSOR = "torch_dlpack_bridge.typing.DLPackTensor"
F32, F64 = (f"torch_dlpack_bridge.typing.DLPackTensorOf[typing.Literal['{d}']]" for d in ("float32", "float64"))
X = f"typing.Annotated[{F32}, dict(dtype='float32', shape=(None,), device='cpu', writable=False)]"
Y = f"typing.Annotated[{F32}, dict(dtype='float32', shape=(None,), order='C', device='cpu', writable=True)]"
RESULT = "typing.Annotated[typing.Any, dict(dtype='float32', order='C')]"
F32_SHOWN = "DLPackTensorOf[Literal['float32']]"  # as mypy names the type

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
                                                       f'expected "{F32_SHOWN}"'),
    ('{m}.axpy_(2.0, x, "y")', "arg-type", f'Argument 3 to "axpy_" has incompatible type "str"; expected "{F32_SHOWN}"'),
    ("{m}.sum(3)", "arg-type", 'Argument 1 to "sum" has incompatible type "int"; expected "DLPackTensor"'),
    ('{m}.scaled_copy("a", x)', "arg-type", 'Argument 1 to "scaled_copy" has incompatible type "str"'),
    ("{m}.scaled_copy(2.0)", "call-arg", 'Missing positional argument "x" in call to "scaled_copy"'),
    ("name: str = {m}.sum(x)", "assignment", 'Incompatible types in assignment (expression has type "float", '
                                             'variable has type "str")'),
    ("{m}.axpy_(2.0, x, y, z=y)", "call-arg", 'Unexpected keyword argument "z" for "axpy_"'),
]
BAD_HEADER = "import torch\n\nimport {m}\nx, y = torch.ones(3), torch.ones(3)\n"  # 4 lines

# examples/first_kernel: scale_ is two overloads, Tensor<float> and Tensor<double>, with `a` a Python float in both.
GOOD_OVERLOADS = """\
import numpy as np
import torch

import {m}

{m}.scale_(torch.ones(3), 2.0)
{m}.scale_(torch.ones(2, 3, dtype=torch.float64), 2)
{m}.scale_(np.ones(3), 0.5)
norm: float = {m}.l2norm(torch.ones(3))
"""
BAD_OVERLOADS = [
    ("{m}.scale_([1.0], 2.0)", "call-overload", 'No overload variant of "scale_" matches argument types '
                                                 '"list[float]", "float"'),
    ('{m}.scale_(x, "2")', "call-overload", 'No overload variant of "scale_" matches argument types "Tensor", "str"'),
    ("name: str = {m}.l2norm(x)", "assignment", 'Incompatible types in assignment (expression has type "float", '
                                                'variable has type "str")'),
]


def stubgen(name, out):
    if name.endswith(("_nanobind", "_nb")):
        # nanobind's stubgen leaves out names with one trailing underscore unless told: torch's in-place convention.
        return [sys.executable, "-m", "nanobind.stubgen", "-m", name, "--include-private",
                "-o", os.path.join(out, name + ".pyi")]
    return [sys.executable, "-m", "pybind11_stubgen", name, "-o", out]


def write_stubs(names, where, out):
    """{module: stub text}: each module's stub written into `out` by its binding library's stub generator."""
    texts = {}
    for name in names:
        rc, output = run(stubgen(name, out), PYTHONPATH=where(name))
        assert rc == 0, output
        with open(os.path.join(out, name + ".pyi")) as f:
            texts[name] = f.read()
    return texts


def run(cmd, **env):
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=dict(os.environ, **env))
    return res.returncode, res.stdout + res.stderr


AXPY = ["axpy_pybind11", "axpy_nanobind"]
FIRST_KERNEL = ["first_kernel", "first_kernel_nb"]


@pytest.fixture(scope="session")
def stubs(tmp_path_factory):
    """(directory, {module: stub text}) of the axpy examples; the directory is what MYPYPATH holds."""
    out = str(tmp_path_factory.mktemp("stubs"))
    return out, write_stubs(AXPY, lambda name: install_once(name, tmp_path_factory), out)


@pytest.fixture(scope="session")
def overload_stubs(tmp_path_factory):
    """The same for examples/first_kernel, built as the tutorial says (pybind11 in its folder, nanobind in build/)."""
    folder = build_first_kernel_once(tmp_path_factory)
    out = str(tmp_path_factory.mktemp("overload_stubs"))
    return out, write_stubs(FIRST_KERNEL, lambda name: str(folder / "build" if name.endswith("_nb") else folder), out)


def run_mypy(stub_dir, files, tmp_path):
    """mypy as a user runs it after README's set-up: no configuration, only the stubs' folder on MYPYPATH (the
    package itself is found where it is installed); returns (exit status, {(file, line, code, message)}, output)."""
    rc, output = run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), "--no-error-summary",
                      "--hide-error-context", *files], MYPYPATH=stub_dir)
    print(output)
    assert "import-not-found" not in output, (
        "mypy cannot find torch_dlpack_bridge (an editable install must be made with --config-settings "
        "editable_mode=compat, as README's set-up does: the default mode's import hook is invisible to mypy)\n"
        + output)
    errors = re.findall(r"^(.+?):(\d+): error: (.*)  \[([\w-]+)\]$", output, re.M)
    return rc, {(os.path.basename(f), int(line), code, message) for f, line, message, code in errors}, output


def check_reported(got, expected, output):
    """Every expected error and nothing else (no error in a stub, none on a correct call)."""
    assert {(f, line, code) for f, line, code, _ in got} == {(f, line, code) for f, line, code, _ in expected}, output
    for f, line, code, message in expected:
        assert any(g[:3] == (f, line, code) and g[3].startswith(message) for g in got), (f, line, message, output)
    assert not [line for line in output.splitlines() if "good_" in line]  # correct calls: no error, no note


@pytest.mark.parametrize("name", AXPY)
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


def test_mypy_accepts_correct_calls_and_reports_incorrect_ones(stubs, tmp_path):
    stub_dir, _ = stubs
    files, expected = [], set()
    for name in AXPY:
        good = tmp_path / f"good_{name}.py"
        good.write_text(GOOD.format(m=name))
        bad = tmp_path / f"bad_{name}.py"
        bad.write_text(BAD_HEADER.format(m=name) + "".join(call.format(m=name) + "\n" for call, _, _ in BAD))
        files += [str(good), str(bad)]
        expected |= {(bad.name, 5 + i, code, message) for i, (_, code, message) in enumerate(BAD)}
    rc, got, output = run_mypy(stub_dir, files, tmp_path)
    check_reported(got, expected, output)
    assert rc == 1


def test_overloads_on_dtype_alone_type_check(overload_stubs, tmp_path):
    # Tensor<float> / Tensor<double> overloads differ in type (DLPackTensorOf[Literal[...]]), not only in metadata:
    # mypy accepts the stubs (no overload-cannot-match) and resolves calls with tensors of either dtype.
    stub_dir, texts = overload_stubs
    files, expected = [], set()
    for name in FIRST_KERNEL:
        plain = texts[name].replace("typing.", "")
        assert plain.count("def scale_(") == 2
        for dtype in (F32, F64):
            assert dtype.replace("typing.", "") in plain, texts[name]
        good = tmp_path / f"good_{name}.py"
        good.write_text(GOOD_OVERLOADS.format(m=name))
        bad = tmp_path / f"bad_{name}.py"
        bad.write_text(BAD_HEADER.format(m=name) + "".join(call.format(m=name) + "\n" for call, _, _ in BAD_OVERLOADS))
        files += [str(good), str(bad)]
        expected |= {(bad.name, 5 + i, code, message) for i, (_, code, message) in enumerate(BAD_OVERLOADS)}
    rc, got, output = run_mypy(stub_dir, files, tmp_path)
    assert "overload-cannot-match" not in output
    check_reported(got, expected, output)
    assert rc == 1
