"""Allocation through the table: managed_tensor_allocator, called by the torch-free C consumer `_probe`.

`_probe.allocate(api, shape, dtype, device)` builds the prototype, passes a SetError that records its calls,
and raises the builtin exception SetError named only if SetError ran exactly once on failure and never on
success (otherwise SystemError): so `pytest.raises(ValueError)` below also checks the SetError contract.
"""

import ctypes
import gc

import numpy as np
import pytest
import torch

from conftest import (CPU, DLPACK_DTYPES, FLOAT32, MISSING_DLPACK_DTYPES, cuda_device_0_expectation, kDLCPU, kDLCUDA,
                      kDLCUDAHost, kDLOpenCL)
from table_ctypes import GARBAGE, allocate_into

kDLROCMHost, kDLCUDAManaged = 11, 13


def contiguous_strides(shape):
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def numel(shape):
    return int(np.prod(shape, dtype=object)) if shape else 1


SHAPES = [[], [0], [5], [2, 3, 4], [1, 5, 1], [3, 0, 2], [2] * 10]


# ---- what is allocated ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", list(DLPACK_DTYPES), ids=lambda d: str(d).replace("torch.", ""))
def test_allocator_takes_dtype_from_prototype(probe, api, dtype):
    dl = DLPACK_DTYPES[dtype]
    m = probe.allocate(api, [3, 4], dl, CPU)
    data, device, ndim, dl_dtype, shape, strides, byte_offset = m.info()
    assert (device, ndim, dl_dtype, shape, strides, byte_offset) == (CPU, 2, dl, (3, 4), (4, 1), 0)
    assert data != 0
    x = m.to_python(api)
    assert x.dtype is dtype and x.shape == (3, 4) and x.data_ptr() == data


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_allocator_takes_shape_from_prototype_with_contiguous_strides(probe, api, shape):
    m = probe.allocate(api, shape, FLOAT32, CPU)
    data, device, ndim, dl_dtype, got_shape, strides, byte_offset = m.info()
    assert (device, ndim, dl_dtype, byte_offset) == (CPU, len(shape), FLOAT32, 0)
    assert got_shape == tuple(shape) and strides == contiguous_strides(shape)  # () not NULL for 0-dim
    assert (data == 0) == (numel(shape) == 0), "data is NULL exactly when the tensor is empty"


@pytest.mark.parametrize("shape", [[], [5], [2, 3, 4]], ids=str)
def test_allocation_is_version_1_3_with_no_flags(probe, api, shape):
    m = probe.allocate(api, shape, FLOAT32, CPU)
    assert m.version() == (1, 3)
    assert m.flags() == 0


def test_allocated_memory_is_aligned_like_torch_cpu_allocations(probe, api):
    for n in (1, 3, 17, 1000):
        assert probe.allocate(api, [n], (0, 8, 1), CPU).info()[0] % 64 == 0


def test_allocated_memory_is_writable_and_read_through_the_pointer(probe, api):
    m = probe.allocate(api, [2, 3], (0, 32, 1), CPU)
    data = m.info()[0]
    x = m.to_python(api)
    x.copy_(torch.arange(6, dtype=torch.int32).reshape(2, 3))
    assert probe.read(data, 24) == np.arange(6, dtype=np.int32).tobytes()


def test_allocations_are_distinct(probe, api):
    kept = [probe.allocate(api, [16], FLOAT32, CPU) for _ in range(8)]
    assert len({m.info()[0] for m in kept}) == len(kept)


@pytest.mark.parametrize("device_id", [0, 3, -1])
def test_allocator_on_cpu_ignores_device_id(probe, api, device_id):
    assert probe.allocate(api, [4], FLOAT32, (kDLCPU, device_id)).info()[1] == CPU


def test_allocation_deleter_runs_once_on_delete(probe, api):
    m = probe.allocate(api, [4], FLOAT32, CPU)
    m.count_deletes()
    start = probe.deleter_calls()
    m.delete()
    assert probe.deleter_calls() == start + 1


def test_allocation_deleter_runs_once_when_imported_tensor_dies(probe, api):
    m = probe.allocate(api, [4], FLOAT32, CPU)
    m.count_deletes()
    start = probe.deleter_calls()
    x = m.to_python(api)
    view = x[1:]
    del x
    gc.collect()
    assert probe.deleter_calls() == start
    del view
    gc.collect()
    assert probe.deleter_calls() == start + 1


@pytest.mark.parametrize("shape", [[], [5], [2, 3, 4], [0, 3]], ids=str)
def test_allocation_matches_native_table_except_data(probe, api, native, shape):
    ours, theirs = probe.allocate(api, shape, FLOAT32, CPU), probe.allocate(native, shape, FLOAT32, CPU)
    assert (ours.version(), ours.flags()) == (theirs.version(), theirs.flags())
    assert ours.info()[1:] == theirs.info()[1:]


# ---- errors -----------------------------------------------------------------------------------------

# (shape, dtype, device, exception, message fragment)
BAD_PROTOTYPES = {
    "unknown_dtype_code": ([4], (99, 32, 1), CPU, ValueError, "code 99"),
    "opaque_handle_dtype": ([4], (3, 64, 1), CPU, ValueError, "code 3"),
    "float_with_24_bits": ([4], (2, 24, 1), CPU, ValueError, "bits 24"),
    "float_with_2_lanes": ([4], (2, 32, 2), CPU, ValueError, "lanes 2"),
    "float4_with_1_lane": ([4], (17, 4, 1), CPU, ValueError, "code 17"),
    "bool_1_bit": ([4], (6, 1, 1), CPU, ValueError, "code 6"),
    "negative_size": ([-4], FLOAT32, CPU, ValueError, "negative"),
    "negative_size_after_zero": ([0, -1], FLOAT32, CPU, ValueError, "negative"),
    "overflowing_element_count": ([2 ** 62, 8], FLOAT32, CPU, ValueError, "overflows"),
    "overflowing_byte_count": ([2 ** 62], FLOAT32, CPU, ValueError, "more than torch can address"),
    "overflowing_byte_count_of_complex128": ([2 ** 60], (5, 128, 1), CPU, ValueError, "more than torch can address"),
    "ndim_65": ([1] * 65, FLOAT32, CPU, ValueError, "ndim 65"),
    "unknown_device_type_99": ([4], FLOAT32, (99, 0), BufferError, "device type 99"),
    "opencl_device": ([4], FLOAT32, (kDLOpenCL, 0), BufferError, "device type 4"),
}


@pytest.mark.parametrize("case", list(BAD_PROTOTYPES))
def test_allocator_reports_bad_prototype_through_set_error_once(probe, api, case):
    shape, dtype, device, error, fragment = BAD_PROTOTYPES[case]
    with pytest.raises(error, match=fragment) as raised:
        probe.allocate(api, shape, dtype, device)
    assert type(raised.value) is error


@pytest.mark.parametrize("shape, dtype, message", [
    ([2 ** 61], FLOAT32, "2305843009213693952 elements of float32 (9223372036854775808 bytes) is more than torch "
                         "can address (2**63 - 1 bytes at most)"),
    ([2 ** 60], (5, 128, 1), "1152921504606846976 elements of complex128 (18446744073709551616 bytes) is more than "
                             "torch can address (2**63 - 1 bytes at most)"),
    ([2 ** 62, 8], FLOAT32, "shape (4611686018427387904, 8) overflows: more elements than torch can address "
                            "(2**63 - 1 at most)"),
], ids=["float32_2**61", "complex128_2**60", "elements_2**65"])
def test_a_size_past_what_torch_can_address_is_said_in_elements_and_bytes(probe, api, shape, dtype, message):
    """The sizes, not the prototype: a consumer puts its argument's name before them ("output: ...")."""
    with pytest.raises(ValueError) as raised:
        probe.allocate(api, shape, dtype, CPU)
    assert str(raised.value) == message


def test_failed_allocation_leaves_null_in_out_whatever_was_there():
    out = ctypes.c_void_p(GARBAGE)
    status, errors = allocate_into(None, out)
    assert (status, errors, out.value) == (-1, [("ValueError", "prototype must not be NULL")], None)


def test_allocator_refuses_dlpack_dtypes_this_torch_lacks(probe, api):
    """A DLPack 1.3 dtype whose torch dtype this torch does not have (float8_e8m0fnu before 2.7,
    float4_e2m1fn_x2 before 2.8) is a bad prototype: SetError once, with ValueError. (Nothing to refuse on a
    torch that has them all: every one is allocated by test_allocator_takes_dtype_from_prototype.)"""
    for name, dl in MISSING_DLPACK_DTYPES.items():
        with pytest.raises(ValueError, match=r"DLPack dtype \(code %d, bits %d, lanes %d\) has no torch" % dl) \
                as raised:
            probe.allocate(api, [4], dl, CPU)
        assert type(raised.value) is ValueError, name


def test_allocator_on_cuda_without_cuda_fails_with_clear_error(probe, api):
    if torch.cuda.is_available():
        pytest.skip("this torch has CUDA devices")
    with pytest.raises(Exception, match="(?i)cuda") as raised:
        probe.allocate(api, [4], FLOAT32, (kDLCUDA, 0))
    assert not isinstance(raised.value, SystemError), "SetError must run exactly once"


def test_allocator_refuses_cuda_managed_memory_it_cannot_provide(probe, api):
    """torch has no allocator for managed (unified) memory: it used to hand out ordinary device memory
    labelled kDLCUDA, a different kind than asked."""
    with pytest.raises(BufferError, match="managed"):
        probe.allocate(api, [4], FLOAT32, (kDLCUDAManaged, 0))


def pinned_host_expectation(device_type):
    """(exception, pattern) for a pinned host allocation of `device_type` on this torch, None if it works."""
    if (device_type == kDLROCMHost) != (torch.version.hip is not None):
        return BufferError, "cannot allocate"
    return cuda_device_0_expectation() if device_type == kDLCUDAHost else None


@pytest.mark.parametrize("device_type", [kDLCUDAHost, kDLROCMHost])
def test_allocator_gives_pinned_host_memory_or_a_clear_error_never_pageable_memory(probe, api, device_type):
    """A kDLCUDAHost prototype used to get pageable CPU memory labelled kDLCPU. Now: torch's pinned memory,
    labelled as asked, or (no GPU runtime here) the error a kDLCUDA allocation gives."""
    expected = pinned_host_expectation(device_type)
    if expected is not None:
        error, pattern = expected
        with pytest.raises(error, match=pattern):
            probe.allocate(api, [4], FLOAT32, (device_type, 0))
        return
    m = probe.allocate(api, [4], FLOAT32, (device_type, 0))
    assert m.info()[1] == (device_type, 0)
    t = m.to_python(api)
    assert t.device.type == "cpu" and t.is_pinned()


def test_allocator_reports_cpu_allocation_failure_as_memory_error(probe, api):
    """2**47 bytes (more than this machine can map): torch's CPU allocator fails with a plain c10::Error; the
    README promises MemoryError through SetError, once."""
    with pytest.raises(MemoryError, match="allocate"):
        probe.allocate(api, [2 ** 45], FLOAT32, CPU)


@pytest.mark.parametrize("case", ["unknown_dtype_code", "negative_size", "unknown_device_type_99"])
def test_native_allocator_reports_every_failure_as_memory_error(probe, api, native, case):
    """Deliberate difference: torch's table names every failure MemoryError through SetError."""
    shape, dtype, device, error, _ = BAD_PROTOTYPES[case]
    with pytest.raises(MemoryError):
        probe.allocate(native, shape, dtype, device)
    with pytest.raises(error):
        probe.allocate(api, shape, dtype, device)
