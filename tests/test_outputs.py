"""Typed owning outputs (torch_dlpack_bridge/output.h: tdb::OwnedTensor<float, tdb::ndim<1>>) returned through the
pybind11 and nanobind casters and by functions written against CPython directly (raw_*).

tests/outputs_module.cpp is compiled once per binding library. An output is allocated by the producer of the tensor
it is made like (torch's allocator for torch tensors, the tdbdev backend's for tdbdev tensors, Paddle's for Paddle
tensors where Paddle is installed) or of a table the kernel names, and comes back as that producer's tensor.
"""
import gc
import os
import re
import subprocess
import sys
import weakref

import numpy as np
import pytest
import torch

import torch_dlpack_bridge  # noqa: F401  (publishes the table)
import typed_tensor_build
from example_packages import import_from
from faulty_allocator import FAULTS, FLAGS, faulty_type
from typed_tensor_build import FLAVOURS

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "outputs_module.cpp")


@pytest.fixture(scope="session")
def modules(tmp_path_factory):
    """{flavour: module}: tests/outputs_module.cpp built once per binding library."""
    if typed_tensor_build.compiler() is None:
        pytest.fail("no C++ compiler on PATH: the outputs cannot be tested")
    paths = typed_tensor_build.build(tmp_path_factory.mktemp("outputs"), SOURCE, "tdb_outputs")
    return {flavour: import_from(os.path.dirname(path), f"tdb_outputs_{flavour}") for flavour, path in paths.items()}


@pytest.fixture(params=FLAVOURS)
def m(request, modules):
    return modules[request.param]


@pytest.fixture(params=["pybind11", "nanobind", "raw"])
def scaled(request, modules):
    """scaled(a, x) returning one output: through either caster, or written against CPython (raw_scaled)."""
    return {"pybind11": modules["pybind11"].scaled, "nanobind": modules["nanobind"].scaled,
            "raw": modules["pybind11"].raw_scaled}[request.param]


@pytest.fixture(params=["pybind11", "nanobind", "raw"])
def pair(request, modules):
    return {"pybind11": modules["pybind11"].pair, "nanobind": modules["nanobind"].pair,
            "raw": modules["pybind11"].raw_pair}[request.param]


# ----------------------------------------------------------------------------- on the CPU, torch's allocator


@pytest.mark.parametrize("n", [0, 1, 5, 1000])
def test_output_is_a_new_torch_tensor_written_through_the_view(scaled, n):
    x = torch.randn(n)
    out = scaled(-1.5, x)
    assert type(out) is torch.Tensor and out.dtype == torch.float32 and out.shape == (n,)
    assert out.is_contiguous() and out.device == x.device and not out.requires_grad
    assert n == 0 or out.data_ptr() != x.data_ptr()
    torch.testing.assert_close(out, -1.5 * x)


def test_output_follows_a_strided_input(scaled):
    x = torch.arange(12.0).flip(0)[::3]
    out = scaled(2.0, x)
    assert out.shape == (4,) and out.stride() == (1,)
    assert out.tolist() == [22.0, 16.0, 10.0, 4.0]


def test_a_returned_tensors_storage_cannot_grow(scaled):
    # As a torch.from_dlpack tensor's: its memory is the DLPack tensor's, freed by its deleter, which torch cannot
    # reallocate (the kernel authors' guide, Outputs, says so). Shrinking works, and a clone grows.
    out = scaled(1.0, torch.ones(4))
    with pytest.raises(RuntimeError, match="Trying to resize storage that is not resizable"):
        out.resize_(8)
    assert out.resize_(2).tolist() == [1.0, 1.0] and out.clone().resize_(8).shape == (8,)


def test_tuple_of_outputs_is_a_python_tuple(pair):
    x = torch.arange(4.0)
    result = pair(x)
    assert type(result) is tuple and len(result) == 2
    plus, twice = result
    assert type(plus) is torch.Tensor and type(twice) is torch.Tensor
    assert plus.tolist() == [1.0, 2.0, 3.0, 4.0] and twice.tolist() == [0.0, 2.0, 4.0, 6.0]
    assert plus.data_ptr() != twice.data_ptr()


def test_the_guides_example(m):
    lo, hi = m.split(torch.tensor([-1.0, 2.0, -3.0, 4.0]))
    assert lo.tolist() == [-1.0, 0.0, -3.0, 0.0] and hi.tolist() == [0.0, 2.0, 0.0, 4.0]


def test_output_of_another_dtype_and_shape(m):
    out = m.grid(torch.ones(2, dtype=torch.float64), 4, 3)
    assert out.dtype == torch.int64 and out.shape == (4, 3)
    assert out.flatten().tolist() == list(range(12))
    assert m.zeros(torch.ones(1), 3, 2).shape == (3, 3) and m.zeros(torch.ones(1), 2, 0).shape == ()
    assert m.zeros(torch.ones(1), 0, 4).numel() == 0


def test_output_from_a_table_the_kernel_names(m):
    out = m.arange_from(torch.Tensor, 5)
    assert type(out) is torch.Tensor and out.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    with pytest.raises(TypeError, match="^cls has no DLPack C exchange table"):
        m.arange_from(int, 5)


# ----------------------------------------------------------------------------- errors: clear Python exceptions


def test_declared_fixed_size_is_checked_before_allocation(m):
    with pytest.raises(ValueError, match=r"^output: expected shape \[-1, 3\], got \[4, 2\]$"):
        m.grid(torch.ones(1), 4, 2)
    with pytest.raises(ValueError, match=r"^output: sizes must be >= 0, got shape \[-1, 3\]$"):
        m.grid(torch.ones(1), -1, 3)
    with pytest.raises(ValueError, match=r"^output: expected 1 dimension\(s\), got shape \[2, 2\]$"):
        m.vector_of_rank(torch.ones(1), 2)
    assert m.vector_of_rank(torch.ones(1), 1).shape == (2,)


def test_declared_device_type_is_checked_before_allocation(m, tdbdev):
    before = tdbdev.total_allocations()
    x = torch.ones(3, device="tdbdev:0")
    allocated = tdbdev.total_allocations()
    assert allocated > before
    with pytest.raises(ValueError, match=r"^output 'out': expected a cpu tensor, asked for ext_dev:0$"):
        m.cpu_only(x)
    assert tdbdev.total_allocations() == allocated  # refused before anything was allocated
    assert m.cpu_only(torch.ones(2)).device.type == "cpu"


def test_allocation_failure_is_a_memory_error(m):
    with pytest.raises(MemoryError):
        m.grid(torch.ones(1), 2 ** 44, 3)  # 2**44 * 3 int64: more than this machine can map


TOO_MANY = ("2305843009213693952 elements of float32 (9223372036854775808 bytes) is more than torch can address "
            "(2**63 - 1 bytes at most)")


def test_an_output_too_large_for_torch_is_the_producers_value_error_naming_the_output(scaled):
    """Issue 40.6: the table's allocator refuses an output that torch cannot address (2**61 float32, asked like an
    expanded x that takes no memory); the message starts with the output's name, as the output's other errors do,
    and keeps the producer's exception type."""
    with pytest.raises(ValueError, match="^" + re.escape("output: " + TOO_MANY) + "$"):
        scaled(2.0, torch.ones(1).expand(2 ** 61))


def test_a_named_output_too_large_for_torch_is_named(m):
    with pytest.raises(ValueError, match="^" + re.escape("output 'out': " + TOO_MANY) + "$"):
        m.cpu_only(torch.ones(1).expand(2 ** 61))  # tdb::named<kOut>


GOT = {"null_strides": "a NULL shape or strides", "null_shape": "a NULL shape or strides", "one_row": "shape [1]",
       "fewer_dims": "0 dimension(s)", "other_dtype": "dtype int32", "every_other": "strides [2]",
       "null_data": "no data (NULL) for 5 element(s)", "other_device_type": "a tensor on opencl:0"}


@pytest.mark.parametrize("fault", FAULTS[:-1])
def test_a_producer_allocator_that_returns_another_tensor_is_refused(scaled, fault):
    """Issue 38.1: NULL strides, shape or data used to crash the kernel (SIGSEGV), one row for five came back as a
    (1,) tensor; every difference from what was asked is a BufferError saying what the producer got wrong."""
    x = torch.arange(5.0).as_subclass(faulty_type(fault))
    with pytest.raises(BufferError, match=r"^output: producer allocator returned a tensor other than the one requested "
                                          r"\(float32 \[5\] on cpu, row-major\), got " + re.escape(GOT[fault]) + "$"):
        scaled(2.0, x)


@pytest.mark.parametrize("fault", ["one_row", "every_other", "other_dtype", "null_strides"])
def test_an_output_of_a_given_shape_from_a_faulty_allocator_is_refused(m, fault):
    like = torch.ones(1).as_subclass(faulty_type(fault))
    with pytest.raises(BufferError, match=r"^output: producer allocator returned a tensor other than the one requested "
                                          r"\(int64 \[4, 3\] on cpu, row-major\), got "):
        m.grid(like, 4, 3)
    with pytest.raises(BufferError, match=r"other than the one requested \(float32 \[5\] on cpu, row-major\)"):
        m.split(torch.arange(5.0).as_subclass(faulty_type(fault)))


def test_an_output_on_another_device_of_the_producer_is_refused_and_freed(scaled, tdbdev):
    """A producer of several devices (tdbdev) whose allocator puts the output on the device after the one asked."""
    x = torch.arange(5.0).to("tdbdev:0").as_subclass(faulty_type("other_device_id"))
    gc.collect()
    live = tdbdev.live_allocations()
    with pytest.raises(BufferError, match=r"\(float32 \[5\] on ext_dev:0, row-major\), got a tensor on ext_dev:1$"):
        scaled(2.0, x)
    gc.collect()
    assert tdbdev.live_allocations() == live  # the refused tensor went back to its producer
    assert scaled(2.0, torch.arange(5.0).to("tdbdev:1")).device == torch.device("tdbdev:1")


READ_ONLY_CASE = """
import sys
sys.path[:0] = {paths!r}
import torch
import torch_dlpack_bridge
from faulty_allocator import faulty_type
for module, function in {cases!r}:
    Faulty = faulty_type("read_only")
    try:
        getattr(__import__(module), function)(2.0, torch.arange(4.0).as_subclass(Faulty))
        outcome = "returned"
    except Exception as e:
        outcome = type(e).__name__ + ": " + str(e)
    print(module, function, "->", outcome, "| deleter calls:", len(Faulty.faulty_deleted), flush=True)
"""


def test_an_output_in_read_only_memory_is_refused_and_given_back_once(modules):
    """Issue 45.1: an allocator whose tensor lies in memory mapped read-only (PROT_READ), flagged READ_ONLY: the kernel
    wrote it (SIGSEGV, every flavour and tdb::allocate itself); now a BufferError naming the flag, the producer's
    deleter called once. In a fresh interpreter, so that the old crash fails this test instead of ending the run."""
    cases = [(f"tdb_outputs_{flavour}", function) for flavour in FLAVOURS for function in ("scaled", "allocated")]
    cases.append(("tdb_outputs_pybind11", "raw_scaled"))
    paths = [HERE] + sorted({os.path.dirname(m.__file__) for m in modules.values()})
    from conftest import python_env

    res = subprocess.run([sys.executable, "-c", READ_ONLY_CASE.format(paths=paths, cases=cases)], capture_output=True,
                         text=True, timeout=300, env=python_env())
    assert res.returncode == 0, (res.returncode, res.stdout, res.stderr)
    refused = ("BufferError: output: producer allocator returned a tensor other than the one requested (float32 [4] "
               "on cpu, row-major), got read-only memory (DLPACK_FLAG_BITMASK_READ_ONLY) | deleter calls: 1")
    assert res.stdout.splitlines() == [f"{module} {function} -> {refused}" for module, function in cases], res.stdout


@pytest.mark.parametrize("flag", sorted(FLAGS))
def test_flags_that_say_nothing_about_a_float32_output_are_taken(scaled, flag):
    """IS_COPIED says nothing about a new tensor; IS_SUBBYTE_TYPE_PADDED only about elements smaller than a byte."""
    out = scaled(2.0, torch.arange(4.0).as_subclass(faulty_type(flag)))
    assert out.tolist() == [0.0, 2.0, 4.0, 6.0]


def test_numpy_input_cannot_allocate(scaled):
    # NumPy publishes no exchange table (taken through __dlpack__): it has no allocator to make an output with.
    with pytest.raises(TypeError, match="^output: cannot allocate like argument 'x': its producer has no DLPack "
                                        "exchange table"):
        scaled(2.0, np.ones(3, dtype=np.float32))


# ----------------------------------------------------------------------------- PrivateUse1: the backend's allocator


def test_output_on_the_inputs_privateuse1_device_from_its_allocator(scaled, tdbdev):
    x = torch.arange(4.0).to("tdbdev:1")
    before = tdbdev.total_allocations()
    out = scaled(3.0, x)
    assert type(out) is torch.Tensor and out.device == torch.device("tdbdev:1")
    assert tdbdev.total_allocations() == before + 1  # the backend's own allocator made it
    assert tdbdev.device_of_ptr(out.data_ptr()) == 1  # on the input's device
    assert out.cpu().tolist() == [0.0, 3.0, 6.0, 9.0]


def test_tuple_of_privateuse1_outputs(pair, tdbdev):
    plus, twice = pair(torch.arange(3.0).to("tdbdev:0"))
    assert plus.device == twice.device == torch.device("tdbdev:0")
    assert [tdbdev.device_of_ptr(t.data_ptr()) for t in (plus, twice)] == [0, 0]
    assert plus.cpu().tolist() == [1.0, 2.0, 3.0] and twice.cpu().tolist() == [0.0, 2.0, 4.0]


# ----------------------------------------------------------------------------- leaks over many calls


def test_no_leak_over_many_calls_on_privateuse1(modules, tdbdev):
    """The backend counts its live blocks: after thousands of returned, dropped, refused and tuple outputs,
    exactly the blocks still referenced from Python are live."""
    x = torch.arange(8.0).to("tdbdev:1")
    refs = sys.getrefcount(x)
    gc.collect()
    live = tdbdev.live_allocations()
    for name in ("pybind11", "nanobind"):
        mod = modules[name]
        for _ in range(2000):
            mod.scaled(1.0, x)
            mod.pair(x)
            assert mod.drop(x) == 8
            with pytest.raises(ValueError):
                mod.cpu_only(x)
    for _ in range(2000):
        modules["pybind11"].raw_scaled(1.0, x)
        modules["pybind11"].raw_pair(x)
    gc.collect()
    assert tdbdev.live_allocations() == live
    assert sys.getrefcount(x) == refs
    kept = [modules["nanobind"].scaled(1.0, x) for _ in range(10)]
    assert tdbdev.live_allocations() == live + 10
    del kept
    assert tdbdev.live_allocations() == live


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads the resident set size from /proc")
def test_no_leak_over_many_calls_on_cpu(scaled):
    """torch's CPU allocator counts nothing we can read: 600 outputs of 4 MiB each, every one written (so its
    pages are resident), would grow the resident set by 2.4 GiB if any were leaked."""
    x = torch.ones(1 << 20)
    scaled(1.0, x)
    gc.collect()
    before = rss_bytes()
    for _ in range(600):
        scaled(2.0, x)
    gc.collect()
    assert rss_bytes() - before < 256 << 20


def test_a_tuple_that_fails_half_way_releases_what_it_made(modules, tdbdev):
    """The second item cannot be handed over: the call raises, and the tensors made before and after it (one
    already a Python tensor inside the unfinished tuple) are all freed."""
    x = torch.arange(4.0).to("tdbdev:0")
    gc.collect()
    live = tdbdev.live_allocations()
    for fn in (modules["pybind11"].broken_pair, modules["nanobind"].broken_pair, modules["pybind11"].raw_broken_pair):
        for _ in range(200):
            with pytest.raises(ValueError, match="ManagedTensor::to_python on an empty handle"):
                fn(x)
    gc.collect()
    assert tdbdev.live_allocations() == live


def test_output_is_owned_by_python_only(scaled):
    x = torch.arange(6.0)
    out = scaled(2.0, x)
    assert sys.getrefcount(out) == 2  # only `out` (and getrefcount's argument) refer to it
    ref = weakref.ref(out)
    del out
    gc.collect()
    assert ref() is None


# ----------------------------------------------------------------------------- Paddle's table, where installed


def test_output_of_a_paddle_input_is_a_paddle_tensor_from_paddles_allocator(m):
    paddle = pytest.importorskip("paddle", reason="Paddle is not installed (its table is tested where it is)")
    if not hasattr(paddle.Tensor, "__dlpack_c_exchange_api__"):
        pytest.skip(f"this Paddle ({paddle.__version__}) publishes no DLPack exchange table")
    x = paddle.to_tensor([1.0, 2.0, 3.0], dtype="float32")
    out = m.scaled(2.0, x)
    assert type(out) is type(x) and out.dtype == x.dtype and out.place.is_cpu_place()
    assert out.numpy().tolist() == [2.0, 4.0, 6.0]
    plus, twice = m.pair(x)
    assert type(plus) is type(x) and plus.numpy().tolist() == [2.0, 3.0, 4.0]
    named = m.arange_from(type(x), 3)  # Paddle's table, named by the kernel
    assert type(named) is type(x) and named.numpy().tolist() == [0.0, 1.0, 2.0]
