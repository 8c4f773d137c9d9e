"""current_work_stream on a machine without accelerators, called by the torch-free C consumer `_probe`.

`_probe.current_stream` pre-fills the out pointer with 0x1, so a returned 0 proves the table wrote NULL.
Host memory (CPU, CUDA host, ROCm host) has no stream: NULL, whatever the device id. A device this torch
cannot reach is a Python exception, never a crash. (Registered PrivateUse1 backends: see test_devices.py.)
"""

import re
import threading

import pytest
import torch

import torch_dlpack_bridge
from conftest import FLOAT32, cuda_device_0_expectation, kDLCPU, kDLCUDA, kDLCUDAHost, kDLOpenCL, run_python

kDLVulkan, kDLROCM, kDLROCMHost, kDLCUDAManaged, kDLWebGPU, kDLHexagon = 7, 10, 11, 13, 15, 16

HOST_DEVICES = [(kDLCPU, 0), (kDLCPU, 5), (kDLCPU, -1), (kDLCUDAHost, 0), (kDLCUDAHost, 2), (kDLROCMHost, 0)]
NO_TORCH_EQUIVALENT = [99, kDLOpenCL, kDLVulkan, kDLWebGPU, kDLHexagon, 0, -1]

requires_no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this torch has CUDA devices")


def host_id(device):
    return {kDLCPU: "cpu", kDLCUDAHost: "cuda_host", kDLROCMHost: "rocm_host"}[device[0]] + str(device[1])


@pytest.mark.parametrize("device", HOST_DEVICES, ids=host_id)
def test_host_memory_has_null_stream(probe, api, device):
    assert probe.current_stream(api, *device) == 0


@pytest.mark.parametrize("device", HOST_DEVICES, ids=host_id)
def test_host_stream_matches_native(probe, api, native, device):
    assert probe.current_stream(api, *device) == probe.current_stream(native, *device) == 0


def test_cpu_stream_through_legacy_int_address(probe):
    assert probe.current_stream(torch_dlpack_bridge.exchange_api_address(), kDLCPU, 0) == 0


def test_cpu_stream_from_another_thread(probe, api):
    results = []
    worker = threading.Thread(target=lambda: results.append(probe.current_stream(api, kDLCPU, 0)))
    worker.start()
    worker.join()
    assert results == [0]


@requires_no_cuda
@pytest.mark.parametrize("device", [(kDLCUDA, 0), (kDLCUDA, 1), (kDLCUDAManaged, 0)], ids=["cuda0", "cuda1", "managed0"])
def test_cuda_stream_without_cuda_raises_clear_error(probe, api, device):
    with pytest.raises(Exception, match="(?i)cuda") as raised:
        probe.current_stream(api, *device)
    assert not isinstance(raised.value, SystemError)


@requires_no_cuda
def test_native_returns_null_cuda_stream_without_cuda_where_ours_raises(probe, api, native):
    """Deliberate difference: torch's table answers NULL (the default stream) for a CUDA device that does
    not exist; ours says the device cannot be reached (BufferError on a CPU-only build: no cuda backend;
    ValueError on a CUDA build without GPU: no device 0). A CUDA build of torch 2.10-2.11 without a driver
    makes torch's own table raise RuntimeError instead."""
    try:
        assert probe.current_stream(native, kDLCUDA, 0) == 0
    except RuntimeError:
        assert torch.version.cuda is not None, "only a CUDA build without a driver may raise here"
    error, message = cuda_device_0_expectation()
    with pytest.raises(error, match=message) as raised:
        probe.current_stream(api, kDLCUDA, 0)
    assert type(raised.value) is error


@requires_no_cuda
def test_cuda_devices_stay_absent_after_fake_tensor_mode():
    """Entering FakeTensorMode (torch.compile and torch.export do) makes torch >= 2.10 swap the CUDA guard of
    a CUDA build that sees no GPU for a fake one reporting 8 devices, for the rest of the process. The current
    stream and an allocation on CUDA device 0 still fail as before, with the same error."""
    error, message = cuda_device_0_expectation()
    result = run_python(f"""
import torch, torch_dlpack_bridge
from torch._subclasses.fake_tensor import FakeTensorMode
from torch_dlpack_bridge import _probe as probe
api = torch.Tensor.__dlpack_c_exchange_api__
with FakeTensorMode():
    torch.empty(2, device="cuda")
for call in (lambda: probe.current_stream(api, {kDLCUDA}, 0), lambda: probe.allocate(api, [2], {FLOAT32}, ({kDLCUDA}, 0))):
    try:
        call()
        print("no error")
    except Exception as e:
        print(type(e).__name__, e)
""")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert len(lines) == 2, result.stdout
    for line in lines:
        assert line.startswith(error.__name__ + " ") and re.search(message, line), line


@pytest.mark.parametrize("device_type", NO_TORCH_EQUIVALENT)
def test_stream_of_device_type_without_torch_equivalent_raises_buffer_error(probe, api, device_type):
    with pytest.raises(BufferError, match=f"device type {device_type}"):
        probe.current_stream(api, device_type, 0)


@pytest.mark.skipif(torch.version.hip is not None, reason="kDLROCM is torch's CUDA on a ROCm build")
def test_rocm_stream_on_a_non_rocm_torch_raises_buffer_error(probe, api):
    with pytest.raises(BufferError, match="device type 10"):
        probe.current_stream(api, kDLROCM, 0)


@pytest.mark.parametrize("device_type", [99, kDLOpenCL, kDLVulkan])
def test_native_returns_null_stream_for_unknown_device_where_ours_raises(probe, api, native, device_type):
    """Deliberate difference: torch's table answers NULL for any device type it does not know."""
    assert probe.current_stream(native, device_type, 0) == 0
    with pytest.raises(BufferError):
        probe.current_stream(api, device_type, 0)


def test_failed_stream_query_leaves_no_error_behind(probe, api):
    with pytest.raises(BufferError):
        probe.current_stream(api, 99, 0)
    assert probe.current_stream(api, kDLCPU, 0) == 0
