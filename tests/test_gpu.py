"""The table on a real CUDA device: streams, the caching allocator, pinned host memory, exports and imports
with offsets and strides, other producers (cupy, numba) and the example CUDA kernel.

These test the table, not kernels: values reach the device and come back by plain copies of whole contiguous
tensors or storages (host_view), and are compared on the CPU, so they hold wherever the CUDA runtime copies
memory, emulated devices included (FakeGPU, whose kernels do nothing). The tests marked `hardware` need what
only a GPU does (a kernel that computes, CUDA graph capture, the out-of-memory path): run the rest under
emulation with `-m "not hardware"`.

Skipped where torch sees no CUDA device (a skip is not a pass: `scripts/gpu_check.sh` runs this file on a GPU
machine and fails if it was skipped). Tests that need an optional package (cupy, numba, nvcc for the example)
skip alone, naming what is missing.
"""

import gc
import os
import shutil
import subprocess
import sys
import threading

import pytest
import torch

from conftest import FLOAT32, kDLCUDA, kDLCUDAHost

pytestmark = pytest.mark.skipif(not torch.cuda.is_available() or torch.version.hip is not None,
                                reason="needs a CUDA device (torch sees none, or this is a ROCm build)")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEVICES = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else [0]


def stream_of(probe, api, device):
    return probe.current_stream(api, kDLCUDA, device)


def torch_stream(device):
    return torch.cuda.current_stream(device).cuda_stream


def host_view(t):
    """The same view as `t` over a host copy of its whole storage: its values, read without a kernel (a
    storage copies as plain bytes; a strided view's own .cpu() would gather it on the device first)."""
    return torch.empty(0, dtype=t.dtype).set_(t.untyped_storage().cpu(), t.storage_offset(), t.shape, t.stride())


# ---- current_work_stream ------------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_stream_is_torch_current_stream(probe, api, device):
    assert stream_of(probe, api, device) == torch_stream(device)


@pytest.mark.parametrize("device", DEVICES)
def test_stream_follows_stream_context(probe, api, device):
    side = torch.cuda.Stream(device=device)
    assert side.cuda_stream != torch_stream(device)
    with torch.cuda.stream(side):
        assert stream_of(probe, api, device) == side.cuda_stream == torch_stream(device)
    assert stream_of(probe, api, device) == torch_stream(device) != side.cuda_stream


def test_stream_follows_set_stream(probe, api):
    before = torch.cuda.current_stream(0)
    side = torch.cuda.Stream(device=0)
    torch.cuda.set_stream(side)
    try:
        assert stream_of(probe, api, 0) == side.cuda_stream
    finally:
        torch.cuda.set_stream(before)
    assert stream_of(probe, api, 0) == before.cuda_stream


def test_stream_is_per_thread(probe, api):
    main = stream_of(probe, api, 0)
    seen, errors = {}, []
    barrier = threading.Barrier(2)

    def worker():
        try:
            side = torch.cuda.Stream(device=0)
            torch.cuda.set_stream(side)
            seen["thread"] = (stream_of(probe, api, 0), side.cuda_stream)
            barrier.wait(timeout=30)  # the main thread reads its stream while this one has another current
            barrier.wait(timeout=30)
        except Exception as e:  # reported to the main thread
            errors.append(e)

    t = threading.Thread(target=worker)
    t.start()
    barrier.wait(timeout=30)
    assert stream_of(probe, api, 0) == main
    barrier.wait(timeout=30)
    t.join()
    assert errors == []
    assert seen["thread"][0] == seen["thread"][1] != main


def test_stream_matches_native_table(probe, api, native):
    side = torch.cuda.Stream(device=0)
    with torch.cuda.stream(side):
        assert stream_of(probe, api, 0) == probe.current_stream(native, kDLCUDA, 0)


@pytest.mark.hardware
def test_stream_during_graph_capture_is_the_capture_stream_and_work_on_it_replays(probe, api):
    x = torch.zeros(1024, device="cuda")
    x.add_(1)  # warm up the kernel outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        handle = stream_of(probe, api, 0)
        assert handle == torch_stream(0)
        assert torch.cuda.is_current_stream_capturing()
        # launch on the returned raw handle, as a foreign kernel library would
        with torch.cuda.stream(torch.cuda.ExternalStream(handle)):
            x.add_(1)
    torch.cuda.synchronize()
    assert x.eq(1).all(), "capture does not run the work"
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    assert x.eq(4).all(), "the work launched on the returned stream was captured"


def test_stream_of_missing_device_is_value_error(probe, api):
    with pytest.raises(ValueError, match="no cuda device"):
        stream_of(probe, api, torch.cuda.device_count())


# ---- allocator -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_allocation_comes_from_the_caching_allocator_and_returns_to_it(probe, api, device):
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    m = probe.allocate(api, [1 << 20], FLOAT32, (kDLCUDA, device))
    info = m.info()
    assert info[1] == (kDLCUDA, device)
    assert torch.cuda.memory_allocated(device) >= before + (4 << 20)
    m.delete()
    assert torch.cuda.memory_allocated(device) == before


def test_allocation_is_usable_by_torch_after_import(probe, api):
    m = probe.allocate(api, [3, 5], FLOAT32, (kDLCUDA, 0))
    pointer = m.info()[0]
    t = m.to_python(api)
    assert t.is_cuda and t.shape == (3, 5) and t.stride() == (5, 1) and t.data_ptr() == pointer
    values = torch.arange(15.0).reshape(3, 5)
    t.copy_(values)
    assert torch.equal(t.cpu(), values)


def test_pinned_host_allocation_is_page_locked_and_labelled_cuda_host(probe, api):
    m = probe.allocate(api, [256], FLOAT32, (kDLCUDAHost, 0))
    assert m.info()[1] == (kDLCUDAHost, 0)
    t = m.to_python(api)
    assert t.device.type == "cpu" and t.is_pinned()
    t.copy_(torch.arange(256.0))
    on_gpu = t.to("cuda", non_blocking=True)
    torch.cuda.synchronize()
    assert torch.equal(on_gpu.cpu(), torch.arange(256.0))


@pytest.mark.hardware
def test_allocation_failure_is_memory_error(probe, api):
    total = torch.cuda.get_device_properties(0).total_memory
    with pytest.raises(MemoryError):
        probe.allocate(api, [total], FLOAT32, (kDLCUDA, 0))  # four times the device's memory


# ---- export and import ---------------------------------------------------------------------------------

CUDA_VIEWS = {
    "contiguous": lambda t: t,
    "offset_rows": lambda t: t[2:],
    "offset_and_step": lambda t: t[1:, 1::3],
    "transposed_slice": lambda t: t.t()[3:7],
    "expanded": lambda t: t[0:1].expand(4, 10),
    "empty": lambda t: t[3:3],
}


@pytest.mark.parametrize("view", list(CUDA_VIEWS))
@pytest.mark.parametrize("device", DEVICES)
def test_export_of_cuda_view_matches_torch_and_native(probe, api, native, view, device):
    t = CUDA_VIEWS[view](torch.arange(100.0).reshape(10, 10).to(f"cuda:{device}"))
    ours = probe.dltensor(api, t)
    assert ours[0] == (t.data_ptr() if t.numel() else 0)
    assert ours[1] == (kDLCUDA, device)
    assert ours[4] == tuple(t.shape) and ours[5] == t.stride() and ours[6] == 0
    assert probe.export(api, t).info() == ours
    theirs = probe.dltensor(native, t)
    assert theirs[1:6] == ours[1:6] and (t.numel() == 0 or theirs[0] == ours[0])


@pytest.mark.parametrize("view", list(CUDA_VIEWS))
def test_round_trip_of_cuda_view_aliases_and_keeps_values(probe, api, view):
    host = torch.arange(100.0).reshape(10, 10)
    t = CUDA_VIEWS[view](host.to("cuda"))
    back = probe.export(api, t).to_python(api)
    assert back.device == t.device and back.shape == t.shape and back.stride() == t.stride()
    assert torch.equal(host_view(back), CUDA_VIEWS[view](host))
    if t.numel():
        assert back.data_ptr() == t.data_ptr()
        # a write through the import (its storage, negated) is seen by the source: they share the memory
        storage = back.untyped_storage()
        storage.copy_((-torch.empty(0).set_(storage.cpu())).untyped_storage())
        assert torch.equal(host_view(t), CUDA_VIEWS[view](-host))


def test_import_of_cuda_struct_honours_byte_offset_and_strides(probe, api):
    host = torch.arange(64.0)
    owner = host.to("cuda")
    m = probe.make(owner.data_ptr(), (kDLCUDA, 0), FLOAT32, [3, 4], [8, 2], byte_offset=4 * 5, owner=owner)
    t = m.to_python(api)
    assert t.data_ptr() == owner.data_ptr() + 20
    assert torch.equal(host_view(t), host[5:].as_strided((3, 4), (8, 2)))


def test_import_of_cuda_managed_label_is_a_cuda_tensor(probe, api):
    host = torch.arange(8.0)
    owner = host.to("cuda")
    t = probe.make(owner.data_ptr(), (13, 0), FLOAT32, [8], [1], owner=owner).to_python(api)
    assert t.is_cuda and t.data_ptr() == owner.data_ptr() and torch.equal(t.cpu(), host)


def test_owning_cuda_export_survives_the_source(probe, api):
    t = torch.arange(1000.0).to("cuda")
    m = probe.export(api, t[10:])
    pointer = m.info()[0]
    del t
    gc.collect()
    torch.cuda.empty_cache()  # the block stays allocated: the export holds the storage
    back = m.to_python(api)
    assert back.data_ptr() == pointer and torch.equal(back.cpu(), torch.arange(10.0, 1000.0))


# ---- other producers -----------------------------------------------------------------------------------

def test_zero_copy_import_of_cupy_array(probe, api):
    cupy = pytest.importorskip("cupy")
    a = cupy.arange(24, dtype=cupy.float32).reshape(4, 6)[1:, ::2]
    try:
        capsule = a.__dlpack__(max_version=(1, 0))
    except TypeError:
        pytest.skip("this cupy makes no versioned DLPack capsule")
    t = probe.from_capsule(capsule).to_python(api)
    assert t.is_cuda and t.data_ptr() == a.data.ptr
    assert t.shape == a.shape and t.stride() == tuple(s // 4 for s in a.strides)
    assert torch.equal(host_view(t), torch.from_numpy(cupy.asnumpy(a)))


def test_zero_copy_import_of_numba_device_array(probe, api):
    numba_cuda = pytest.importorskip("numba.cuda")
    import numpy as np

    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    arr = numba_cuda.to_device(host)
    iface = arr.__cuda_array_interface__
    strides = [s // 4 for s in iface["strides"]] if iface.get("strides") else [4, 1]
    device = torch.cuda.current_device()
    t = probe.make(iface["data"][0], (kDLCUDA, device), FLOAT32, list(iface["shape"]), strides,
                   owner=arr).to_python(api)
    assert t.data_ptr() == iface["data"][0]
    assert torch.equal(t.cpu(), torch.from_numpy(host))


def test_cupy_consumes_our_export_zero_copy(api):
    cupy = pytest.importorskip("cupy")
    t = torch.arange(10.0).to("cuda")[2:]
    a = cupy.from_dlpack(t)  # torch.Tensor.__dlpack__: torch's path, our table is not on it
    assert a.data.ptr == t.data_ptr()


# ---- the example CUDA kernel: these need kernels that compute (marked hardware) -----------------------

def find_nvcc():
    for candidate in [shutil.which("nvcc"), os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")]:
        if candidate and os.path.exists(candidate):
            return candidate
    return None


@pytest.fixture(scope="module")
def axpy_cuda(tmp_path_factory):
    nvcc = find_nvcc()
    if nvcc is None or shutil.which("make") is None:
        pytest.skip("nvcc or make not available: the example CUDA kernel cannot be built here")
    out = tmp_path_factory.mktemp("axpy_cuda")
    include = os.path.join(REPO, "torch_dlpack_bridge", "include")
    cuda_home = os.path.dirname(os.path.dirname(nvcc))
    res = subprocess.run(["make", "cuda", f"PYTHON={sys.executable}", f"OUT={out}", f"TDB_INCLUDE={include}",
                          f"NVCC={nvcc}", f"CUDA_HOME={cuda_home}"],
                         cwd=os.path.join(REPO, "examples", "axpy_kernels"), capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    sys.path.insert(0, str(out))
    try:
        import axpy_cuda as module
    finally:
        sys.path.remove(str(out))
    return module


@pytest.mark.hardware
def test_example_kernel_gives_the_right_numbers(axpy_cuda, bridge_published):
    x = torch.arange(10000.0, device="cuda")[::2]
    y = torch.ones(5000, device="cuda")
    assert axpy_cuda.axpy_(3.0, x, y) is y
    torch.cuda.synchronize()
    assert torch.equal(y, 1 + 3 * torch.arange(0.0, 10000.0, 2.0, device="cuda"))


@pytest.mark.hardware
def test_example_kernel_runs_on_torch_current_stream(axpy_cuda, bridge_published):
    """Captured into a CUDA graph: only work on torch's current (capturing) stream is captured, so replays
    that change y prove the kernel ran there."""
    x = torch.full((4096,), 2.0, device="cuda")
    y = torch.zeros(4096, device="cuda")
    axpy_cuda.axpy_(0.0, x, y)  # first launch loads the module outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        axpy_cuda.axpy_(1.0, x, y)
    torch.cuda.synchronize()
    assert y.eq(0).all()
    for _ in range(5):
        graph.replay()
    torch.cuda.synchronize()
    assert y.eq(10).all()


@pytest.mark.hardware
def test_example_kernel_on_a_side_stream(axpy_cuda, bridge_published):
    x = torch.ones(1 << 20, device="cuda")
    y = torch.zeros(1 << 20, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        axpy_cuda.axpy_(2.0, x, y)
        total = y.sum()  # same stream: ordered after the kernel with no synchronization
    side.synchronize()
    assert total.item() == 2.0 * (1 << 20)
