"""Tests of torch_dlpack_bridge/consumer.h through a small probe extension
(tests/consumer_header_probe.cpp).

The probe is a plain CPython extension (no torch include or link) compiled once per session in a
temporary directory; it is tested against whatever exchange table torch.Tensor publishes (torch >= 2.10
has a native one).
"""
import ctypes
import gc
import os
import shutil
import subprocess
import sys
import textwrap
import weakref

import pytest
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INCLUDE = os.path.join(REPO, "torch_dlpack_bridge", "include")

PROBE_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "consumer_header_probe.cpp")

SETUP = textwrap.dedent(
    f"""
    from setuptools import Extension, setup
    setup(name="tdb_probe", ext_modules=[Extension("tdb_probe", ["tdb_probe.cpp"], include_dirs=[{INCLUDE!r}],
          language="c++", extra_compile_args=["-std=c++17", "-Wall", "-Wextra", "-Werror", "-Wno-missing-field-initializers"])])
    """
)


@pytest.fixture(scope="session")
def probe(tmp_path_factory):
    src = tmp_path_factory.mktemp("tdb_probe")
    shutil.copy(PROBE_SOURCE, src / "tdb_probe.cpp")
    (src / "setup.py").write_text(SETUP)
    cmd = [sys.executable, "setup.py", "-q", "build_ext", "--build-lib", "lib", "--build-temp", "tmp"]
    res = subprocess.run(cmd, cwd=src, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    sys.path.insert(0, str(src / "lib"))
    try:
        import tdb_probe
    finally:
        sys.path.remove(str(src / "lib"))
    return tdb_probe


TORCH_CAPSULE = torch.Tensor.__dlpack_c_exchange_api__


def capsule_address(capsule, name=b"dlpack_exchange_api"):
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return get(capsule, name)


TORCH_API = capsule_address(TORCH_CAPSULE)


# ----------------------------------------------------------------------------- table lookup


def test_finds_torch_native_table(probe):
    assert probe.api_ptr(torch.ones(2), "x") == TORCH_API
    assert probe.api_ptr(torch.nn.Parameter(torch.ones(2)), "x") == TORCH_API

    class Sub(torch.Tensor):
        pass

    assert probe.api_ptr(torch.ones(2).as_subclass(Sub), "x") == TORCH_API


@pytest.mark.parametrize("obj", [5, "str", None, [1.0], object()])
def test_non_tensor_is_type_error_naming_argument_and_type(probe, obj):
    with pytest.raises(TypeError, match=r"argument 'weight': expected a tensor, got '%s'" % type(obj).__name__):
        probe.api_ptr(obj, "weight")
    assert probe.api_ptr(torch.ones(1), "x") == TORCH_API  # no error left behind


def test_legacy_int_attribute(probe):
    class Legacy:
        __c_dlpack_exchange_api__ = TORCH_API

    assert probe.api_ptr(Legacy(), "x") == TORCH_API


def test_capsule_preferred_over_legacy_int(probe):
    mine = probe.make_table(TORCH_CAPSULE, 1, 3, None, "")

    class Both:
        __dlpack_c_exchange_api__ = mine
        __c_dlpack_exchange_api__ = TORCH_API

    assert probe.api_ptr(Both(), "x") == capsule_address(mine)


def test_wrong_capsule_name_and_kind(probe):
    bad = probe.make_table(TORCH_CAPSULE, 1, 3, None, "bad_name")

    class BadName:
        __dlpack_c_exchange_api__ = bad

    class BadKind:
        __dlpack_c_exchange_api__ = "not a table"

    class BadNameWithLegacy(BadName):
        __c_dlpack_exchange_api__ = TORCH_API

    with pytest.raises(TypeError, match="capsule named 'not_dlpack'"):
        probe.api_ptr(BadName(), "x")
    with pytest.raises(TypeError, match="of type 'str'"):
        probe.api_ptr(BadKind(), "x")
    assert probe.api_ptr(BadNameWithLegacy(), "x") == TORCH_API


def test_newer_major_version_walks_prev_api(probe):
    v1 = probe.make_table(TORCH_CAPSULE, 1, 3, None, "")
    v2 = probe.make_table(TORCH_CAPSULE, 2, 0, v1, "")
    v3 = probe.make_table(TORCH_CAPSULE, 3, 1, v2, "")
    alone = probe.make_table(TORCH_CAPSULE, 2, 0, None, "")
    old = probe.make_table(TORCH_CAPSULE, 0, 8, None, "")
    for table, expect in [(v2, v1), (v3, v1), (v1, v1)]:
        T = type("T", (), {"__dlpack_c_exchange_api__": table})
        assert probe.api_ptr(T(), "x") == capsule_address(expect)
    for table, version in [(alone, "2.0"), (old, "0.8")]:
        T = type("T", (), {"__dlpack_c_exchange_api__": table})
        with pytest.raises(TypeError, match=f"version {version}"):
            probe.api_ptr(T(), "x")


def test_table_missing_required_function_is_refused(probe):
    T = type("T", (), {"__dlpack_c_exchange_api__": probe.make_table(TORCH_CAPSULE, 1, 3, None, "null_stream_fn")})
    with pytest.raises(TypeError, match="NULL required function"):
        probe.api_ptr(T(), "x")


def test_cache_is_per_type_and_positive_only(probe):
    class Late:
        pass

    with pytest.raises(TypeError):
        probe.api_ptr(Late(), "x")  # a failed lookup is not cached...
    Late.__dlpack_c_exchange_api__ = TORCH_CAPSULE
    assert probe.api_ptr(Late(), "x") == TORCH_API  # ...so publishing later works
    assert Late in probe.cached_types()
    Late.__dlpack_c_exchange_api__ = probe.make_table(TORCH_CAPSULE, 1, 3, None, "")
    assert probe.api_ptr(Late(), "x") == TORCH_API  # a found table is cached for the type


def fresh_probe_run(probe, tmp_path, body):
    """Runs `body` in a new interpreter with its own copy of the probe (so its cache starts empty, and a crash
    fails the test instead of the session); `fresh` is that copy, `capsule` torch's table. Returns stdout."""
    copy = tmp_path / os.path.basename(probe.__file__)
    shutil.copy(probe.__file__, copy)
    code = textwrap.dedent(f"""
        import gc, importlib.util, sys, threading, weakref, torch
        spec = importlib.util.spec_from_file_location("tdb_probe", {str(copy)!r})
        fresh = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(fresh)  # another copy of the library: its own statics
        assert fresh.cached_types() == []
        capsule = torch.Tensor.__dlpack_c_exchange_api__
        expected = fresh.api_ptr(torch.ones(1), "x")
    """) + textwrap.dedent(body)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, (result.returncode, result.stderr[-3000:])
    return result.stdout


def test_cache_keeps_the_types_it_holds_alive_and_serves_types_beyond_it(probe, tmp_path):
    """Cache entries are written once (so readers need no lock, also without a GIL): the types cached stay
    alive (their address cannot be reused for another type); 16 fast slots, then up to 1024 in the overflow
    level; types that find no slot are looked up on every call, correctly, and not kept."""
    out = fresh_probe_run(probe, tmp_path, """
        types = [type(f"T{i}", (), {"__dlpack_c_exchange_api__": capsule}) for i in range(1100)]
        first = weakref.ref(types[1])
        for T in types:
            assert fresh.api_ptr(T(), "x") == expected
        cached = set(fresh.cached_types())
        assert {torch.Tensor, *types[:15]} <= cached and 16 + 768 <= len(cached) <= 16 + 1024, len(cached)
        last = weakref.ref([T for T in types if T not in cached][-1])
        for T in types:  # served again, from the cache or not
            assert fresh.api_ptr(T(), "x") == expected
        del cached, types, T
        gc.collect()
        assert first() is not None  # the cache holds a strong reference
        # An uncached type is not kept; CPython 3.13t keeps every class once a thread has started (it makes
        # objects with deferred reference counts immortal), so there is nothing to see there.
        assert last() is None or "t" in getattr(sys, "abiflags", "")
        print("ok")
    """)
    assert out.strip() == "ok"


def test_uncached_lookups_count_nothing_that_can_overflow(probe, tmp_path):
    """A full cache once counted every further lookup: after 2^31 of them (a long-running server meeting a
    17th type) the count wrapped negative and indexed outside the cache (segfault). The process of old is
    started where the count would be, just short of the wrap."""
    out = fresh_probe_run(probe, tmp_path, """
        types = [type(f"T{i}", (), {"__dlpack_c_exchange_api__": capsule}) for i in range(40)]
        fresh.cache_claims(2**31 - 8)
        for _ in range(100):
            for T in types:
                assert fresh.api_ptr(T(), "x") == expected
        assert fresh.cache_claims() == 2**31 - 8  # a full fast level claims nothing more
        assert set(types) <= set(fresh.cached_types())  # they went to the overflow level
        print("ok")
    """)
    assert out.strip() == "ok"


def test_threads_fill_and_read_a_fresh_cache_at_once(probe, tmp_path):
    """Eight threads look up 24 new types at once in a fresh cache: every lookup returns the right table, and
    every type ends up cached (two threads may cache one type twice in the fast level). On a free-threaded
    CPython (scripts/freethreaded_check.sh, PYTHON_GIL=0) the threads really race."""
    out = fresh_probe_run(probe, tmp_path, """
        types = [type(f"C{i}", (), {"__dlpack_c_exchange_api__": capsule}) for i in range(24)]
        start, errors = threading.Barrier(8), []
        def worker(k):
            try:
                start.wait()
                for _ in range(200):
                    for T in types[k % 3:] + types[:k % 3]:
                        assert fresh.api_ptr(T(), "x") == expected
            except Exception as e:
                errors.append(e)
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
        for t in threads: t.start()
        for t in threads: t.join()
        cached = fresh.cached_types()
        assert errors == [], errors
        assert set(cached) == {torch.Tensor, *types}, cached
        print("ok")
    """)
    assert out.strip() == "ok"


def test_classes_are_never_tensors(probe):
    # torch.Tensor and numpy.ndarray have __dlpack__ (and torch.Tensor a table) as class attributes; the classes
    # themselves are no tensors: a binding's overload taking a class must not be given to the tensor caster.
    class Published:
        __dlpack_c_exchange_api__ = TORCH_CAPSULE

    for cls in (torch.Tensor, torch.nn.Parameter, np.ndarray, Published, type):
        assert not probe.is_tensor(cls), cls
        with pytest.raises(TypeError, match=r"^argument 't': expected a tensor, got the class '[\w.]+' itself$"):
            probe.view_info(cls)
        with pytest.raises(TypeError, match="^argument 't': expected a tensor"):
            probe.managed_info(cls)
    for obj in (torch.ones(1), np.ones(1), Published(), LegacyOnly(np.ones(1))):
        assert probe.is_tensor(obj), obj


def test_dlpack_is_looked_up_on_the_type(probe):
    # As Python does for special methods: an instance attribute named __dlpack__ does not make a producer.
    holder = type("Holder", (), {})()
    holder.__dlpack__ = np.ones(2).__dlpack__
    holder.__dlpack_c_exchange_api__ = TORCH_CAPSULE
    assert not probe.is_tensor(holder)
    with pytest.raises(TypeError, match=r"expected a tensor, got 'Holder' .*no __dlpack__ method"):
        probe.view_info(holder)


# ----------------------------------------------------------------------------- views


def expected_info(t):
    codes = {torch.float32: (2, 32), torch.float64: (2, 64), torch.int8: (0, 8), torch.uint8: (1, 8),
             torch.bool: (6, 8), torch.bfloat16: (4, 16), torch.complex64: (5, 64), torch.int64: (0, 64)}
    return {"data": t.data_ptr(), "ndim": t.dim(), "shape": tuple(t.shape), "strides": t.stride(),
            "dtype": codes[t.dtype] + (1,), "device": (1, 0), "numel": t.numel(), "contiguous": t.is_contiguous()}


def view_cases():
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    return {
        "contiguous": base,
        "transposed": base.t(),
        "offset_slice": base[1:, 2:5],
        "step": base[:, ::2],
        "scalar": torch.tensor(3.5),
        "empty": torch.empty(0, 3),
        "expanded": torch.ones(3, 1).expand(3, 4),
        "float64": torch.ones(2, dtype=torch.float64),
        "int8": torch.ones(5, dtype=torch.int8),
        "uint8": torch.ones(5, dtype=torch.uint8),
        "bool": torch.ones(2, dtype=torch.bool),
        "bfloat16": torch.ones(2, dtype=torch.bfloat16),
        "complex64": torch.ones(2, dtype=torch.complex64),
    }


@pytest.mark.parametrize("case", list(view_cases()))
def test_view_describes_tensor(probe, case):
    t = view_cases()[case]
    info = probe.view_info(t)
    info.pop("dtype_name")
    exp = expected_info(t)
    if t.numel() == 0:  # a size-zero tensor's data pointer is not meaningful
        info.pop("data"), exp.pop("data")
    assert info == exp


def test_view_falls_back_to_managed_export(probe):
    class NoView(torch.Tensor):
        __dlpack_c_exchange_api__ = probe.make_table(TORCH_CAPSULE, 1, 3, None, "no_view")

    t = torch.arange(12.0).reshape(3, 4)[:, 1:].as_subclass(NoView)
    before = sys.getrefcount(t)
    info = probe.view_info(t)
    assert info["shape"] == (3, 3) and info["strides"] == (4, 1) and info["data"] == t.data_ptr()
    assert sys.getrefcount(t) == before  # the managed export was released with the view


def test_view_and_owning_export_honour_the_producers_byte_offset(probe):
    # torch always exports byte_offset 0; this table moves data back 64 bytes and sets byte_offset to 64.
    class Offset(torch.Tensor):
        __dlpack_c_exchange_api__ = probe.make_table(TORCH_CAPSULE, 1, 3, None, "offset")

    t = torch.arange(24.0)[4:].as_subclass(Offset)
    assert probe.view_info(t)["data"] == t.data_ptr()  # TensorView::data()
    assert probe.managed_info(t)["data"] == t.data_ptr()  # tdb::data_ptr on a ManagedTensor
    r = probe.managed(t, "to_python")  # handed back whole: the importer applies byte_offset too
    assert r.data_ptr() == t.data_ptr() and torch.equal(r, torch.arange(4.0, 24.0))


def test_view_takes_no_reference(probe):
    t = torch.ones(3)
    before = sys.getrefcount(t)
    for _ in range(100):
        probe.view_info(t)
        probe.check("dtype", t, None)
    assert sys.getrefcount(t) == before


def test_producer_error_names_argument(probe):
    with pytest.raises(Exception, match=r"^argument 't': ") as info:
        probe.view_info(torch.ones(2, device="meta"))
    assert info.value.__cause__ is not None  # the producer's own exception is kept as the cause


# ----------------------------------------------------------------------------- owning handle


@pytest.mark.parametrize("mode,frees", [("drop", 1), ("reset_twice", 1), ("move", 1), ("move_assign", 2),
                                        ("release", 1)])
def test_managed_deleter_runs_exactly_once(probe, mode, frees):
    t = torch.ones(4)
    before, refs = probe.deleted(), sys.getrefcount(t)
    assert probe.managed(t, mode) is None
    assert probe.deleted() - before == frees
    assert sys.getrefcount(t) == refs


@pytest.mark.parametrize("mode,exc,msg", [("throw", RuntimeError, "thrown while holding"), ("pending", KeyError, "kept"),
                                          ("bad_major", BufferError, "major version 99")])
def test_managed_deleter_runs_once_on_errors(probe, mode, exc, msg):
    t = torch.ones(4)
    before = probe.deleted()
    with pytest.raises(exc, match=msg):
        probe.managed(t, mode)
    assert probe.deleted() - before == 1


def test_to_python_hands_ownership_to_the_new_tensor(probe):
    t = torch.arange(5.0)
    before = probe.deleted()
    r = probe.managed(t, "to_python")
    assert type(r) is torch.Tensor and r.data_ptr() == t.data_ptr() and torch.equal(r, t)
    assert probe.deleted() == before  # owned by r now
    ref = weakref.ref(r)
    del r
    gc.collect()
    assert ref() is None and probe.deleted() - before == 1


# ----------------------------------------------------------------------------- allocation, streams


@pytest.mark.parametrize("shape,dtype,torch_dtype", [((2, 3), (2, 32, 1), torch.float32), ((), (0, 64, 1), torch.int64),
                                                     ((0, 4), (4, 16, 1), torch.bfloat16), ((7,), (6, 8, 1), torch.bool)])
def test_allocate_through_producer(probe, shape, dtype, torch_dtype):
    out = probe.alloc(torch.empty(0), shape, dtype)
    assert type(out) is torch.Tensor and out.shape == shape and out.dtype == torch_dtype
    assert out.is_contiguous() and out.device.type == "cpu"
    ref = weakref.ref(out)
    del out
    gc.collect()
    assert ref() is None


def test_allocate_error_becomes_python_exception(probe):
    class Failing(torch.Tensor):
        __dlpack_c_exchange_api__ = probe.make_table(TORCH_CAPSULE, 1, 3, None, "failing_alloc")

    with pytest.raises(MemoryError, match="fake allocator is out of memory"):
        probe.alloc(torch.empty(0).as_subclass(Failing), (2,), (2, 32, 1))
    with pytest.raises(Exception):  # torch's own allocator refusing a dtype it cannot make
        probe.alloc(torch.empty(0), (2,), (3, 64, 1))


def test_allocation_of_another_dtype_than_asked_is_refused(probe):
    class OtherDtype(torch.Tensor):
        __dlpack_c_exchange_api__ = probe.make_table(TORCH_CAPSULE, 1, 3, None, "other_dtype_alloc")

    assert probe.alloc(torch.empty(0), (2,), (0, 32, 1)).dtype == torch.int32  # what it hands back
    with pytest.raises(BufferError, match="producer allocator returned a tensor other than the one requested"):
        probe.alloc(torch.empty(0).as_subclass(OtherDtype), (2,), (2, 32, 1))


def test_current_stream(probe):
    assert probe.stream(torch.ones(1), 1, 0) == 0  # CPU: NULL without asking the producer
    try:  # a CPU-only torch may answer NULL or raise, but must not crash
        probe.stream(torch.ones(1), 2, 0)
    except Exception:
        pass


# ----------------------------------------------------------------------------- checks and errors


def fake_cuda(probe, t):
    class FakeCuda(torch.Tensor):
        __dlpack_c_exchange_api__ = probe.make_table(TORCH_CAPSULE, 1, 3, None, "fake_cuda")

    return t.as_subclass(FakeCuda)


@pytest.mark.parametrize("what,x,other,exc,msg", [
    ("dtype", torch.ones(2, dtype=torch.float64), None, TypeError, "argument 'x': expected dtype float32, got float64"),
    ("dtype", torch.ones(2, dtype=torch.int8), None, TypeError, "got int8"),
    ("device_type", "fake_cuda", None, ValueError, "argument 'x': expected a cpu tensor, got cuda:0"),
    ("device", torch.ones(2), None, ValueError, "argument 'x': expected device cuda:1, got cpu"),
    ("ndim", torch.ones(2, 2), None, ValueError, r"argument 'x': expected 1 dimension\(s\), got 2"),
    ("shape", torch.ones(2, 2), None, ValueError, r"argument 'x': expected shape \[-1, 3\], got \[2, 2\]"),
    ("shape", torch.ones(3), None, ValueError, r"expected shape \[-1, 3\], got \[3\]"),
    ("contiguous", torch.ones(2, 3).t(), None, ValueError, r"argument 'x': expected a contiguous tensor, got strides \[1, 3\]"),
    ("same_shape", torch.ones(3), torch.ones(4), ValueError, r"argument 'y': expected shape \[3\] \(the shape of 'x'\), got \[4\]"),
    ("same_device", torch.ones(3), "fake_cuda", ValueError, r"argument 'y': expected device cpu \(the device of 'x'\), got cuda:0"),
])
def test_check_failures_name_the_argument(probe, what, x, other, exc, msg):
    x = fake_cuda(probe, torch.ones(2)) if isinstance(x, str) else x
    other = fake_cuda(probe, torch.ones(3)) if isinstance(other, str) else other
    with pytest.raises(exc, match=msg):
        probe.check(what, x, other)


@pytest.mark.parametrize("what,x,other", [
    ("dtype", torch.ones(2), None), ("device_type", torch.ones(2), None), ("ndim", torch.ones(5), None),
    ("shape", torch.ones(4, 3), None), ("contiguous", torch.ones(3, 1).expand(3, 1), None),
    ("contiguous", torch.ones(0, 3).t(), None), ("contiguous", torch.tensor(1.0), None),
    ("writable", torch.ones(2), None), ("same_shape", torch.ones(2, 3), torch.ones(3, 2).t()),
    ("same_device", torch.ones(2), torch.ones(5)),
])
def test_checks_pass(probe, what, x, other):
    assert probe.check(what, x, other) is None


@pytest.mark.parametrize("dtype,device,names", [
    ((2, 32, 1), (1, 0), ("float32", "cpu")), ((4, 16, 1), (2, 0), ("bfloat16", "cuda:0")),
    ((0, 32, 4), (10, 1), ("int32x4", "rocm:1")), ((10, 8, 1), (14, 0), ("float8_e4m3fn", "oneapi:0")),
    ((17, 4, 2), (12, 3), ("float4_e2m1fnx2", "ext_dev:3")), ((6, 8, 1), (3, 0), ("bool", "cuda_host:0")),
    ((99, 8, 1), (5, 0), ("dtype(code=99,bits=8)", "device_type_5:0")),
    # added on DLPack's main after 1.3: kDLBcomplex 18; kDLTPU 19, kDLTPUHost 20, kDLAscend 21
    ((18, 32, 1), (19, 0), ("bcomplex32", "tpu:0")), ((18, 64, 1), (20, 0), ("bcomplex64", "tpu_host:0")),
    ((2, 16, 1), (21, 2), ("float16", "ascend:2")), ((2, 16, 1), (22, 0), ("float16", "device_type_22:0")),
])
def test_dtype_and_device_names(probe, dtype, device, names):
    assert probe.names(dtype, device) == names


@pytest.mark.parametrize("kind,exc,msg", [(0, RuntimeError, "plain C\\+\\+ error"), (1, MemoryError, None),
                                          (2, RuntimeError, "unknown C\\+\\+ exception"), (3, LookupError, "tdb error")])
def test_guard_converts_cpp_exceptions(probe, kind, exc, msg):
    with pytest.raises(exc, match=msg):
        probe.raise_cpp(kind)


# ----------------------------------------------------------------------------- threads


def _run_probe_script(probe, body):
    """Runs `body` in a fresh interpreter that imports torch, the bridge and the probe; returns the result."""
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.dirname(probe.__file__)!r})
        import numpy, torch, torch_dlpack_bridge, tdb_probe
    """) + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("make", ["torch.ones(3)", "numpy.ones(3)"])
def test_managed_tensor_dropped_on_a_thread_without_the_gil(probe, make):
    # A DLPack deleter may run on any thread: dropping the owning handle there must not touch the Python
    # error indicator (which needs the GIL). In a subprocess, because the defect was a segfault.
    res = _run_probe_script(probe, f"""
        x = {make}
        refs = sys.getrefcount(x)
        print(tdb_probe.drop_on_thread(x), sys.getrefcount(x) - refs)
    """)
    assert res.returncode == 0, f"exit code {res.returncode}\n{res.stdout}{res.stderr}"
    assert res.stdout.split() == ["1", "0"]  # the deleter ran once, and let go of the producer's object


# ----------------------------------------------------------------------------- __dlpack__ fallback (NumPy)

np = pytest.importorskip("numpy")
from producers import LegacyOnly, ReEntrant, Recording  # noqa: E402


NUMPY_CASES = {
    "contiguous": lambda: np.arange(12, dtype=np.float32).reshape(3, 4),
    "transposed": lambda: np.arange(12, dtype=np.float32).reshape(3, 4).T,
    "sliced": lambda: np.arange(24, dtype=np.float32).reshape(4, 6)[1:, ::2],
    "scalar": lambda: np.array(2.5, dtype=np.float32),
    "int8": lambda: np.ones(5, dtype=np.int8),
    "float64": lambda: np.ones((2, 2)),
}


@pytest.mark.parametrize("case", list(NUMPY_CASES))
@pytest.mark.parametrize("wrap", [lambda a: a, LegacyOnly], ids=["versioned", "legacy"])
def test_numpy_view_through_dlpack_protocol(probe, case, wrap):
    a = NUMPY_CASES[case]()
    producer = wrap(a)
    before = sys.getrefcount(a)
    info = probe.view_info(producer)
    assert sys.getrefcount(a) == before  # the export (and its hold on the array) ended with the view
    expected = torch.from_numpy(a)  # the same memory, described by torch as the oracle
    assert info["data"] == a.ctypes.data and info["shape"] == a.shape and info["strides"] == expected.stride()
    assert info["ndim"] == a.ndim and info["device"] == (1, 0) and info["contiguous"] == expected.is_contiguous()
    assert info["dtype_name"] == str(a.dtype)


def test_protocol_export_keeps_array_alive_and_reports_flags(probe):
    a = np.arange(4, dtype=np.float32)
    info = probe.managed_info(a)
    assert info["api"] == 0 and info["version"] == (1, 3) and info["data"] == a.ctypes.data
    assert info["flags"] & 1 == 0  # writable
    a.flags.writeable = False
    assert probe.managed_info(a)["flags"] & 1 == 1  # READ_ONLY comes through from the versioned capsule
    with pytest.raises(ValueError, match="argument 'x': is read-only"):
        probe.check("writable", a, None)
    weak_check = np.ones(3)
    refs = sys.getrefcount(weak_check)
    for _ in range(100):
        probe.managed_info(weak_check)
        probe.view_info(LegacyOnly(weak_check))
    assert sys.getrefcount(weak_check) == refs  # nothing leaked


@pytest.mark.parametrize("device,stream", [((1, 0), None), ((2, 0), 1), ((13, 1), 1), ((10, 0), 0), ((14, 0), None)])
def test_protocol_arguments_follow_the_spec(probe, device, stream):
    producer = Recording(np.ones(3, dtype=np.float32), device=device)
    probe.view_info(producer)
    expected = {"max_version": (1, 3), "copy": False}
    if stream is not None:
        expected["stream"] = stream  # CUDA: the legacy default stream (1); ROCm: the default stream (0)
    assert producer.calls == [expected]


def test_protocol_legacy_retry_after_type_error(probe):
    producer = LegacyOnly(np.ones(2))
    calls = []
    original = producer.__dlpack__
    producer.__dlpack__ = lambda *args, **kwargs: (calls.append(kwargs), original(*args, **kwargs))[1]
    probe.view_info(producer)
    assert calls == [{"max_version": (1, 3), "copy": False}, {}]  # the first one raised TypeError


@pytest.mark.parametrize("depth", [4, 12])
def test_a_re_entrant_dlpack_is_called_once_per_level(probe, depth):
    """Issue 38.4: a __dlpack__ that takes the kernel again; the deepest level's TypeError is not about the
    keywords, so no level retries with the legacy signature (which made 2 ** (depth + 1) - 1 calls: 8,191 at
    depth 12)."""
    producer = ReEntrant(probe.view_info, depth)
    with pytest.raises(TypeError, match="ReEntrant: the deepest level refuses$"):
        probe.view_info(producer)
    assert (producer.calls, producer.exhausted) == (depth + 1, False)


class Draft10:
    """A producer of the DLPack 1.0 draft: max_version but no copy (the legacy call is its way in)."""

    def __init__(self, array):
        self.array, self.calls = array, []

    def __dlpack__(self, stream=None, max_version=None):
        self.calls.append(max_version)
        return self.array.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return (1, 0)


class CompiledLegacy(Draft10):
    """Refuses the keywords in its body, with the message CPython and Cython give, as a compiled producer does."""

    def __dlpack__(self, **kwargs):
        self.calls.append(kwargs.get("max_version"))
        if kwargs:
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        return self.array.__dlpack__()


class RefusingWithTypeError(Draft10):
    def __dlpack__(self, **kwargs):
        self.calls.append(kwargs.get("max_version"))
        raise TypeError("unsupported element type")


# (Draft10's first call is refused before its body runs: only the legacy call is recorded)
@pytest.mark.parametrize("producer,calls", [(Draft10, [None]), (CompiledLegacy, [(1, 3), None])])
def test_protocol_legacy_retry_when_the_keywords_are_refused(probe, producer, calls):
    p = producer(np.arange(3, dtype=np.float32))
    assert probe.view_info(p)["shape"] == (3,)
    assert p.calls == calls


def test_protocol_type_error_about_anything_else_is_raised_without_a_retry(probe):
    p = RefusingWithTypeError(np.ones(2))
    with pytest.raises(TypeError, match="^argument 't': unsupported element type$"):
        probe.view_info(p)
    assert p.calls == [(1, 3)]


def _capsule_pointer(capsule, name):
    return capsule_address(capsule, name)


def test_protocol_export_honours_the_producers_byte_offset(probe):
    from offset_producer import Offset

    base = np.arange(16, dtype=np.float32)
    x = base[4:]  # exported with data = base, byte_offset = 16
    assert probe.view_info(Offset(x, 4))["data"] == x.ctypes.data
    assert probe.managed_info(Offset(x, 4))["data"] == x.ctypes.data


def test_protocol_null_strides_mean_row_major(probe):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    capsule = a.__dlpack__()  # legacy DLManagedTensor: DLTensor first, strides at offset 32
    ctypes.c_void_p.from_address(_capsule_pointer(capsule, b"dltensor") + 32).value = None
    info = probe.view_info(Recording(a, result=capsule))
    assert info["strides"] == (3, 1) and info["shape"] == (2, 3)


@pytest.mark.parametrize("read", ["view_info", "managed_info"])
def test_protocol_null_shape_without_data_is_buffer_error(probe, read):
    """ndim 1 with shape NULL and data NULL: counting the elements to decide whether a NULL data pointer is
    fine would read shape[0] (a segfault once); the missing shape is reported first."""
    a = np.arange(3, dtype=np.float32)
    capsule = a.__dlpack__()  # legacy DLManagedTensor: data at offset 0, shape at 24
    base = _capsule_pointer(capsule, b"dltensor")
    ctypes.c_void_p.from_address(base).value = None
    ctypes.c_void_p.from_address(base + 24).value = None
    with pytest.raises(BufferError, match="argument 't': producer gave a DLTensor without shape or strides"):
        getattr(probe, read)(Recording(a, result=capsule))


@pytest.mark.parametrize("major", [2, 0])
def test_protocol_refuses_other_major_version_after_calling_its_deleter(probe, major):
    a = np.ones(3, dtype=np.float32)
    refs = sys.getrefcount(a)
    capsule = a.__dlpack__(max_version=(1, 0))
    ctypes.c_uint32.from_address(_capsule_pointer(capsule, b"dltensor_versioned")).value = major
    with pytest.raises(BufferError, match=f"argument 't': DLPack tensor of major version {major}"):
        probe.view_info(Recording(a, result=capsule))
    del capsule
    assert sys.getrefcount(a) == refs  # the producer's deleter ran (NumPy's releases the array)


@pytest.mark.parametrize("result,msg", [("not a capsule", "returned 'str'"),
                                        (ctypes.pythonapi, "returned 'PyDLL'")])
def test_protocol_refuses_non_capsules(probe, result, msg):
    with pytest.raises(BufferError, match=f"argument 't': __dlpack__\\(\\) {msg}"):
        probe.view_info(Recording(np.ones(1), result=result))


def test_protocol_producer_error_names_argument(probe):
    class Refusing:
        def __dlpack__(self, **kwargs):
            raise BufferError("cannot export this")

        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(BufferError, match="argument 't': cannot export this") as info:
        probe.view_info(Refusing())
    assert isinstance(info.value.__cause__, BufferError)


def test_protocol_bad_device_is_buffer_error(probe):
    with pytest.raises(BufferError, match=r"__dlpack_device__\(\) did not return"):
        probe.view_info(Recording(np.ones(1), device="cpu"))


def test_protocol_object_without_dlpack_is_type_error(probe):
    with pytest.raises(TypeError, match=r"argument 't': expected a tensor, got 'list' .*no __dlpack__ method"):
        probe.view_info([1.0])


def test_protocol_tensors_cannot_allocate_or_return(probe):
    with pytest.raises(TypeError, match="argument 'x': its producer has no DLPack exchange table"):
        probe.view_alloc(np.ones(2, dtype=np.float32))
    assert probe.view_alloc(torch.ones(2)).shape == (2,)  # a producer with a table can


def test_table_path_never_calls_dlpack(probe):
    # The fast path stays the fast path: a type with a table is never asked for __dlpack__.
    class Spy(torch.Tensor):
        calls = 0

        def __dlpack__(self, *args, **kwargs):
            Spy.calls += 1
            return super().__dlpack__(*args, **kwargs)

    t = torch.arange(3.0).as_subclass(Spy)
    probe.view_info(t)
    probe.managed_info(t)
    assert Spy.calls == 0


# ----------------------------------------------------------------------------- written parameters: the autograd probe


def published_probe(cls=torch.Tensor):
    """The C function behind cls.__tdb_autograd_probe__, callable from Python (holding the GIL)."""
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    address = get(cls.__tdb_autograd_probe__, b"torch_dlpack_bridge.autograd_probe")
    return ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object)(address)


class Logged(torch.overrides.TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.names.append(getattr(func, "__name__", repr(func)))
        return func(*args, **(kwargs or {}))


def test_the_published_probe_reads_requires_grad_as_torchs_in_place_operations():
    import torch_dlpack_bridge  # noqa: F401  (publishes the probe)

    read = published_probe()
    leaf = torch.ones(2, requires_grad=True)
    for t in [torch.ones(2), leaf, leaf * 2, leaf.detach(), torch.nn.Parameter(torch.ones(2)),
              torch.nn.Parameter(torch.ones(2), requires_grad=False), torch.empty(0, dtype=torch.int64)]:
        assert read(t) == int(t.requires_grad)
    with torch.inference_mode():
        assert read(torch.ones(2)) == 0

    class Sub(torch.Tensor):
        pass

    # A subclass may answer through its own __torch_function__: "unknown", the attribute decides.
    assert read(torch.ones(2).as_subclass(Sub)) == -1
    # Under a torch function mode, torch's in-place operations read the C++ flag too (the mode sees the operation,
    # not a read of requires_grad): the probe answers, and the mode sees nothing.
    plain = torch.ones(2)
    with Logged() as mode:
        assert read(plain) == 0 and read(leaf) == 1
    assert mode.names == []
    assert read(np.ones(2)) == -1 and read(None) == -1


def test_a_written_torch_tensor_is_decided_by_the_probe(probe, monkeypatch):
    # A fresh type, whose probe is read when its table is first cached: a planted probe that lies shows which
    # decides (the real one is tested above).
    class Fresh(torch.Tensor):
        pass

    answers = []
    lying = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object)(lambda obj: answers.append(obj) or 1)
    Fresh.lying = lying  # the probe module's cache keeps Fresh and the pointer for the life of the process
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype, new_capsule.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    monkeypatch.setattr(Fresh, "__tdb_autograd_probe__",
                        new_capsule(ctypes.cast(lying, ctypes.c_void_p), b"torch_dlpack_bridge.autograd_probe", None),
                        raising=False)
    x = torch.ones(2).as_subclass(Fresh)
    assert not x.requires_grad
    assert probe.refuses_write(x).startswith("a leaf Variable that requires grad")
    assert answers == [x]


def test_a_written_torch_tensor_that_needs_no_python_costs_no_attribute_read(probe):
    import torch_dlpack_bridge  # noqa: F401  (publishes the probe)

    x = torch.ones(2)
    with Logged() as mode:  # the probe answers under a mode too: no attribute read
        assert probe.refuses_write(x) is None
    assert mode.names == []
    assert probe.refuses_write(x) is None
    leaf = torch.ones(2, requires_grad=True)
    assert probe.refuses_write(leaf).startswith("a leaf Variable that requires grad")
    with torch.no_grad():
        assert probe.refuses_write(leaf) is None
    assert leaf._version == 0  # the decision has no effect: the bump is commit_write's, once a kernel is chosen


def published_bump(cls=torch.Tensor):
    """The C function behind cls.__tdb_version_bump__, callable from Python."""
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    address = get(cls.__tdb_version_bump__, b"torch_dlpack_bridge.version_bump")
    return ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object)(address)


def test_the_published_bump_bumps_as_torchs_increment_version():
    import torch_dlpack_bridge  # noqa: F401  (publishes the bump)

    bump = published_bump()
    leaf = torch.ones(2, requires_grad=True)
    for t in [torch.ones(2), leaf, leaf * 2, leaf.detach(), leaf[1:], torch.nn.Parameter(torch.ones(2))]:
        before, oracle = t._version, t.detach().clone()
        torch.autograd.graph.increment_version(oracle)
        assert bump(t) == 0 and t._version == before + 1 and oracle._version == 1
    assert leaf._version == 3  # .detach() and the view share leaf's counter
    with torch.inference_mode():
        inference = torch.ones(2)
        assert bump(inference) == 0  # no version counter: nothing to bump, nothing raised
    assert bump(inference) == 0 and inference.is_inference()

    class Sub(torch.Tensor):
        pass

    assert bump(torch.ones(2).as_subclass(Sub)) == -1  # the header's Python way
    assert bump(np.ones(2)) == -1 and bump(None) == -1


def test_the_published_layout_finds_torchs_fields():
    """__tdb_autograd_layout__ (dlpack.h's TDBAutogradLayout), which the headers read inline: read through it from
    Python, the fields are torch's (the version as x._version says it; no autograd meta unless it requires grad)."""
    import torch_dlpack_bridge  # noqa: F401

    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    fields = (ctypes.c_int64 * 6).from_address(get(torch.Tensor.__tdb_autograd_layout__,
                                                   b"torch_dlpack_bridge.autograd_layout"))
    assert list(fields[:2]) == [id(torch.Tensor), id(torch.nn.Parameter)]
    impl_at, meta_at, counter_at, version_at = fields[2:]

    def pointer(address):
        return ctypes.c_void_p.from_address(address).value

    for x in [torch.ones(2), torch.nn.Parameter(torch.ones(2)), torch.ones(3, requires_grad=True) * 2]:
        x.detach().add_(1)
        impl = pointer(id(x) + impl_at)
        assert bool(pointer(impl + meta_at)) == x.requires_grad
        assert ctypes.c_uint32.from_address(pointer(impl + counter_at) + version_at).value == x._version == 1
    fresh = torch.ones(2)
    assert not pointer(pointer(id(fresh) + impl_at) + meta_at)
    with torch.inference_mode():
        inference = torch.ones(2)
    assert pointer(pointer(id(inference) + impl_at) + counter_at) is None  # no counter: nothing to bump


def test_commit_write_bumps_every_torch_tensor_once_and_nothing_else(probe):
    import torch_dlpack_bridge  # noqa: F401

    class Sub(torch.Tensor):
        pass

    for t in [torch.ones(2), torch.ones(2, requires_grad=True), torch.ones(2).as_subclass(Sub)]:
        probe.commit_write(t)  # the C bump; the subclass through torch.autograd.graph.increment_version
        assert t._version == 1
    a = np.ones(2)
    probe.commit_write(a)  # not a torch tensor: nothing to bump
    assert a.tolist() == [1.0, 1.0]


def test_a_subclass_and_other_producers_take_the_attribute_read(probe):
    import torch_dlpack_bridge  # noqa: F401

    class Watched(torch.Tensor):
        reads = []

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            cls.reads.append(getattr(func, "__name__", repr(func)))
            return super().__torch_function__(func, types, args, kwargs or {})

    w = torch.ones(2).as_subclass(Watched)
    assert probe.refuses_write(w) is None
    assert "__get__" in Watched.reads  # torch's getter called the subclass's __torch_function__
    w.requires_grad_()
    assert probe.refuses_write(w).startswith("a leaf Variable that requires grad")
    assert probe.refuses_write(np.ones(2)) is None  # no table, no attribute: written
