"""Builds examples/axpy_kernels (once per session, in a temporary directory) and tests it with torch tensors.

The example is a plain setuptools extension over torch_dlpack_bridge/consumer.h: no torch include or link.
The CUDA variant (axpy_cuda.cu) is compiled with nvcc when nvcc is available; it cannot run without a GPU.
"""
import gc
import os
import re
import shutil
import subprocess
import sys
import weakref

import pytest
import torch

from example_packages import import_from
from fake_cuda import FakeCuda

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(REPO, "examples", "axpy_kernels")
INCLUDE = os.path.join(REPO, "torch_dlpack_bridge", "include")


@pytest.fixture(scope="session")
def example_dir(tmp_path_factory):
    src = tmp_path_factory.mktemp("axpy_kernels") / "src"
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "*.so"))
    return src


@pytest.fixture(scope="session")
def ak(example_dir):
    cmd = [sys.executable, "setup.py", "-q", "build_ext", "--build-lib", "lib", "--build-temp", "tmp"]
    res = subprocess.run(cmd, cwd=example_dir, capture_output=True, text=True)  # headers: get_include()
    assert res.returncode == 0, res.stdout + res.stderr
    return import_from(str(example_dir / "lib"), "axpy_kernels")


@pytest.fixture(scope="session")
def nvcc_and_make():
    if shutil.which("nvcc") is None or shutil.which("make") is None:
        pytest.skip("nvcc or make not available")


@pytest.fixture(scope="session")
def cuda_build(example_dir, nvcc_and_make):
    out = example_dir / "cuda_build"
    cmd = ["make", "cuda", f"PYTHON={sys.executable}", f"OUT={out}", f"TDB_INCLUDE={INCLUDE}"]
    res = subprocess.run(cmd, cwd=example_dir, capture_output=True, text=True)
    return res, out




# ----------------------------------------------------------------------------- axpy_


@pytest.mark.parametrize("n", [0, 1, 7, 1000])
@pytest.mark.parametrize("a", [0.0, 1.0, -2.5, 3])
def test_axpy_matches_torch(ak, n, a):
    g = torch.Generator().manual_seed(n)
    x, y = torch.randn(n, generator=g), torch.randn(n, generator=g)
    expected = y + a * x
    ak.axpy_(a, x, y)
    torch.testing.assert_close(y, expected)


def test_axpy_is_in_place_and_returns_y(ak):
    x, y = torch.arange(4.0), torch.ones(4)
    ptr, refs = y.data_ptr(), sys.getrefcount(y)
    assert ak.axpy_(2.0, x, y) is y
    assert y.data_ptr() == ptr and y.tolist() == [1.0, 3.0, 5.0, 7.0]
    assert sys.getrefcount(y) == refs


@pytest.mark.parametrize("make_x", [lambda b: b[::3], lambda b: b[:6].flip(0), lambda b: b[5:6].expand(6),
                                    lambda b: b.reshape(6, 3)[:, 1]], ids=["step", "negative", "zero", "column"])
def test_axpy_strided_x(ak, make_x):
    x = make_x(torch.randn(18))
    y = torch.randn(6)
    expected = y + 0.5 * x
    ak.axpy_(0.5, x, y)
    torch.testing.assert_close(y, expected)


def test_axpy_x_is_y(ak):
    y = torch.arange(5.0)
    ak.axpy_(2.0, y, y)
    assert y.tolist() == [0.0, 3.0, 6.0, 9.0, 12.0]


def test_axpy_writes_only_the_view_of_a_larger_tensor(ak):
    big = torch.zeros(10)
    ak.axpy_(1.0, torch.ones(4), big[3:7])  # a contiguous view with a storage offset
    assert big.tolist() == [0, 0, 0, 1, 1, 1, 1, 0, 0, 0]


def test_axpy_accepts_parameter_and_subclass(ak):
    class Sub(torch.Tensor):
        pass

    x = torch.nn.Parameter(torch.ones(3))
    y = torch.zeros(3).as_subclass(Sub)
    ak.axpy_(2.0, x, y)
    assert y.tolist() == [2.0, 2.0, 2.0]


# ----------------------------------------------------------------------------- scaled_copy


@pytest.mark.parametrize("make_x", [lambda: torch.randn(5), lambda: torch.tensor(2.5), lambda: torch.empty(0, 3),
                                    lambda: torch.randn(2, 3, 4).permute(2, 0, 1), lambda: torch.randn(4, 6)[1:, ::2],
                                    lambda: torch.randn(3, 1).expand(3, 5)],
                         ids=["vector", "scalar", "empty", "permuted", "sliced", "expanded"])
def test_scaled_copy_matches_torch(ak, make_x):
    x = make_x()
    out = ak.scaled_copy(-1.5, x)
    assert type(out) is torch.Tensor and out.dtype == torch.float32 and out.shape == x.shape
    assert out.is_contiguous() and out.device == x.device
    torch.testing.assert_close(out, -1.5 * x)


def test_scaled_copy_output_is_a_new_tensor_owned_by_python(ak):
    x = torch.arange(6.0)
    out = ak.scaled_copy(2.0, x)
    assert out.data_ptr() != x.data_ptr()
    out += 1  # writable, independent of x
    del x
    gc.collect()
    assert out.tolist() == [1.0, 3.0, 5.0, 7.0, 9.0, 11.0]


def test_scaled_copy_releases_everything(ak):
    x = torch.randn(100)
    refs = sys.getrefcount(x)
    for _ in range(200):
        ak.scaled_copy(3.0, x)
    assert sys.getrefcount(x) == refs  # the view borrowed x
    out = ak.scaled_copy(3.0, x)
    assert sys.getrefcount(out) == 2  # only `out` (and the call's argument) refer to it
    ref = weakref.ref(out)
    del out
    gc.collect()
    assert ref() is None  # the imported tensor (and with it the managed tensor's deleter) is gone


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize("fn,args,exc,msg", [
    ("axpy_", (1.0, torch.ones(3, dtype=torch.float64), torch.ones(3)), TypeError,
     "argument 'x': expected dtype float32, got float64"),
    ("axpy_", (1.0, torch.ones(3), torch.ones(3, dtype=torch.int32)), TypeError,
     "argument 'y': expected dtype float32, got int32"),
    ("axpy_", (1.0, "fake_cuda", torch.ones(3)), ValueError, "argument 'x': expected a cpu tensor, got cuda:0"),
    ("axpy_", (1.0, torch.ones(3), "fake_cuda"), ValueError, "argument 'y': expected a cpu tensor, got cuda:0"),
    ("axpy_", (1.0, torch.ones(3, 1), torch.ones(3)), ValueError, r"argument 'x': expected 1 dimension\(s\), got 2"),
    ("axpy_", (1.0, torch.ones(3), torch.tensor(1.0)), ValueError, r"argument 'y': expected 1 dimension\(s\), got 0"),
    ("axpy_", (1.0, torch.ones(3), torch.ones(4)), ValueError,
     r"argument 'y': expected shape \[3\] \(the shape of 'x'\), got \[4\]"),
    ("axpy_", (1.0, torch.ones(3), torch.ones(6)[::2]), ValueError, "argument 'y': expected a contiguous tensor"),
    ("axpy_", (1.0, [1.0, 2.0], torch.ones(2)), TypeError, "argument 'x': expected a tensor, got 'list'"),
    ("axpy_", (1.0, torch.ones(2), None), TypeError, "argument 'y': expected a tensor, got 'NoneType'"),
    ("axpy_", ("two", torch.ones(2), torch.ones(2)), TypeError, "argument 'a': expected a real number, got 'str'"),
    ("axpy_", (1.0, torch.ones(2)), TypeError, r"axpy_\(\) takes 3 arguments \(2 given\)"),
    ("scaled_copy", (1.0, torch.ones(2, dtype=torch.float16)), TypeError, "argument 'x': expected dtype float32"),
    ("scaled_copy", (1.0, "fake_cuda"), ValueError, "argument 'x': expected a cpu tensor, got cuda:0"),
    ("scaled_copy", (1.0, 3.0), TypeError, "argument 'x': expected a tensor, got 'float'"),
    ("scaled_copy", (1.0, torch.ones(2, device="meta")), Exception, "^argument 'x': "),  # refused by the producer
])
def test_errors_name_the_argument(ak, fn, args, exc, msg):
    args = tuple(torch.ones(3).as_subclass(FakeCuda) if isinstance(a, str) and a == "fake_cuda" else a for a in args)
    before = [a.clone() for a in args if isinstance(a, torch.Tensor) and a.device.type == "cpu"]
    with pytest.raises(exc, match=msg):
        getattr(ak, fn)(*args)
    after = [a for a in args if isinstance(a, torch.Tensor) and a.device.type == "cpu"]
    assert all(torch.equal(b, a) for b, a in zip(before, after))  # nothing written on failure


# ----------------------------------------------------------------------------- CUDA source


def dynamic_section(path):
    """NEEDED libraries and RUNPATH of a shared library, as readelf -d reports them."""
    text = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\).*\[(.*)\]", text), re.findall(r"\(R(?:UN)?PATH\).*\[(.*)\]", text)


def nvcc_major():
    out = subprocess.run(["nvcc", "--version"], capture_output=True, text=True, check=True).stdout
    return re.search(r"release (\d+)\.", out).group(1)


def test_cuda_example_compiles_with_nvcc(cuda_build):
    res, out = cuda_build
    assert res.returncode == 0, res.stdout + res.stderr
    # The shared CUDA runtime torch loads (not nvcc's static one, which needs a driver of nvcc's CUDA), found
    # first where torch's is; with a CPU torch, the toolkit's.
    (so,) = out.glob("axpy_cuda*")
    needed, runpath = dynamic_section(so)
    cudart = [n for n in needed if n.startswith("libcudart.so.")]
    assert cudart == [f"libcudart.so.{torch.version.cuda.split('.')[0] if torch.version.cuda else nvcc_major()}"]
    loaded = [line.split()[-1] for line in open("/proc/self/maps") if "/libcudart.so" in line]
    expected_dir = os.path.dirname(loaded[0]) if torch.version.cuda else os.path.join("/usr/local/cuda", "lib64")
    assert runpath == [expected_dir] and os.path.exists(os.path.join(expected_dir, cudart[0]))
    mod = import_from(str(out), "axpy_cuda")  # importable without a GPU
    with pytest.raises(ValueError, match="argument 'x': expected a cuda tensor, got cpu"):
        mod.axpy_(1.0, torch.ones(3), torch.ones(3))
    with pytest.raises(ValueError, match="argument 'y': expected a cuda tensor, got cpu"):
        mod.axpy_(1.0, torch.ones(3).as_subclass(FakeCuda), torch.ones(3))


def make_cuda_dry_run(example_dir, torch_cuda):
    """`make -n cuda` as if torch reported torch_cuda ("<version> <cudart folder> <archs>")."""
    cmd = ["make", "-n", "cuda", f"PYTHON={sys.executable}", "OUT=dry", f"TDB_INCLUDE={INCLUDE}",
           f"TORCH_CUDA={torch_cuda}"]
    return subprocess.run(cmd, cwd=example_dir, capture_output=True, text=True)


def test_cuda_example_targets_torch_runtime_and_architectures(nvcc_and_make, example_dir):
    res = make_cuda_dry_run(example_dir, f"{nvcc_major()}.0 /torch/nvidia/lib sm_80,sm_90")
    assert res.returncode == 0, res.stderr
    assert "-cudart shared -Xlinker -rpath,/torch/nvidia/lib" in res.stdout
    assert re.findall(r"-gencode arch=(\S+)", res.stdout) == ["compute_80,code=sm_80", "compute_90,code=sm_90",
                                                             "compute_90,code=compute_90"]


def test_cuda_example_refuses_a_toolkit_of_another_major_version(nvcc_and_make, example_dir):
    other = "12.8" if nvcc_major() != "12" else "13.0"
    res = subprocess.run(["make", "cuda", f"PYTHON={sys.executable}", "OUT=refused", f"TDB_INCLUDE={INCLUDE}",
                          f"TORCH_CUDA={other} /torch/nvidia/lib sm_80"], cwd=example_dir, capture_output=True, text=True)
    assert res.returncode != 0
    assert f"torch brings CUDA {other}: set NVCC= and CUDA_HOME= to a CUDA {other.split('.')[0]} toolkit" in res.stderr
    assert not (example_dir / "refused").exists()
