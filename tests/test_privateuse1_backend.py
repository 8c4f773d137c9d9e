"""Tests of the tdbdev PrivateUse1 test backend itself (tests/privateuse1_backend)."""

import os
import sys
import threading

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from privateuse1_backend import BACKEND_NAME, load  # noqa: E402

from hypothesis import given, settings, strategies as st  # noqa: E402

DEV0 = f"{BACKEND_NAME}:0"
DEV1 = f"{BACKEND_NAME}:1"


pytestmark = pytest.mark.usefixtures("tdbdev_state")


@pytest.fixture
def ext(tdbdev):
    return tdbdev


# --------------------------------------------------------------------------- registration


def test_load_is_idempotent(ext):
    assert load() is ext
    assert torch._C._get_privateuse1_backend_name() == BACKEND_NAME
    assert getattr(torch, BACKEND_NAME).device_count() == 2
    assert hasattr(torch.Tensor, BACKEND_NAME)


NO_ACCELERATOR = pytest.mark.skipif(not hasattr(getattr(torch, "accelerator", None), "set_stream"),
                                    reason="torch.accelerator (with streams) does not exist in this torch")


def accelerator_device_index():
    """torch.accelerator's current device index (current_device_idx in the first torch that had it)."""
    acc = torch.accelerator
    return (acc.current_device_index if hasattr(acc, "current_device_index") else acc.current_device_idx)()


def test_device_count(ext):
    assert ext.device_count() == 2
    assert getattr(torch, BACKEND_NAME).device_count() == 2
    assert getattr(torch, BACKEND_NAME).is_available()


@NO_ACCELERATOR
def test_torch_accelerator_sees_the_backend(ext):
    assert torch.accelerator.current_accelerator().type == BACKEND_NAME
    assert torch.accelerator.device_count() == 2
    assert torch.accelerator.is_available()
    ext.set_device(1)
    assert accelerator_device_index() == 1
    ext.set_device(0)
    assert accelerator_device_index() == 0


def test_device_guard(ext):
    ext.set_device(1)
    assert ext.current_device() == 1
    assert getattr(torch, BACKEND_NAME).current_device() == 1
    assert ext.exchange_device(0) == 1
    assert ext.current_device() == 0
    with pytest.raises((IndexError, RuntimeError)):
        ext.set_device(2)
    with pytest.raises((IndexError, RuntimeError)):
        ext.set_device(-1)
    assert ext.current_device() == 0
    # torch's own guard (via torch.device context) goes through the same impl
    with torch.device(DEV1):
        t = torch.empty(2)
    assert t.device == torch.device(DEV1)


# --------------------------------------------------------------------------- streams


def test_default_stream_handles_distinct_per_device(ext):
    h0 = ext.default_stream_handle(0)
    h1 = ext.default_stream_handle(1)
    assert h0 != 0 and h1 != 0
    assert h0 != h1
    assert ext.stream_handle(0, 0) == h0
    assert ext.stream_handle(1, 0) == h1
    assert ext.current_stream_id(0) == 0 and ext.current_stream_handle(0) == h0


def test_new_streams_have_distinct_stable_handles(ext):
    seen = {ext.default_stream_handle(0), ext.default_stream_handle(1)}
    ids = []
    for dev in (0, 1, 0, 1):
        sid = ext.new_stream(dev)
        assert sid > 0
        h = ext.stream_handle(dev, sid)
        assert h != 0 and h not in seen
        seen.add(h)
        ids.append((dev, sid, h))
    for dev, sid, h in ids:
        assert ext.stream_handle(dev, sid) == h  # stable
    # stream ids are per device: the same id on the two devices names two streams
    a = ext.new_stream(0)
    b = ext.new_stream(1)
    common = min(a, b)
    assert ext.stream_handle(0, common) != ext.stream_handle(1, common)
    assert ext.stream_count(0) > a and ext.stream_count(1) > b


def test_unknown_stream_is_rejected(ext):
    with pytest.raises(RuntimeError):
        ext.stream_handle(0, 10**12)
    with pytest.raises(RuntimeError):
        ext.set_current_stream(1, 10**12)
    with pytest.raises((IndexError, RuntimeError)):
        ext.current_stream_handle(2)
    assert ext.current_stream_id(1) == 0


def test_current_stream_is_per_device(ext):
    h0, h1 = ext.current_stream_handle(0), ext.current_stream_handle(1)
    sid, handle = ext.use_new_stream(0)
    assert ext.current_stream_id(0) == sid
    assert ext.current_stream_handle(0) == handle != h0
    assert ext.current_stream_handle(1) == h1  # other device untouched
    assert ext.set_current_stream(0, 0) == sid
    assert ext.current_stream_handle(0) == h0

    sid1, handle1 = ext.use_new_stream(1)
    assert ext.current_stream_handle(1) == handle1 != h1
    assert ext.current_stream_handle(0) == h0


def test_current_stream_is_thread_local(ext):
    sid, handle = ext.use_new_stream(1)
    ext.set_device(1)
    seen = {}
    barrier = threading.Barrier(2)

    def worker():
        seen["before"] = (ext.current_device(), ext.current_stream_id(1), ext.current_stream_handle(1))
        wsid, whandle = ext.use_new_stream(1)
        seen["mine"] = (wsid, whandle, ext.current_stream_handle(1))
        barrier.wait()  # main thread checks while this thread still has its stream current
        barrier.wait()

    th = threading.Thread(target=worker)
    th.start()
    barrier.wait()
    assert ext.current_stream_id(1) == sid
    assert ext.current_stream_handle(1) == handle
    barrier.wait()
    th.join()

    assert seen["before"] == (0, 0, ext.default_stream_handle(1))
    wsid, whandle, wcur = seen["mine"]
    assert wcur == whandle and whandle not in (handle, ext.default_stream_handle(1))
    assert ext.current_device() == 1


def test_torch_stream_api(ext):
    """torch.Stream on the backend, and the device module's current_stream/set_stream (which go through
    torch.accelerator where it exists, through the backend's helpers before)."""
    mod = getattr(torch, BACKEND_NAME)
    s = torch.Stream(device=DEV1)
    assert s.device == torch.device(DEV1)
    assert s.stream_id != 0
    assert s.query()
    s.synchronize()

    mod.set_stream(s)
    assert ext.current_stream_id(1) == s.stream_id
    assert ext.current_stream_handle(1) == ext.stream_handle(1, s.stream_id)
    assert mod.current_stream(1) == s
    assert mod.current_stream(0).stream_id == ext.current_stream_id(0) == 0


@NO_ACCELERATOR
def test_torch_accelerator_stream_api(ext):
    s = torch.Stream(device=DEV1)
    torch.accelerator.set_stream(s)
    assert ext.current_stream_id(1) == s.stream_id
    assert torch.accelerator.current_stream(1) == s
    assert torch.accelerator.current_stream(0).stream_id == ext.current_stream_id(0) == 0


@pytest.mark.skipif(not hasattr(torch.Stream, "native_handle"),
                    reason="torch.Stream.native_handle does not exist in this torch (< 2.11)")
def test_torch_stream_native_handle_is_the_backend_handle(ext):
    """From torch 2.11 torch asks the guard (getStreamNativeHandle) for a stream's raw handle."""
    s = torch.Stream(device=DEV1)
    assert s.native_handle == ext.stream_handle(1, s.stream_id) != 0
    torch.accelerator.set_stream(s)
    assert torch.accelerator.current_stream(1).native_handle == ext.current_stream_handle(1) == s.native_handle
    assert torch.accelerator.current_stream(0).native_handle == ext.current_stream_handle(0)


@pytest.mark.skipif(not hasattr(torch.Stream, "__enter__"), reason="torch.Stream is no context manager in this torch")
def test_torch_stream_context_manager(ext):
    ext.set_current_stream(0, 0)
    with torch.Stream(device=DEV0) as s0:
        assert ext.current_stream_id(0) == s0.stream_id != 0
        assert ext.current_stream_handle(0) == ext.stream_handle(0, s0.stream_id)
    assert ext.current_stream_id(0) == 0


def test_events(ext):
    a = torch.Event(device=DEV0, enable_timing=True)
    b = torch.Event(device=DEV0, enable_timing=True)
    a.record()
    b.record()
    assert a.query() and b.query()
    b.synchronize()
    assert a.elapsed_time(b) >= 0.0
    torch.Stream(device=DEV0).wait_event(a)


# --------------------------------------------------------------------------- allocator


@pytest.mark.parametrize("dev", [0, 1])
def test_allocator_counts_rise_and_fall(ext, dev):
    live, total = ext.live_allocations(), ext.total_allocations()
    live_bytes = ext.live_bytes()
    t = torch.empty(100, dtype=torch.float32, device=f"{BACKEND_NAME}:{dev}")
    assert ext.live_allocations() == live + 1
    assert ext.total_allocations() == total + 1
    assert ext.live_bytes() == live_bytes + 400
    assert t.data_ptr() % 64 == 0
    assert ext.device_of_ptr(t.data_ptr()) == dev
    assert ext.device_of_ptr(t.data_ptr() + 399) == dev
    u = torch.empty_strided((4, 5), (1, 4), device=f"{BACKEND_NAME}:{dev}")
    assert u.stride() == (1, 4)
    assert ext.live_allocations() == live + 2
    del t, u
    assert ext.live_allocations() == live
    assert ext.total_allocations() == total + 2
    assert ext.live_bytes() == live_bytes


def test_zero_size_tensor_does_not_allocate(ext):
    live, total = ext.live_allocations(), ext.total_allocations()
    t = torch.empty(0, 3, device=DEV1)
    assert t.shape == (0, 3) and t.device == torch.device(DEV1)
    assert ext.live_allocations() == live and ext.total_allocations() == total
    assert t.cpu().shape == (0, 3)


def test_views_keep_storage_alive(ext):
    live = ext.live_allocations()
    base = torch.arange(10.0).to(DEV0)
    v = base[2:5]
    del base
    assert ext.live_allocations() == live + 1
    assert v.cpu().tolist() == [2.0, 3.0, 4.0]
    del v
    assert ext.live_allocations() == live


def test_untyped_storage(ext):
    s = torch.UntypedStorage(16, device=DEV1)
    assert s.device == torch.device(DEV1) and s.nbytes() == 16
    s.resize_(64)
    assert s.nbytes() == 64


# --------------------------------------------------------------------------- copies


DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int8,
          torch.uint8, torch.bool, torch.complex64]


@pytest.mark.parametrize("dev", [DEV0, DEV1])
@pytest.mark.parametrize("dtype", DTYPES)
def test_copy_round_trip(ext, dev, dtype):
    g = torch.Generator().manual_seed(0)
    src = (torch.randn(3, 5, generator=g) * 10).to(dtype)
    t = src.to(dev)
    assert t.device == torch.device(dev) and t.dtype == dtype
    assert torch.equal(t.cpu(), src)
    # non-contiguous source on CPU and on the device
    assert torch.equal(src.t().to(dev).cpu(), src.t())
    assert torch.equal(t.t().cpu(), src.t())
    # copy_ into an existing device tensor, with dtype conversion
    wide = torch.complex128 if dtype.is_complex else torch.float64
    d = torch.empty(3, 5, dtype=wide, device=dev)
    d.copy_(src)
    assert torch.equal(d.cpu(), src.to(wide))


def test_copy_between_devices(ext):
    src = torch.arange(24, dtype=torch.int32).reshape(2, 3, 4)
    a = src.to(DEV0)
    b = a.to(DEV1)
    assert b.device == torch.device(DEV1)
    assert a.data_ptr() != b.data_ptr()
    assert ext.device_of_ptr(b.data_ptr()) == 1
    assert torch.equal(b.cpu(), src)
    c = torch.empty(3, 4, dtype=torch.int32, device=DEV0)
    c.copy_(b[1])
    assert torch.equal(c.cpu(), src[1])
    # broadcast copy
    c.copy_(torch.tensor([1, 2, 3, 4], dtype=torch.int32))
    assert torch.equal(c.cpu(), torch.tensor([1, 2, 3, 4], dtype=torch.int32).expand(3, 4))


def test_conj_and_neg_copies(ext):
    z = torch.randn(4, dtype=torch.complex64)
    assert torch.equal(z.conj().to(DEV0).cpu(), z.conj().resolve_conj())
    d = z.to(DEV1)
    assert torch.equal(d.conj().cpu(), z.conj().resolve_conj())
    assert torch.equal(torch._neg_view(d).cpu(), -z)


# --------------------------------------------------------------------------- kernels


def test_fill_and_zero(ext):
    t = torch.empty(2, 3, device=DEV1)
    t.fill_(2.5)
    assert torch.equal(t.cpu(), torch.full((2, 3), 2.5))
    t[:, 1].fill_(-1)
    assert t.cpu()[:, 1].tolist() == [-1.0, -1.0]
    t.zero_()
    assert torch.equal(t.cpu(), torch.zeros(2, 3))
    assert torch.equal(torch.zeros(3, device=DEV0).cpu(), torch.zeros(3))
    assert torch.equal(torch.ones(3, device=DEV1).cpu(), torch.ones(3))


@pytest.mark.parametrize("dev", [DEV0, DEV1])
def test_views(ext, dev):
    ref = torch.arange(24.0).reshape(2, 3, 4)
    t = ref.to(dev)
    live = ext.live_allocations()
    views = {
        "view": (t.view(6, 4), ref.view(6, 4)),
        "view_infer": (t.view(-1), ref.view(-1)),
        "slice": (t[:, 1:, ::2], ref[:, 1:, ::2]),
        "select": (t[1], ref[1]),
        "transpose": (t.transpose(0, 2), ref.transpose(0, 2)),
        "permute": (t.permute(2, 0, 1), ref.permute(2, 0, 1)),
        "expand": (t[:, :1, :].expand(2, 3, 4), ref[:, :1, :].expand(2, 3, 4)),
        "as_strided": (t.as_strided((3, 2), (1, 3), 5), ref.as_strided((3, 2), (1, 3), 5)),
        "unsqueeze": (t.unsqueeze(1), ref.unsqueeze(1)),
        "reshape": (t.reshape(4, 6), ref.reshape(4, 6)),
        "diagonal": (t.diagonal(dim1=1, dim2=2), ref.diagonal(dim1=1, dim2=2)),
    }
    assert ext.live_allocations() == live  # no copies
    for name, (v, r) in views.items():
        assert v.device == torch.device(dev), name
        assert v.shape == r.shape and v.stride() == r.stride(), name
        assert v.storage_offset() == r.storage_offset(), name
        assert v.untyped_storage().data_ptr() == t.untyped_storage().data_ptr(), name
        assert torch.equal(v.cpu(), r), name
    # writes through a view land in the base
    t[1, :, 0].fill_(100.0)
    ref[1, :, 0] = 100.0
    assert torch.equal(t.cpu(), ref)
    # .contiguous() of a non-contiguous view copies
    c = t.transpose(0, 1).contiguous()
    assert c.is_contiguous() and torch.equal(c.cpu(), ref.transpose(0, 1).contiguous())
    with pytest.raises(RuntimeError):
        t.transpose(0, 1).view(-1)


@settings(max_examples=40, deadline=None)
@given(
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    data=st.data(),
)
def test_views_match_cpu(shape, data):
    load()
    ref = torch.arange(float(torch.Size(shape).numel())).reshape(shape)
    t = ref.to(DEV1)
    perm = data.draw(st.permutations(range(len(shape))))
    ref, t = ref.permute(*perm), t.permute(*perm)
    dim = data.draw(st.integers(0, len(shape) - 1))
    start = data.draw(st.integers(0, ref.shape[dim] - 1))
    step = data.draw(st.integers(1, 3))
    ref, t = ref.narrow(dim, start, ref.shape[dim] - start)[(slice(None),) * dim + (slice(None, None, step),)], \
        t.narrow(dim, start, t.shape[dim] - start)[(slice(None),) * dim + (slice(None, None, step),)]
    assert t.shape == ref.shape and t.stride() == ref.stride()
    assert t.storage_offset() == ref.storage_offset()
    assert torch.equal(t.cpu(), ref)
    assert torch.equal(t.reshape(-1).cpu(), ref.reshape(-1))


def test_resize(ext):
    t = torch.arange(4.0).to(DEV1)
    live = ext.live_allocations()
    t.resize_(2, 2)
    assert t.shape == (2, 2) and ext.live_allocations() == live
    assert torch.equal(t.cpu(), torch.arange(4.0).reshape(2, 2))
    t.resize_(3, 4)
    assert t.shape == (3, 4) and t.is_contiguous()
    assert t.cpu().reshape(-1)[:4].tolist() == [0.0, 1.0, 2.0, 3.0]  # contents kept
    assert ext.live_allocations() == live  # old block freed, new one live
    assert ext.device_of_ptr(t.data_ptr()) == 1
    e = torch.empty(0, device=DEV0)
    e.resize_(2, 3, 4, 5, memory_format=torch.channels_last)
    assert e.is_contiguous(memory_format=torch.channels_last)
    assert ext.device_of_ptr(e.data_ptr()) == 0


def test_set_overloads(ext):
    src = torch.arange(12.0).to(DEV1)
    a = torch.empty(0, device=DEV1)
    a.set_(src)
    assert a.data_ptr() == src.data_ptr() and torch.equal(a.cpu(), src.cpu())

    b = torch.empty(0, device=DEV1)
    b.set_(src.untyped_storage())
    assert b.shape == (12,) and b.data_ptr() == src.data_ptr()

    c = torch.empty(0, device=DEV1)
    c.set_(src.untyped_storage(), 2, (2, 3), (1, 2))
    assert c.storage_offset() == 2 and c.stride() == (1, 2)
    assert torch.equal(c.cpu(), torch.arange(12.0).as_strided((2, 3), (1, 2), 2))

    d = torch.empty(0, device=DEV1)
    d.set_(src.untyped_storage(), 4, (2, 2))
    assert d.is_contiguous() and d.cpu().tolist() == [[4.0, 5.0], [6.0, 7.0]]

    c.set_()
    assert c.shape == (0,) and c.device == torch.device(DEV1)

    with pytest.raises(RuntimeError):
        c.set_(torch.zeros(3).untyped_storage())


def test_cpu_fallback(ext):
    a = torch.arange(6.0).reshape(2, 3).to(DEV1)
    b = a + 1
    assert b.device == torch.device(DEV1)
    assert torch.equal(b.cpu(), torch.arange(1.0, 7.0).reshape(2, 3))
    a.mul_(2)
    assert a.device == torch.device(DEV1)
    assert torch.equal(a.cpu(), torch.arange(0.0, 12.0, 2.0).reshape(2, 3))
    assert a.sum().item() == 30.0
    assert torch.equal(torch.matmul(a, a.t()).cpu(), torch.matmul(a.cpu(), a.cpu().t()))


def test_torch_dlpack_round_trip(ext):
    # torch's own exporter/importer map PrivateUse1 <-> kDLExtDev
    t = torch.arange(6.0).to(DEV1)
    try:
        capsule = torch.utils.dlpack.to_dlpack(t)
    except RuntimeError as e:  # torch's exporter, not ours
        if "Cannot pack tensors on" not in str(e):
            raise
        pytest.skip(f"torch's own to_dlpack cannot export PrivateUse1 tensors in this torch ({e})")
    u = torch.utils.dlpack.from_dlpack(capsule)
    assert u.device == torch.device(DEV1) and u.data_ptr() == t.data_ptr()
