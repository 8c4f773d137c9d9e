"""examples/rms_norm, the one complete example kernel (an in-place write, an optional typed parameter, a returned
tensor, tdb::explain_refusals), built both ways a user builds it: setuptools (`pip install --no-build-isolation`)
and the docs' CMake recipe (its CMakeLists.txt), each called from Python with torch as the oracle.

CI (`.ci/run`, CI=true) has cmake: there a missing cmake fails the CMake build's tests instead of skipping them.
"""
import glob
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch

from example_packages import cmake_build_once, install_once, load_copy

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(REPO, "examples", "rms_norm")


@pytest.fixture(scope="module", params=["setuptools", "cmake"])
def built(request, tmp_path_factory):
    """The folder that holds the module, built one way."""
    if request.param == "setuptools":
        return install_once("rms_norm", tmp_path_factory)
    if shutil.which("cmake") is None and os.environ.get("CI"):
        pytest.fail("cmake is not installed: CI must build the example with the docs' CMake recipe")
    return cmake_build_once("rms_norm", tmp_path_factory)


@pytest.fixture(scope="module")
def ext(built):
    return load_copy(built, "rms_norm")


def test_session_runs_against_each_build(built):
    """session.txt, which the kernel author's guide shows, prints what it says (the refusal's signature elided)."""
    res = subprocess.run([sys.executable, "-m", "doctest", "-o", "ELLIPSIS", os.path.join(EXAMPLE, "session.txt")],
                         capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=built))
    assert res.returncode == 0 and res.stdout == "", res.stdout + res.stderr


def oracle(x, weight=None, eps=1e-6):
    """torch's answer, in float64: (the normalized rows, the RMS of each row)."""
    rms = torch.sqrt(x.double().pow(2).mean(-1) + eps)
    out = x.double() / rms[:, None]
    if weight is not None:
        out = out * weight.double()
    return out, rms


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (64, 129)])
@pytest.mark.parametrize("with_weight", [False, True])
def test_rms_norm_matches_torch(ext, shape, with_weight):
    torch.manual_seed(0)
    x = torch.randn(*shape) * 3
    weight = torch.randn(shape[1] * 2)[::2] if with_weight else None  # any stride: a read parameter
    expected, expected_rms = oracle(x, weight)
    pointer, version = x.data_ptr(), x._version
    rms = ext.rms_norm_(x, weight) if with_weight else ext.rms_norm_(x)
    # the returned tensor: a new float32 torch.Tensor from torch's allocator, one value per row
    assert type(rms) is torch.Tensor and rms.dtype == torch.float32 and rms.shape == (shape[0],)
    assert rms.is_contiguous() and rms.data_ptr() != x.data_ptr()
    torch.testing.assert_close(rms.double(), expected_rms, rtol=1e-6, atol=1e-6)
    # the in-place write: x itself, its version bumped as torch's own in-place operations do
    assert x.data_ptr() == pointer and x._version == version + 1
    torch.testing.assert_close(x.double(), expected, rtol=1e-5, atol=1e-6)


def test_rms_norm_keywords_and_eps(ext):
    x = torch.zeros(2, 4)
    rms = ext.rms_norm_(x=x, weight=None, eps=0.25)
    assert rms.tolist() == [0.5, 0.5] and x.tolist() == [[0.0] * 4] * 2


def test_rms_norm_writes_a_row_major_view_of_a_larger_tensor(ext):
    base = torch.randn(6, 4)
    rows = base[2:5]  # row-major, offset: written where it lies in base
    expected, _ = oracle(rows)
    before = base.clone()
    ext.rms_norm_(rows)
    torch.testing.assert_close(base[2:5].double(), expected, rtol=1e-5, atol=1e-6)
    assert torch.equal(base[:2], before[:2]) and torch.equal(base[5:], before[5:])


def test_rms_norm_of_no_rows_returns_an_empty_tensor(ext):
    rms = ext.rms_norm_(torch.empty(0, 3))
    assert type(rms) is torch.Tensor and rms.shape == (0,)


def refusal(ext, *args):
    with pytest.raises(TypeError, match="incompatible function arguments") as info:
        ext.rms_norm_(*args)
    return str(info.value).splitlines()[-1]


@pytest.mark.parametrize("make_args,reason", [
    (lambda: (torch.ones(2, 3, dtype=torch.float64),), "argument 'x': expected dtype float32, got float64"),
    (lambda: (torch.ones(3),), "argument 'x': expected 2 dimension(s), got 1"),
    (lambda: (torch.ones(3, 2).t(),),
     "argument 'x': expected a contiguous tensor, got strides [1, 2] for shape [2, 3]"),
    (lambda: (torch.ones(1, 3).expand(2, 3),),
     "argument 'x': expected a contiguous tensor, got strides [0, 1] for shape [2, 3]"),
    (lambda: (torch.ones(2, 3), torch.ones(3, dtype=torch.float16)),
     "argument 'weight': expected dtype float32, got float16"),
])
def test_a_refused_tensor_is_left_as_it_was_and_the_error_says_why(ext, make_args, reason):
    args = make_args()
    before = [a.clone() for a in args]
    line = refusal(ext, *args)
    # tdb::explain_refusals(m), the module's last line, adds the reason to pybind11's TypeError
    assert line == "    overload 1: " + reason
    assert all(torch.equal(a, b) for a, b in zip(args, before))


def test_a_weight_of_the_wrong_length_raises_before_any_write(ext):
    x = torch.randn(2, 3)
    before = x.clone()
    with pytest.raises(ValueError, match=re.escape("argument 'weight': expected shape [3], got [4]")):
        ext.rms_norm_(x, torch.ones(4))
    assert torch.equal(x, before)


def test_a_leaf_that_requires_grad_is_refused_as_torch_refuses_it(ext):
    x = torch.ones(2, 3, requires_grad=True)
    assert refusal(ext, x) == ("    overload 1: argument 'x': a leaf Variable that requires grad is being used in an"
                               " in-place operation (the kernel writes this parameter): call it under torch.no_grad(),"
                               " or pass a tensor that does not require grad")
    with torch.no_grad():  # an optimizer's step: taken
        ext.rms_norm_(x)
    assert torch.allclose(x.detach(), torch.ones(2, 3), atol=1e-5)


# The one CMake recipe: examples/rms_norm/CMakeLists.txt, which both guides show; every example's CMakeLists.txt is
# that file with its own names (nanobind's, where it binds with nanobind).
def as_pybind11(text, module):
    text = text.replace(module, "rms_norm").replace(" NB_STATIC", "")
    return text.replace("nanobind --cmake_dir", "pybind11 --cmakedir").replace("nanobind", "pybind11")


def test_every_example_builds_with_the_one_cmake_recipe():
    with open(os.path.join(EXAMPLE, "CMakeLists.txt")) as f:
        recipe = f.read()
    assert "-m torch_dlpack_bridge --cmake-dir" in recipe and "torch_dlpack_bridge::headers" in recipe
    found = sorted(glob.glob(os.path.join(REPO, "examples", "*", "CMakeLists.txt")))
    assert len(found) >= 4, found
    for path in found:
        with open(path) as f:
            text = f.read()
        module = re.search(r"^project\((\w+) ", text, re.M).group(1)
        body = as_pybind11(text[text.index("cmake_minimum_required"):], module)
        body = body.replace("install(TARGETS rms_norm LIBRARY DESTINATION .)\n", "")  # scikit-build-core's wheel
        assert body == recipe[recipe.index("cmake_minimum_required"):], path


def test_both_guides_show_the_recipe_and_its_command():
    command = 'cmake -S . -B build -DPython_EXECUTABLE="$(command -v python)"'
    with open(os.path.join(REPO, "docs", "guides", "kernel-authors.md")) as f:
        guide = f.read()
    with open(os.path.join(REPO, "docs", "guides", "first-kernel.md")) as f:
        first = f.read()
    with open(os.path.join(REPO, "examples", "first_kernel", "build.sh")) as f:
        build = f.read()
    assert "```{literalinclude} ../../examples/rms_norm/CMakeLists.txt\n" in guide and command in guide
    assert "```{literalinclude} ../../examples/rms_norm/rms_norm.cpp\n" in guide
    assert "```{literalinclude} ../../examples/rms_norm/session.txt\n" in guide
    assert "```{literalinclude} ../../examples/first_kernel/CMakeLists.txt\n" in first and command in build
    assert "(kernel-authors.md#cmake)" in first and "(kernel-authors.md#a-complete-kernel)" in first
    # one recipe: no page tells CMake where the configs are on its command line any more
    assert "-Dtorch_dlpack_bridge_DIR" not in guide + first + build
