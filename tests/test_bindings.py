"""The pybind11 and nanobind flavours of the axpy example (examples/axpy_pybind11, examples/axpy_nanobind),
each built once per session with its own `pip install`, tested with torch tensors and NumPy arrays.

They bind the same three functions through torch_dlpack_bridge/pybind11.h and nanobind.h (type casters for
tdb::TensorView and tdb::ManagedTensor); the nanobind one is built with CMake through scikit-build-core,
finding the headers with find_package(torch_dlpack_bridge CONFIG). tests/bindings_overloads_*.cpp (compiled
here, twice per library, with default visibility) pin overload resolution around refused tensors and the
error translator of every module.
"""
import gc
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import weakref

import numpy as np
import pytest
import torch

import torch_dlpack_bridge
from example_packages import EXAMPLES, cmake_build_once, import_from, install_once, load_copy
from offset_producer import Offset
from producers import LegacyOnly

FLAVOURS = {"pybind11": "axpy_pybind11", "nanobind": "axpy_nanobind"}


# The examples as a user builds them: each with pip (setuptools for pybind11, scikit-build-core's CMake for nanobind),
# and the pybind11 one with CMake too (its CMakeLists.txt: the CMake route the guide shows for pybind11).
@pytest.fixture(scope="session", params=[*FLAVOURS, "pybind11-cmake"])
def ext(request, tmp_path_factory):
    if request.param == "pybind11-cmake":
        return load_copy(cmake_build_once("axpy_pybind11", tmp_path_factory), "axpy_pybind11")
    name = FLAVOURS[request.param]
    return import_from(install_once(name, tmp_path_factory), name)


# ----------------------------------------------------------------------------- axpy_ (TensorView arguments)


@pytest.mark.parametrize("n", [0, 1, 7, 1000])
@pytest.mark.parametrize("a", [0.0, -2.5, 3])
def test_axpy_matches_torch(ext, n, a):
    g = torch.Generator().manual_seed(n)
    x, y = torch.randn(n, generator=g), torch.randn(n, generator=g)
    expected = y + a * x
    assert ext.axpy_(a, x, y) is None
    torch.testing.assert_close(y, expected)


@pytest.mark.parametrize("make_x", [lambda b: b[::3], lambda b: b[:6].flip(0), lambda b: b[5:6].expand(6),
                                    lambda b: b.reshape(6, 3)[:, 1]], ids=["step", "negative", "zero", "column"])
def test_axpy_strided_torch_x(ext, make_x):
    x, y = make_x(torch.randn(18)), torch.randn(6)
    expected = y + 0.5 * x
    ext.axpy_(0.5, x, y)
    torch.testing.assert_close(y, expected)


def test_axpy_writes_only_the_view_and_accepts_subclasses(ext):
    class Sub(torch.Tensor):
        pass

    big = torch.zeros(10)
    ext.axpy_(1.0, torch.nn.Parameter(torch.ones(4)), big[3:7].as_subclass(Sub))
    assert big.tolist() == [0, 0, 0, 1, 1, 1, 1, 0, 0, 0]
    y = torch.arange(3.0)
    ext.axpy_(2.0, y, y)  # x may be y
    assert y.tolist() == [0.0, 3.0, 6.0]


@pytest.mark.parametrize("make_x", [lambda b: b[:5], lambda b: b[::2], lambda b: b[9::-2]],
                         ids=["contiguous", "step", "negative"])
@pytest.mark.parametrize("wrap", [lambda a: a, LegacyOnly], ids=["numpy", "legacy_producer"])
def test_axpy_numpy_arrays(ext, make_x, wrap):
    x = make_x(np.arange(10, dtype=np.float32))
    y = np.ones(5, dtype=np.float32)
    expected = y + 2.0 * x
    refs = sys.getrefcount(x), sys.getrefcount(y)
    ext.axpy_(2.0, wrap(x), wrap(y))
    np.testing.assert_allclose(y, expected)
    assert (sys.getrefcount(x), sys.getrefcount(y)) == refs  # the exports ended with the call


def test_axpy_mixes_producers(ext):
    x, y = torch.arange(4.0), np.zeros(4, dtype=np.float32)
    ext.axpy_(1.0, x, y)
    assert y.tolist() == [0.0, 1.0, 2.0, 3.0]
    ext.axpy_(1.0, y, x)
    assert x.tolist() == [0.0, 2.0, 4.0, 6.0]


# ----------------------------------------------------------------------------- scaled_copy (a typed OwnedTensor result)


@pytest.mark.parametrize("make_x", [lambda: torch.randn(5), lambda: torch.tensor(2.5), lambda: torch.empty(0, 3),
                                    lambda: torch.randn(2, 3, 4).permute(2, 0, 1), lambda: torch.randn(4, 6)[1:, ::2]],
                         ids=["vector", "scalar", "empty", "permuted", "sliced"])
def test_scaled_copy_returns_a_torch_tensor(ext, make_x):
    x = make_x()
    out = ext.scaled_copy(-1.5, x)
    assert type(out) is torch.Tensor and out.dtype == torch.float32 and out.shape == x.shape and out.is_contiguous()
    torch.testing.assert_close(out, -1.5 * x)


def test_scaled_copy_result_is_owned_by_python(ext):
    x = torch.arange(6.0)
    refs = sys.getrefcount(x)
    for _ in range(200):
        ext.scaled_copy(3.0, x)
    assert sys.getrefcount(x) == refs
    out = ext.scaled_copy(2.0, x)
    assert sys.getrefcount(out) == 2  # only `out` (and getrefcount's argument) refer to it
    assert out.data_ptr() != x.data_ptr()
    ref = weakref.ref(out)
    del out
    gc.collect()
    assert ref() is None


def test_scaled_copy_of_a_numpy_array_is_refused(ext):
    # NumPy publishes no exchange table, so it has no allocator to make the result with.
    with pytest.raises(TypeError, match="^output: cannot allocate like argument 'x': its producer has no DLPack "
                                        "exchange table"):
        ext.scaled_copy(2.0, np.ones(3, dtype=np.float32))


# ----------------------------------------------------------------------------- sum (ManagedTensor argument)


@pytest.mark.parametrize("make_x", [lambda: torch.arange(10.0), lambda: torch.arange(24.0).reshape(4, 6)[:, ::2].t(),
                                    lambda: np.arange(10, dtype=np.float32), lambda: LegacyOnly(np.ones((3, 3), np.float32)),
                                    lambda: torch.tensor(4.0), lambda: np.arange(12, dtype=np.float32).reshape(3, 4)[::-1]],
                         ids=["torch", "torch_strided", "numpy", "legacy", "scalar", "numpy_negative"])
def test_sum_of_any_producer(ext, make_x):
    x = make_x()
    values = x.array if isinstance(x, LegacyOnly) else x
    refs = sys.getrefcount(values)
    assert ext.sum(x) == pytest.approx(float(np.asarray(values).sum()))
    assert sys.getrefcount(values) == refs  # the owning export was dropped after the call


def test_producers_byte_offset_is_honoured(ext):
    # Offset exports data = base, byte_offset = 4 elements: a caster that ignored byte_offset would read base[:4].
    base = np.arange(12, dtype=np.float32)
    assert ext.sum(Offset(base[4:], 4)) == float(base[4:].sum())  # ManagedTensor
    ybase = np.zeros(8, dtype=np.float32)
    ext.axpy_(2.0, Offset(base[4:8], 4), Offset(ybase[4:], 4))  # TensorView
    assert ybase.tolist() == [0.0] * 4 + [8.0, 10.0, 12.0, 14.0]


# ----------------------------------------------------------------------------- errors


# The parameters' refusals are the binding library's TypeError (docs/guides/kernel-authors.md, errors); checks in
# the functions' bodies raise their own type, naming the argument.
INCOMPATIBLE = r"\(\): incompatible function arguments"


@pytest.mark.parametrize("fn,args,exc,msg", [
    ("axpy_", (1.0, torch.ones(3, dtype=torch.float64), torch.ones(3)), TypeError, "axpy_" + INCOMPATIBLE),
    ("axpy_", (1.0, torch.ones(3), np.ones(3, dtype=np.int32)), TypeError, "axpy_" + INCOMPATIBLE),
    ("axpy_", (1.0, torch.ones(3, 1), torch.ones(3)), TypeError, "axpy_" + INCOMPATIBLE),
    ("axpy_", (1.0, torch.ones(3), torch.ones(4)), ValueError, r"argument 'y': expected shape \[3\] \(the shape of 'x'\)"),
    ("axpy_", (1.0, torch.ones(3), torch.ones(6)[::2]), TypeError, "axpy_" + INCOMPATIBLE),
    ("axpy_", (1.0, torch.ones(3), "read_only"), TypeError, "axpy_" + INCOMPATIBLE),
    ("axpy_", (1.0, torch.ones(2, device="meta"), torch.ones(2)), TypeError, "axpy_" + INCOMPATIBLE),
    ("sum", (torch.ones(2, dtype=torch.float16),), TypeError, "^argument 'x': expected dtype float32, got float16$"),
    ("sum", (torch.ones(2, dtype=torch.complex64).conj(),), TypeError, "sum" + INCOMPATIBLE),
    ("scaled_copy", (1.0, np.ones(2)), TypeError, "scaled_copy" + INCOMPATIBLE),
])
def test_errors_have_their_python_type(ext, fn, args, exc, msg):
    args = tuple(np.ones(3, dtype=np.float32) if isinstance(a, str) else a for a in args)
    for a in args:
        if isinstance(a, np.ndarray) and a.shape == (3,) and a.dtype == np.float32:
            a.flags.writeable = False
    before = [np.array(a, copy=True) for a in args if isinstance(a, np.ndarray)]
    with pytest.raises(exc, match=msg) as info:
        getattr(ext, fn)(*args)
    assert type(info.value) is exc
    after = [a for a in args if isinstance(a, np.ndarray)]
    assert all(np.array_equal(b, a) for b, a in zip(before, after))  # nothing written on failure


def test_a_parameters_error_names_the_parameters(ext):
    # The binding library names them from py::arg / nb::arg: no tdb::named needed for these errors.
    with pytest.raises(TypeError, match="axpy_" + INCOMPATIBLE) as info:
        ext.axpy_(1.0, torch.ones(3, dtype=torch.float64), torch.ones(3))
    t = "typing.Annotated[torch_dlpack_bridge.typing.DLPackTensorOf[typing.Literal['float32']], dict(dtype='float32'"
    assert f"x: {t}" in str(info.value) and f"y: {t}" in str(info.value)


def test_a_refused_tensor_gets_the_reason_that_readme_shows(ext):
    """The examples end with tdb::explain_refusals(m): their TypeError ends with the reason README.md shows."""
    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")) as f:
        readme = f.read()
    shown = re.search(r"```text\n(Why the tensor arguments were refused:\n.*?)\n```", readme, re.S).group(1)
    assert "`axpy_(2.0, torch.ones(3, dtype=torch.float16), torch.ones(3))`" in readme
    with pytest.raises(TypeError, match="axpy_" + INCOMPATIBLE) as info:
        ext.axpy_(2.0, torch.ones(3, dtype=torch.float16), torch.ones(3))
    assert str(info.value).endswith("\n\n" + shown)


@pytest.mark.parametrize("bad", [[1.0, 2.0], None, 3.0, "tensor"])
def test_non_tensor_gives_the_signature_type_error(ext, bad):
    with pytest.raises(TypeError, match=r"incompatible function arguments") as info:
        ext.axpy_(1.0, bad, torch.ones(2))
    # the accepted signature is listed, with the typed parameters' constraints (tdb::Tensor<...>)
    t = "torch_dlpack_bridge.typing.DLPackTensorOf[typing.Literal['float32']]"
    assert (f"x: typing.Annotated[{t}, dict(dtype='float32', shape=(None,), device='cpu', writable=False)], "
            f"y: typing.Annotated[{t}, dict(dtype='float32', shape=(None,), order='C', device='cpu', writable=True)]"
            ) in str(info.value)
    with pytest.raises(TypeError, match=r"sum\(\): incompatible function arguments"):
        ext.sum(bad)


def test_failures_release_everything(ext):
    x, y = torch.ones(3), torch.ones(4)
    arr = np.ones(4, dtype=np.float32)
    refs = [sys.getrefcount(o) for o in (x, y, arr)]
    for _ in range(100):
        for call in (lambda: ext.axpy_(1.0, x, y), lambda: ext.axpy_(1.0, arr, x), lambda: ext.sum(y.double()),
                     lambda: ext.scaled_copy(1.0, arr)):
            with pytest.raises((TypeError, ValueError)):
                call()
    assert [sys.getrefcount(o) for o in (x, y, arr)] == refs


# ----------------------------------------------------------------------------- the headers themselves

WARNINGS = ["-Wall", "-Wextra", "-Werror", "-Wno-missing-field-initializers"]


def binding_includes(flavour):
    if flavour == "pybind11":
        import pybind11

        return [pybind11.get_include()]
    import nanobind

    return [nanobind.include_dir(), os.path.join(os.path.dirname(nanobind.include_dir()), "ext", "robin_map", "include")]


@pytest.mark.parametrize("flavour", list(FLAVOURS))
def test_example_compiles_without_warnings(flavour):
    # The example builds do not turn warnings into errors (a user's flags are theirs); this does, for the headers.
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler on PATH")
    source = os.path.join(EXAMPLES, FLAVOURS[flavour], FLAVOURS[flavour] + ".cpp")
    cmd = [cxx, "-std=c++17", "-fsyntax-only", *WARNINGS, f"-I{sysconfig.get_paths()['include']}",
           f"-I{torch_dlpack_bridge.get_include()}"] + [f"-isystem{d}" for d in binding_includes(flavour)] + [source]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr


# ----------------------------------------------------------------------------- overloads and the error translator
# tests/bindings_overloads_{pybind11,nanobind}.cpp, each compiled twice (modules _a and _b, loaded in one process)
# with the compiler's default visibility, as setuptools' default flags leave it (the examples use
# -fvisibility=hidden); each nanobind module has its own libnanobind and NB_DOMAIN (so its own translator list).


def compile_overloads(flavour, name, workdir):
    """Starts compiling bindings_overloads_<flavour>.cpp as module `name` in workdir; returns the process."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = os.path.join(str(workdir), name + sysconfig.get_config_var("EXT_SUFFIX"))
    # No -Werror here: nanobind's own sources are compiled too (the headers' warnings are checked above).
    cmd = [shutil.which("c++") or shutil.which("g++"), "-std=c++17", "-O0", "-fPIC", "-shared",
           f"-DTDB_MODULE={name}", f"-I{sysconfig.get_paths()['include']}",
           f"-I{os.path.join(os.path.dirname(here), 'torch_dlpack_bridge', 'include')}",
           *[f"-isystem{d}" for d in binding_includes(flavour)],
           os.path.join(here, f"bindings_overloads_{flavour}.cpp")]
    if flavour == "nanobind":
        import nanobind

        cmd += [f"-DNB_DOMAIN={name}", os.path.join(os.path.dirname(nanobind.include_dir()), "src", "nb_combined.cpp")]
    return subprocess.Popen(cmd + ["-o", out], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture(scope="session", params=list(FLAVOURS))
def overloads(request, tmp_path_factory):
    """(module_a, module_b): the same test module built twice for one binding library."""
    if not (shutil.which("c++") or shutil.which("g++")):
        pytest.skip("no C++ compiler on PATH")
    workdir = tmp_path_factory.mktemp(f"overloads_{request.param}")
    names = [f"tdb_overloads_{request.param}_{x}" for x in "ab"]
    for proc in [compile_overloads(request.param, name, workdir) for name in names]:
        output = proc.communicate(timeout=600)[0]
        assert proc.returncode == 0, output
    return tuple(import_from(str(workdir), name) for name in names)


def refused_tensors():
    """Tensors their producers refuse to export, with the BufferError message each raises."""
    return {
        "conj": (torch.ones(2, dtype=torch.complex64).conj(), "conjugate bit"),
        "sparse": (torch.ones(2).to_sparse(), "layout Sparse"),
        "meta": (torch.ones(2, device="meta"), "meta"),
        "numpy_strings": (np.array(["a", "b"]), "DLPack only supports"),
    }


class TensorSubclass(torch.Tensor):
    pass


class ConjLike:
    """A tensor its producer refuses to export (as a conj view's does) that is also an int by conversion."""

    def __init__(self, value):
        self.value = value

    def __dlpack__(self, **kwargs):
        raise BufferError("refused")

    def __dlpack_device__(self):
        return (1, 0)

    def __index__(self):
        return self.value


@pytest.mark.parametrize("cls", [torch.Tensor, TensorSubclass, torch.nn.Parameter, np.ndarray])
def test_a_class_is_not_a_tensor(overloads, cls):
    # torch.Tensor has __dlpack__ and a table as class attributes; the class itself goes to the next overload.
    m = overloads[0]
    assert m.view_or_object(cls) == "object" and m.managed_or_object(cls) == "object"
    with pytest.raises(TypeError, match=r"view\(\): incompatible function arguments"):
        m.view(cls)


@pytest.mark.parametrize("case", list(refused_tensors()))
def test_a_refused_tensor_goes_to_the_next_overload(overloads, case):
    m = overloads[0]
    x, _ = refused_tensors()[case]
    refs = sys.getrefcount(x)
    for _ in range(20):
        assert m.view_or_object(x) == "object"
        assert m.managed_or_object(x) == "object"
    assert sys.getrefcount(x) == refs  # the refused exports left nothing behind
    assert m.view_or_object(torch.ones(2, 3)) == "tensor:2" and m.managed_or_object(np.ones(4)) == "tensor:1"


@pytest.mark.parametrize("case", list(refused_tensors()))
def test_a_single_overload_refuses_with_the_binding_librarys_type_error(overloads, case):
    m = overloads[0]
    x, _ = refused_tensors()[case]
    for fn, name in ((m.view, "view"), (m.managed, "managed")):
        with pytest.raises(TypeError, match=name + INCOMPATIBLE) as info:
            fn(x)
        assert type(info.value) is TypeError


def test_a_refused_tensor_reaches_a_converting_overload(overloads):
    # view_or_int(TensorView) / view_or_int(int): the tensor overload's refusal does not stop the converting pass,
    # whose int overload takes the object through __index__ (nanobind converts __index__ only in that pass).
    m = overloads[0]
    assert m.view_or_int(ConjLike(5)) == "int"
    with pytest.raises(TypeError, match="view_or_int" + INCOMPATIBLE):
        m.view_or_int(torch.ones(2, dtype=torch.complex64).conj())
    assert m.view_or_int(torch.ones(2)) == "tensor" and m.view_or_int(3) == "int"


def test_every_module_translates_tdb_errors(overloads):
    # The translator's "registered" flag was one symbol for the whole process in modules built without
    # -fvisibility=hidden: the second module raised RuntimeError where the first raised TypeError.
    for m in overloads:
        with pytest.raises(TypeError, match="^argument 'tensor': expected dtype float32, got float64$"):
            m.float32_only(torch.ones(2, dtype=torch.float64))
        with pytest.raises(TypeError, match="view" + INCOMPATIBLE):
            m.view(torch.ones(2, dtype=torch.complex64).conj())
    assert [m.view(torch.ones(1, 2)) for m in overloads] == [2, 2]
