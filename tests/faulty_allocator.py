"""A producer whose managed_tensor_allocator misbehaves in one chosen way (issue 38.1): torch tensors viewed as a
subclass whose type publishes a table that forwards every function to this project's table, except the allocator,
which calls the real one and then spoils what it returns. Built with ctypes: the consumer sees it through the ABI
alone, as it would see a faulty producer of another framework.

    Faulty = faulty_type("null_strides")
    x = torch.ones(5).as_subclass(Faulty)   # a kernel's Out::empty_like(x) now meets the fault
"""

import ctypes

import torch

from table_ctypes import DLTensor, ExchangeAPI, ManagedTensorVersioned, table

# The allocator as ctypes sees it: the prototype, the out pointer, and SetError's context and function passed on.
ALLOCATOR = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(DLTensor),
                             ctypes.POINTER(ctypes.POINTER(ManagedTensorVersioned)), ctypes.c_void_p, ctypes.c_void_p)


def _spoil(fault, t):
    """Changes the allocated tensor `t` (a DLTensor) as `fault` says; the memory stays the producer's."""
    if fault == "null_strides":
        t.strides = None
    elif fault == "null_shape":
        t.shape = None
    elif fault == "one_row":  # the first size made 1, whatever was asked
        t.shape[0] = 1
    elif fault == "fewer_dims":
        t.ndim -= 1
    elif fault == "other_dtype":
        t.code, t.bits = 0, 32  # int32, whatever was asked
    elif fault == "every_other":  # the last dimension's stride 2: not row-major, and past the end of the memory
        t.strides[t.ndim - 1] = 2
    elif fault == "null_data":
        t.data = None
    elif fault == "other_device_type":
        t.device_type = 4 if t.device_type == 1 else 1  # kDLOpenCL for the CPU, else the CPU
    elif fault != "other_device_id":
        raise ValueError(fault)


FAULTS = ["null_strides", "null_shape", "one_row", "fewer_dims", "other_dtype", "every_other", "null_data",
          "other_device_type", "other_device_id"]


def faulty_type(fault):
    """A new torch.Tensor subclass whose type publishes a table with the allocator fault `fault` (one of FAULTS).
    `other_device_id` allocates on the device after the one asked for (a producer with several devices: tdbdev)."""
    inner = table()
    inner_allocate = ALLOCATOR(inner.managed_tensor_allocator)

    def allocate(prototype, out, error_ctx, set_error):
        asked = prototype.contents
        if fault == "other_device_id":
            asked.device_id += 1
        try:
            rc = inner_allocate(prototype, out, error_ctx, set_error)
        finally:
            if fault == "other_device_id":
                asked.device_id -= 1
        if rc == 0:
            _spoil(fault, out[0].contents.dl_tensor)
        return rc

    callback = ALLOCATOR(allocate)
    api = ExchangeAPI(inner.major, inner.minor, None, ctypes.cast(callback, ctypes.c_void_p).value,
                      inner.managed_tensor_from_py_object_no_sync, inner.managed_tensor_to_py_object_no_sync,
                      inner.dltensor_from_py_object_no_sync, inner.current_work_stream)
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype, new_capsule.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    name = ctypes.c_char_p(b"dlpack_exchange_api")
    capsule = new_capsule(ctypes.addressof(api), name, None)
    # The type keeps the table, its callback and the capsule's name alive as long as a consumer may use them.
    return type(f"Faulty_{fault}", (torch.Tensor,), {"__dlpack_c_exchange_api__": capsule,
                                                      "_faulty_keep": (api, callback, inner_allocate, name)})
