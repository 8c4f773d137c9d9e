"""Import through the table: managed_tensor_to_py_object_no_sync, fed by the torch-free C consumer `_probe`.

What is pinned: zero-copy round trips that alias the source, the producer's deleter running exactly once
(when the last torch view dies, or at once when the import fails), byte_offset, NULL strides only before
DLPack 1.2, the refusal of another major version, and the exception type of every malformed struct. The
producers are this project's table, torch's own table, numpy's __dlpack__ and `_probe.make` (a struct built
field by field, malformed on purpose, whose deleter counts into `_probe.deleter_calls()`).
"""

import gc
import os
import subprocess
import textwrap
import warnings

import numpy as np
import pytest
import torch

from conftest import (CPU, DLPACK_DTYPES, FLOAT32, MISSING_DLPACK_DTYPES, cuda_device_0_expectation, kDLCPU,
                      kDLCUDA, kDLCUDAHost, kDLOpenCL, run_python)

kDLROCMHost = 11


# ---- helpers ----------------------------------------------------------------------------------------

class DeleterCount:
    """Counts the probe's deleter calls since it was made: `calls.new` is the number so far."""

    def __init__(self, probe):
        self.probe, self.start = probe, probe.deleter_calls()

    @property
    def new(self):
        return self.probe.deleter_calls() - self.start


def buffer16():
    """16 distinct float32 values a probe-made tensor can point into (and keep alive as its owner)."""
    return np.arange(16, dtype=np.float32)


def make_over(probe, buf, **fields):
    """A probe-made DLManagedTensorVersioned over `buf` (float32 [4] on CPU unless `fields` say otherwise)."""
    spec = dict(data=buf.ctypes.data, device=CPU, dtype=FLOAT32, shape=[4], strides=[1], owner=buf)
    spec.update(fields)
    return probe.make(spec.pop("data"), spec.pop("device"), spec.pop("dtype"), spec.pop("shape"),
                      spec.pop("strides"), **spec)


def sample(dtype):
    raw = torch.arange(64, dtype=torch.uint8)
    return (raw % 2 if dtype is torch.bool else raw).view(dtype)


def as_bytes(t):
    return t.view(torch.uint8).numpy().tobytes() if t.dtype is not torch.uint8 else t.numpy().tobytes()


ALL_DTYPES = pytest.mark.parametrize("dtype", list(DLPACK_DTYPES), ids=lambda d: str(d).replace("torch.", ""))


# ---- round trips ------------------------------------------------------------------------------------

VIEWS = {
    "contiguous": lambda t: t,
    "transposed": lambda t: t.t(),
    "sliced": lambda t: t[1:3, 1:],
    "step": lambda t: t[:, ::2],
    "expanded": lambda t: t[0:1, :].expand(3, 4),
    "zero_dim": lambda t: t[1, 2],
}


@pytest.mark.parametrize("view", list(VIEWS))
def test_round_trip_aliases_source(probe, api, view):
    t = VIEWS[view](torch.arange(12.0).reshape(3, 4))
    x = probe.export(api, t).to_python(api)
    assert type(x) is torch.Tensor
    assert (x.data_ptr(), x.shape, x.stride(), x.dtype, x.device) == (t.data_ptr(), t.shape, t.stride(),
                                                                       t.dtype, t.device)
    assert torch.equal(x, t)
    assert not x.requires_grad


def test_round_trip_writes_are_visible_both_ways(probe, api):
    t = torch.zeros(3, 4)
    x = probe.export(api, t[:, 1:]).to_python(api)
    x[0, 0] = 42.0
    assert t[0, 1] == 42.0
    t[2, 3] = 7.0
    assert x[2, 2] == 7.0


@ALL_DTYPES
def test_round_trip_keeps_dtype_and_pointer(probe, api, dtype):
    t = sample(dtype)[1::2]
    x = probe.export(api, t).to_python(api)
    assert (x.dtype, x.data_ptr(), x.shape, x.stride()) == (dtype, t.data_ptr(), t.shape, t.stride())


@ALL_DTYPES
def test_import_accepts_every_dlpack_dtype_from_a_raw_struct(probe, api, dtype):
    raw = np.arange(64, dtype=np.uint8)
    if dtype is torch.bool:
        raw %= 2
    itemsize = dtype.itemsize
    x = probe.make(raw.ctypes.data, CPU, DLPACK_DTYPES[dtype], [64 // itemsize], [1], owner=raw).to_python(api)
    assert x.dtype is dtype and x.shape == (64 // itemsize,) and x.data_ptr() == raw.ctypes.data
    assert as_bytes(x) == raw.tobytes()


def test_import_refuses_dlpack_dtypes_this_torch_lacks(probe, api):
    """A DLPack 1.3 dtype whose torch dtype this torch does not have (float8_e8m0fnu before 2.7,
    float4_e2m1fn_x2 before 2.8) is refused with BufferError, and the producer's deleter runs once.
    (Nothing to refuse on a torch that has them all: every one is imported by the test above.)"""
    for name, dl in MISSING_DLPACK_DTYPES.items():
        raw = np.zeros(8, dtype=np.uint8)
        m = probe.make(raw.ctypes.data, CPU, dl, [8], [1], owner=raw)
        calls = DeleterCount(probe)
        with pytest.raises(BufferError, match=r"DLPack dtype \(code %d, bits %d, lanes %d\) has no torch" % dl) \
                as raised:
            m.to_python(api)
        assert type(raised.value) is BufferError, name
        assert calls.new == 1, name


@ALL_DTYPES
@pytest.mark.parametrize("direction", ["ours_to_native", "native_to_ours"])
def test_cross_table_round_trip_matches(probe, api, native, dtype, direction):
    producer, consumer = (api, native) if direction == "ours_to_native" else (native, api)
    t = sample(dtype).reshape(4, -1)[:, 1:]
    x = probe.export(producer, t).to_python(consumer)
    assert (x.dtype, x.data_ptr(), x.shape, x.stride()) == (dtype, t.data_ptr(), t.shape, t.stride())


def test_round_trip_deleter_runs_once_when_last_view_dies(probe, api):
    t = torch.arange(6.0)
    m = probe.export(api, t)
    m.count_deletes()
    calls = DeleterCount(probe)
    x = m.to_python(api)
    view = x[2:]
    assert calls.new == 0
    del x
    gc.collect()
    assert calls.new == 0, "a view of the import still holds the producer's tensor"
    del view
    gc.collect()
    assert calls.new == 1


def test_import_keeps_producer_memory_alive_until_deleter(probe, api):
    buf = buffer16()
    calls = DeleterCount(probe)
    x = make_over(probe, buf, shape=[16]).to_python(api)
    del buf
    gc.collect()
    assert calls.new == 0
    assert torch.equal(x, torch.arange(16.0))
    del x
    assert calls.new == 1


def test_import_of_owning_export_outlives_the_source(probe, api):
    t = torch.arange(6.0)
    m = probe.export(api, t)
    del t
    gc.collect()
    assert torch.equal(m.to_python(api), torch.arange(6.0))


# ---- byte_offset, strides, devices ------------------------------------------------------------------

@pytest.mark.parametrize("byte_offset", [4, 8, 32])
def test_import_honours_byte_offset(probe, api, byte_offset):
    buf = buffer16()
    first = byte_offset // 4
    x = make_over(probe, buf, shape=[3, 2], strides=[2, 1], byte_offset=byte_offset).to_python(api)
    assert x.data_ptr() == buf.ctypes.data + byte_offset
    assert torch.equal(x, torch.arange(first, first + 6, dtype=torch.float32).reshape(3, 2))


def test_import_honours_byte_offset_like_native(probe, api, native):
    buf = buffer16()
    ours = make_over(probe, buf, byte_offset=12).to_python(api)
    theirs = make_over(probe, buf, byte_offset=12).to_python(native)
    assert ours.data_ptr() == theirs.data_ptr() == buf.ctypes.data + 12
    assert torch.equal(ours, theirs)


def test_import_keeps_non_contiguous_strides(probe, api):
    buf = buffer16()
    x = make_over(probe, buf, shape=[2, 3], strides=[1, 5]).to_python(api)
    assert x.stride() == (1, 5)
    assert torch.equal(x, torch.tensor([[0.0, 5.0, 10.0], [1.0, 6.0, 11.0]]))


def test_import_accepts_negative_stride_on_size_one_dim(probe, api):
    buf = buffer16()
    x = make_over(probe, buf, shape=[1, 3], strides=[-7, 1]).to_python(api)
    assert x.shape == (1, 3) and x.data_ptr() == buf.ctypes.data
    assert torch.equal(x, torch.arange(3.0).reshape(1, 3))


def test_import_of_numpy_reversed_size_one_axis_matches_native(probe, api, native):
    arr = np.arange(3.0).reshape(1, 3)[::-1]
    assert arr.strides[0] < 0
    theirs = probe.from_capsule(arr.__dlpack__(max_version=(1, 0))).to_python(native)
    ours = probe.from_capsule(arr.__dlpack__(max_version=(1, 0))).to_python(api)
    assert ours.data_ptr() == theirs.data_ptr() == arr.ctypes.data
    assert torch.equal(ours, theirs) and np.array_equal(ours.numpy(), arr)


def test_import_accepts_stride_zero(probe, api):
    buf = buffer16()
    x = make_over(probe, buf, shape=[3, 4], strides=[0, 1]).to_python(api)
    assert x.stride() == (0, 1) and torch.equal(x, torch.arange(4.0).expand(3, 4))


@pytest.mark.parametrize("version", [(1, 0), (1, 1)])
def test_import_reads_null_strides_before_1_2_as_row_major(probe, api, version):
    buf = buffer16()
    x = make_over(probe, buf, shape=[2, 3], strides=None, version=version).to_python(api)
    assert x.stride() == (3, 1) and torch.equal(x, torch.arange(6.0).reshape(2, 3))


def test_import_accepts_zero_dim_with_null_shape_and_strides(probe, api):
    buf = buffer16()
    x = make_over(probe, buf, shape=None, strides=None, byte_offset=8).to_python(api)
    assert x.shape == () and x.item() == 2.0


def test_import_accepts_size_zero_with_null_data(probe, api):
    x = probe.make(0, CPU, FLOAT32, [2, 0], [0, 1]).to_python(api)
    assert x.shape == (2, 0) and x.data_ptr() == 0


@pytest.mark.parametrize("shape, strides", [([0, 3], [-3, 1]), ([2, 0], [-1, -2]), ([0], [-5])])
def test_import_of_size_zero_tensor_with_negative_strides_gives_torch_strides_of_one(probe, api, shape, strides):
    """No element is ever addressed, so a negative stride is no refusal; torch wants strides >= 0: each
    negative one becomes 1, and the tensor works as any empty tensor."""
    calls = DeleterCount(probe)
    x = probe.make(0, CPU, FLOAT32, shape, strides).to_python(api)
    assert x.shape == tuple(shape)
    assert x.stride() == tuple(1 if s < 0 else s for s in strides)
    assert torch.equal(x + 1, torch.empty(shape)) and x.contiguous().numel() == 0
    del x
    gc.collect()
    assert calls.new == 1


def test_import_accepts_64_dims(probe, api):
    buf = buffer16()
    x = make_over(probe, buf, shape=[1] * 63 + [4], strides=[1] * 64).to_python(api)
    assert x.dim() == 64 and x.numel() == 4


@pytest.mark.parametrize("device", [(kDLCPU, 0), (kDLCPU, 7), (kDLCPU, -3), (kDLCUDAHost, 0), (kDLROCMHost, 0)],
                         ids=["cpu0", "cpu7", "cpu_negative_id", "cuda_host", "rocm_host"])
def test_import_of_host_memory_is_a_cpu_tensor_whatever_the_id(probe, api, device):
    buf = buffer16()
    x = make_over(probe, buf, device=device).to_python(api)
    assert x.device == torch.device("cpu") and torch.equal(x, torch.arange(4.0))


def test_native_refuses_cuda_host_memory_we_accept(probe, api, native):
    """Deliberate difference: torch's table has no mapping for kDLCUDAHost (pinned host memory)."""
    buf = buffer16()
    with pytest.raises(RuntimeError, match="Unsupported device_type: 3"):
        make_over(probe, buf, device=(kDLCUDAHost, 0)).to_python(native)
    assert make_over(probe, buf, device=(kDLCUDAHost, 0)).to_python(api).device.type == "cpu"


def test_imported_storage_cannot_grow_into_memory_the_producer_does_not_own(probe, api):
    buf = buffer16()
    x = make_over(probe, buf).to_python(api)
    with pytest.raises(RuntimeError, match="not resizable"):
        x.resize_(1000)
    assert x.data_ptr() == buf.ctypes.data


@pytest.mark.parametrize("shape, strides, nbytes", [([4], [1], 16), ([2, 3], [3, 1], 24), ([3, 2], [1, 3], 24),
                                                    ([2], [3], 16), ([3, 4], [0, 1], 16), ([1], [1], 4)])
def test_imported_storage_spans_exactly_the_producers_elements(probe, api, native, shape, strides, nbytes):
    """The storage ends at the last element: one element more and a resize_ within it would reach memory the
    producer never lent (torch's table computes the same size)."""
    buf = buffer16()
    x = make_over(probe, buf, shape=shape, strides=strides).to_python(api)
    theirs = make_over(probe, buf, shape=shape, strides=strides).to_python(native)
    assert x.untyped_storage().nbytes() == theirs.untyped_storage().nbytes() == nbytes
    with pytest.raises(RuntimeError, match="not resizable"):
        x.resize_(nbytes // 4 + 1)


# ---- versions and deleters --------------------------------------------------------------------------

@pytest.mark.parametrize("version", [(0, 8), (2, 0), (2, 3)])
def test_import_refuses_other_major_version_and_deletes_once(probe, api, version):
    buf = buffer16()
    calls = DeleterCount(probe)
    with pytest.raises(BufferError, match=f"major version {version[0]}"):
        make_over(probe, buf, version=version).to_python(api)
    assert calls.new == 1


def test_native_imports_other_major_version_we_refuse(probe, api, native):
    """Deliberate difference: torch's table ignores the version field (a 2.x layout would be misread)."""
    buf = buffer16()
    assert make_over(probe, buf, version=(2, 0)).to_python(native).data_ptr() == buf.ctypes.data
    with pytest.raises(BufferError):
        make_over(probe, buf, version=(2, 0)).to_python(api)


@pytest.mark.parametrize("version", [(1, 0), (1, 2), (1, 3), (1, 9)])
def test_import_accepts_any_minor_version(probe, api, version):
    buf = buffer16()
    assert torch.equal(make_over(probe, buf, version=version).to_python(api), torch.arange(4.0))


def test_import_accepts_null_deleter(probe, api):
    buf = buffer16()
    calls = DeleterCount(probe)
    x = make_over(probe, buf, deleter=False).to_python(api)
    assert torch.equal(x, torch.arange(4.0))
    del x
    gc.collect()
    assert calls.new == 0


def test_failed_import_with_null_deleter_raises_cleanly(probe, api):
    buf = buffer16()
    with pytest.raises(BufferError):
        make_over(probe, buf, dtype=(99, 32, 1), deleter=False).to_python(api)


def test_import_of_read_only_tensor_warns_that_torch_cannot_enforce_it(probe, api):
    """torch has no read-only tensors: the import goes ahead (as torch.from_dlpack does) but says so with a
    UserWarning, as torch.from_numpy does for a non-writable array."""
    buf = buffer16()
    with pytest.warns(UserWarning, match="read-only"):
        x = make_over(probe, buf, flags=1).to_python(api)
    assert x.data_ptr() == buf.ctypes.data


def test_import_without_read_only_flag_does_not_warn(probe, api):
    buf = buffer16()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_over(probe, buf, flags=2).to_python(api)  # IS_COPIED: nothing to say


def test_import_of_read_only_tensor_fails_cleanly_when_warnings_are_errors(probe, api):
    buf = buffer16()
    calls = DeleterCount(probe)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning, match="read-only"):
            make_over(probe, buf, flags=1).to_python(api)
    gc.collect()
    assert calls.new == 1, "the refused import must release the producer's tensor exactly once"


def test_import_that_cannot_allocate_the_python_object_raises_memory_error():
    """THPVariable_Wrap throws c10::OutOfMemoryError when the Python object cannot be allocated; outside the
    guard that exception crossed the C ABI and terminated the process. The producer's deleter runs once."""
    pytest.importorskip("_testcapi", reason="this Python has no _testcapi (its allocation-failure hooks)")
    code = textwrap.dedent("""
        import _testcapi, numpy as np, torch, torch_dlpack_bridge
        from torch_dlpack_bridge import _probe
        api = torch_dlpack_bridge.exchange_api()
        buf = np.arange(4, dtype=np.float32)
        m = _probe.make(buf.ctypes.data, (1, 0), (2, 32, 1), [4], [1], owner=buf)
        m.count_deletes()
        before = _probe.deleter_calls()
        _testcapi.set_nomemory(0, 1)  # the first allocation fails: the tensor's Python object
        try:
            m.to_python(api)
        except MemoryError as e:
            _testcapi.remove_mem_hooks()
            print("MemoryError:", e)
        _testcapi.remove_mem_hooks()
        print("deleter calls:", _probe.deleter_calls() - before)
        e = _probe.export(api, torch.arange(3.0))
        _testcapi.set_nomemory(0, 1)
        try:
            e.to_python(api)
        except MemoryError:
            _testcapi.remove_mem_hooks()
            print("owning export: MemoryError")
    """)
    result = run_python(code)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "MemoryError:" in result.stdout  # torch >= 2.13 says "Failed to allocate a Tensor object"; 2.4 nothing
    assert "deleter calls: 2" in result.stdout  # the counting trampoline and the probe's deleter, once each
    assert "owning export: MemoryError" in result.stdout


# A refused import calls the producer's deleter with the exception for the caller already set. A deleter that
# runs Python code (here a ctypes callback) once failed on it ("returned a result with an exception set",
# printed and cleared): the producer's tensor was never freed and the call returned -1 with no exception
# (the probe then raises SystemError). Each case: the probe's fields, and what runs just before the import.
PYTHON_DELETER_CASES = {
    "refused_dtype": ("BufferError", "dtype=(3, 32, 1)", ""),  # an opaque handle: no torch dtype
    "read_only_under_W_error": ("UserWarning", "flags=1", "warnings.simplefilter('error')"),
    "no_memory_for_the_python_object": ("MemoryError", "", "_testcapi.set_nomemory(0, 1)"),
}


@pytest.mark.parametrize("case", PYTHON_DELETER_CASES)
def test_refused_import_runs_a_python_deleter_and_raises_its_own_exception(case):
    exception, fields, just_before = PYTHON_DELETER_CASES[case]
    if case.startswith("no_memory"):
        pytest.importorskip("_testcapi", reason="this Python has no _testcapi (its allocation-failure hooks)")
    code = textwrap.dedent(f"""
        import ctypes, sys, warnings, numpy as np, torch, torch_dlpack_bridge
        from torch_dlpack_bridge import _probe
        sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
        from table_ctypes import DELETER, ManagedTensorVersioned
        if {case!r}.startswith("no_memory"):
            import _testcapi
        api = torch_dlpack_bridge.exchange_api()
        unraisable, calls = [], []
        sys.unraisablehook = unraisable.append
        buf = np.arange(4, dtype=np.float32)
        kwargs = dict({fields})
        m = _probe.make(buf.ctypes.data, (1, 0), kwargs.pop("dtype", (2, 32, 1)), [4], [1], owner=buf, **kwargs)
        # The probe's object holds the struct's address right after its header: its deleter becomes Python's.
        struct = ManagedTensorVersioned.from_address(ctypes.c_void_p.from_address(id(m) + object.__basicsize__).value)
        struct.deleter = DELETER(lambda address: calls.append(address))
        try:
            {just_before}
            m.to_python(api)
            print("imported")
        except BaseException as e:
            print("raised", type(e).__name__)
        if "_testcapi" in sys.modules:
            _testcapi.remove_mem_hooks()
        print("deleter calls", len(calls), "unraisable", [str(u.exc_value) for u in unraisable])
    """)
    result = run_python(code)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == f"raised {exception}\ndeleter calls 1 unraisable []\n", result.stdout + result.stderr


FAILING_NEW = """
#include <cstdlib>
#include <new>
static thread_local int fail_in = 0;  // 0: never; n: the n-th operator new from now on, in this thread, fails
extern "C" void tdb_fail_operator_new(int n) { fail_in = n; }
void* operator new(std::size_t size) {
  if (fail_in > 0 && --fail_in == 0) throw std::bad_alloc();
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
"""


def test_import_failing_once_the_storage_owns_the_producer_tensor_releases_it_once(tmp_path):
    """The import's first C++ allocation is the storage's, after its DataPtr took the producer's tensor over:
    when it fails (std::bad_alloc, here from a preloaded operator new), that DataPtr alone releases the
    tensor, once, and the import raises MemoryError. The tensor's memory outlives its deleter, so a second
    call would be counted (the probe's tensors free themselves, and glibc may clear a freed deleter)."""
    source, shim = tmp_path / "failing_new.cpp", tmp_path / "failing_new.so"
    source.write_text(FAILING_NEW)
    subprocess.run(["c++", "-shared", "-fPIC", "-O1", str(source), "-o", str(shim)], check=True)
    code = textwrap.dedent(f"""
        import ctypes, sys, numpy as np, torch, torch_dlpack_bridge
        sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
        from table_ctypes import counted_float32_tensor, import_struct
        shim = ctypes.CDLL({str(shim)!r})
        m, calls = counted_float32_tensor(np.arange(4, dtype=np.float32))
        shim.tdb_fail_operator_new(1)
        try:
            import_struct(m)
            print("imported")
        except MemoryError as e:
            print("MemoryError:", e)
        shim.tdb_fail_operator_new(0)
        print("deleter calls:", len(calls))
        calls.clear()
        x = import_struct(m)  # the same struct imports once nothing fails
        assert torch.equal(x, torch.arange(4.0)) and calls == []
        del x
        print("deleter calls after a successful import:", len(calls))
    """)
    result = run_python(code, LD_PRELOAD=str(shim))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "MemoryError: out of memory\ndeleter calls: 1\n" in result.stdout, result.stdout
    assert "deleter calls after a successful import: 1" in result.stdout


@pytest.mark.parametrize("dtype, byte_offset", [((2, 32, 1), 2), ((2, 32, 1), 6), ((0, 16, 1), 1),
                                                 ((5, 128, 1), 8)])
def test_import_refuses_byte_offset_inside_an_element(probe, api, dtype, byte_offset):
    buf = np.zeros(64, dtype=np.uint8)
    calls = DeleterCount(probe)
    with pytest.raises(BufferError, match="byte_offset"):
        make_over(probe, buf, dtype=dtype, byte_offset=byte_offset).to_python(api)
    assert calls.new == 1


def test_import_refuses_misaligned_byte_offset_like_native(probe, api, native):
    buf = buffer16()
    with pytest.raises(RuntimeError, match="multiple of element size"):
        make_over(probe, buf, byte_offset=2).to_python(native)
    with pytest.raises(BufferError):
        make_over(probe, buf, byte_offset=2).to_python(api)
    # a whole number of elements is fine, for both
    assert make_over(probe, buf, byte_offset=4).to_python(api).tolist() == [1.0, 2.0, 3.0, 4.0]


# Malformed structs: (fields over buffer16(), exception type, message fragment).
MALFORMED = {
    "unknown_dtype_code": (dict(dtype=(99, 32, 1)), BufferError, "code 99"),
    "opaque_handle_code": (dict(dtype=(3, 64, 1)), BufferError, "code 3"),
    "float_24_bits": (dict(dtype=(2, 24, 1)), BufferError, "bits 24"),
    "bool_1_bit": (dict(dtype=(6, 1, 1)), BufferError, "code 6"),
    "float_2_lanes": (dict(dtype=(2, 32, 2)), BufferError, "lanes 2"),
    "float4_one_lane": (dict(dtype=(17, 4, 1)), BufferError, "code 17"),
    "float8_e3m4_has_no_torch_dtype": (dict(dtype=(7, 8, 1)), BufferError, "code 7"),
    "float6_has_no_torch_dtype": (dict(dtype=(15, 6, 1)), BufferError, "code 15"),
    # (a torch without float4_e2m1fn_x2, before 2.8, refuses the dtype itself first)
    "padded_sub_byte_float4": (dict(dtype=(17, 4, 2), flags=4), BufferError,
                               "padded" if hasattr(torch, "float4_e2m1fn_x2") else r"\(code 17, bits 4, lanes 2\)"),
    "negative_shape": (dict(shape=[-1]), ValueError, "negative"),
    "negative_shape_in_second_dim": (dict(shape=[2, -2], strides=[1, 1]), ValueError, "dim 1"),
    "null_strides_version_1_3": (dict(shape=[2, 2], strides=None), ValueError, "NULL strides"),
    "null_strides_version_1_2": (dict(shape=[2, 2], strides=None, version=(1, 2)), ValueError, "NULL strides"),
    "null_shape_with_ndim_2": (dict(shape=None, strides=None, ndim=2), ValueError, "NULL shape"),
    "null_data_with_elements": (dict(data=0), ValueError, "NULL data"),
    "ndim_65": (dict(shape=[1] * 64, strides=[1] * 64, ndim=65), ValueError, "ndim 65"),
    "unknown_device_type_99": (dict(device=(99, 0)), BufferError, "device type 99"),
    "opencl_device": (dict(device=(kDLOpenCL, 0)), BufferError, "device type 4"),
    "float_4_lanes_is_a_vector_type": (dict(dtype=(2, 32, 4)), BufferError, "float32x4 is a vector type"),
    "bcomplex_has_no_torch_dtype": (dict(dtype=(18, 32, 1)), BufferError, r"lanes 1\) .*: bcomplex32"),
    "tpu_device": (dict(device=(19, 0)), BufferError, r"device type 19 \(tpu\)"),
    "ascend_device": (dict(device=(21, 0)), BufferError, r"device type 21 \(ascend\)"),
    # no CUDA device 0 here: a CPU-only build lacks the backend (BufferError), a CUDA build without GPU the
    # device (ValueError); skipped where a CUDA GPU exists
    "cuda_without_a_gpu": (dict(device=(kDLCUDA, 0)), *(cuda_device_0_expectation() or (None, None))),
    "negative_stride": (dict(shape=[4], strides=[-1]), BufferError, "negative strides"),
    "overflowing_element_count": (dict(shape=[2 ** 62, 4], strides=[4, 1]), ValueError, "overflows"),
    "overflowing_extent": (dict(shape=[2, 2], strides=[2 ** 62, 1]), ValueError, "overflows"),
    "overflowing_byte_count": (dict(shape=[2 ** 62], strides=[1]), ValueError, "overflows"),
    # 2**61 float32s span 2**63 bytes: no uint64 overflow, but past int64 (torch's nbytes would be negative)
    "byte_span_past_2_63": (dict(shape=[2 ** 61], strides=[1]), ValueError, "overflows"),
    "overflowing_dims_before_a_zero": (dict(shape=[2 ** 40, 2 ** 40, 0], strides=[0, 0, 0]), ValueError,
                                       "overflows"),
    "overflowing_row_major_strides_of_1_1": (dict(shape=[0, 2 ** 40, 2 ** 40], strides=None, version=(1, 1)),
                                             ValueError, "overflows"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_import_raises_documented_error_and_deletes_once(probe, api, case):
    fields, error, fragment = MALFORMED[case]
    if case == "cuda_without_a_gpu" and cuda_device_0_expectation() is None:
        pytest.skip("this torch has CUDA devices")
    buf = buffer16()
    m = make_over(probe, buf, **fields)
    calls = DeleterCount(probe)
    with pytest.raises(error, match=fragment) as raised:
        m.to_python(api)
    assert type(raised.value) is error
    assert calls.new == 1, "the producer's deleter must run exactly once, before the error returns"
    with pytest.raises(ValueError, match="handed on"):
        m.info()  # the table owns the struct now: the probe let go of it


# ---- torch's table where it does worse (explicit differences) -----------------------------------------

@pytest.mark.parametrize("case", ["unknown_dtype_code", "float_24_bits", "float_2_lanes", "negative_shape",
                                  "unknown_device_type_99"])
def test_native_import_leaks_producer_on_failure_where_ours_deletes_once(probe, api, native, case):
    """torch's table raises RuntimeError and never calls the producer's deleter on these failures."""
    fields = MALFORMED[case][0]
    buf = buffer16()
    calls = DeleterCount(probe)
    with pytest.raises(RuntimeError) as raised:
        make_over(probe, buf, **fields).to_python(native)
    assert not isinstance(raised.value, (BufferError, ValueError))
    assert calls.new == 0
    with pytest.raises((BufferError, ValueError)):
        make_over(probe, buf, **fields).to_python(api)
    assert calls.new == 1


@pytest.mark.parametrize("case", ["null_strides_version_1_3", "null_data_with_elements", "padded_sub_byte_float4"])
def test_native_imports_malformed_struct_we_refuse(probe, api, native, case):
    """torch's table accepts these (a row-major guess, a NULL-data tensor with elements, padded fp4 read as
    packed); ours refuses. The native result is not read. (It also accepts ndim 65, reading strides past
    the producer's arrays: not repeated here, that read is out of bounds.)"""
    fields, error, _ = MALFORMED[case]
    buf = buffer16()
    make_over(probe, buf, **fields).to_python(native)
    with pytest.raises(error):
        make_over(probe, buf, **fields).to_python(api)


@pytest.mark.parametrize("case", ["negative_stride", "overflowing_element_count", "overflowing_extent",
                                  "null_shape_with_ndim_2"])
def test_native_import_crashes_where_ours_raises(native, case):
    """Run in a subprocess: torch's table dies on these structs (signal; torch 2.14 raises RuntimeError for
    some of them instead), ours raises first, the documented error."""
    fields, error, _ = MALFORMED[case]
    code = textwrap.dedent(f"""
        import numpy as np, torch, torch_dlpack_bridge
        from torch_dlpack_bridge import _probe
        buf = np.arange(16, dtype=np.float32)
        spec = dict(data=buf.ctypes.data, device=(1, 0), dtype=(2, 32, 1), shape=[4], strides=[1], owner=buf)
        spec.update({fields!r})
        def made():
            s = dict(spec)
            return _probe.make(s.pop("data"), s.pop("device"), s.pop("dtype"), s.pop("shape"), s.pop("strides"), **s)
        try:
            made().to_python(torch_dlpack_bridge.exchange_api())
        except {error.__name__}:
            print("ours: {error.__name__}", flush=True)
        made().to_python(torch_dlpack_bridge._native_capsule())
        print("native: survived", flush=True)
    """)
    result = run_python(code)
    assert f"ours: {error.__name__}" in result.stdout, result.stderr[-2000:]
    assert "native: survived" not in result.stdout
    native_raised = result.returncode == 1 and "\nRuntimeError: " in result.stderr
    assert result.returncode < 0 or native_raised, (result.returncode, result.stderr[-2000:])


def test_native_imports_cuda_struct_as_cuda_tensor_on_a_cpu_build(probe, api, native):
    """torch's table builds a 'cuda' tensor over host memory on a CPU-only torch; ours refuses."""
    if torch.backends.cuda.is_built() or torch.version.hip is not None:
        pytest.skip("this torch is not a CPU-only build")
    buf = buffer16()
    assert make_over(probe, buf, device=(kDLCUDA, 0)).to_python(native).device.type == "cuda"
    with pytest.raises(BufferError, match="cuda"):
        make_over(probe, buf, device=(kDLCUDA, 0)).to_python(api)


# ---- other producers' capsules ----------------------------------------------------------------------

NUMPY_ARRAYS = {
    "contiguous": lambda: np.arange(12, dtype=np.float32).reshape(3, 4),
    "strided": lambda: np.arange(24, dtype=np.float64).reshape(4, 6)[1:, ::2],
    "transposed": lambda: np.arange(12, dtype=np.int16).reshape(3, 4).T,
    "zero_dim": lambda: np.array(5, dtype=np.int64),
    "bool": lambda: np.array([True, False, True]),
    "complex": lambda: np.arange(4, dtype=np.complex128),
}


def versioned_capsule(producer):
    """A "dltensor_versioned" capsule (DLPack >= 1.0) from `producer`.__dlpack__. numpy before 2.1 (the numpy
    of torch 2.4) and torch before DLPack 1.0 support make only unversioned capsules, which this
    DLManagedTensorVersioned path cannot take: skipped there, since the producer cannot express it."""
    try:
        return producer.__dlpack__(max_version=(1, 0))
    except TypeError as e:
        if "max_version" not in str(e):
            raise
        pytest.skip(f"{type(producer).__module__}.{type(producer).__name__}.__dlpack__ has no max_version "
                    "here (makes no versioned DLPack capsule)")


@pytest.mark.parametrize("case", list(NUMPY_ARRAYS))
def test_import_of_numpy_dlpack_capsule_is_zero_copy(probe, api, case):
    arr = NUMPY_ARRAYS[case]()
    m = probe.from_capsule(versioned_capsule(arr))
    m.count_deletes()
    calls = DeleterCount(probe)
    x = m.to_python(api)
    assert x.data_ptr() == arr.ctypes.data
    assert x.shape == arr.shape
    assert x.stride() == tuple(s // arr.itemsize for s in arr.strides)
    assert np.array_equal(x.numpy(), arr)
    del x
    gc.collect()
    assert calls.new == 1


def test_write_through_import_of_numpy_capsule_reaches_the_array(probe, api):
    arr = np.zeros(4, dtype=np.float32)
    x = probe.from_capsule(versioned_capsule(arr)).to_python(api)
    x[1] = 3.0
    assert arr[1] == 3.0


def test_import_of_torch_dlpack_capsule_is_zero_copy(probe, api):
    """torch answers max_version=(1, 0) with a struct of its own DLPack version, same major version (1.0 from
    torch 2.9, 1.3 from torch 2.13): a valid answer, imported whatever the minor version."""
    t = torch.arange(12.0).reshape(3, 4)[:, 1:]
    m = probe.from_capsule(versioned_capsule(t))
    assert m.version()[0] == 1
    x = m.to_python(api)
    assert (x.data_ptr(), x.shape, x.stride()) == (t.data_ptr(), t.shape, t.stride())
