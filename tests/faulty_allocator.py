"""A producer whose managed_tensor_allocator misbehaves in one chosen way (issue 38.1): torch tensors viewed as a
subclass whose type publishes a table that forwards every function to this project's table, except the allocator,
which calls the real one and then spoils what it returns. Built with ctypes: the consumer sees it through the ABI
alone, as it would see a faulty producer of another framework.

    Faulty = faulty_type("null_strides")
    x = torch.ones(5).as_subclass(Faulty)   # a kernel's Out::empty_like(x) now meets the fault
"""

import ctypes
import mmap

import torch

from table_ctypes import DELETER, DLTensor, ExchangeAPI, ManagedTensorVersioned, table

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


READ_ONLY, IS_COPIED, IS_SUBBYTE_TYPE_PADDED = 1, 2, 4  # DLPACK_FLAG_BITMASK_*
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype, _libc.mmap.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                                            ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


def _read_only(managed, deleted, keep):
    """Points the allocated tensor (a ManagedTensorVersioned) at fresh memory mapped PROT_READ, flagged READ_ONLY, with a
    deleter that records its call in `deleted`, gives the producer its tensor back and unmaps that memory."""
    t = managed.dl_tensor
    size = t.bits // 8 * t.lanes
    for i in range(t.ndim):
        size *= t.shape[i]
    size = max(size, 1)
    address = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    assert address not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
    managed.dl_tensor.data = address
    managed.flags |= READ_ONLY
    inner_deleter = DELETER(ctypes.cast(managed.deleter, ctypes.c_void_p).value)  # a copy: the field is replaced below

    def deleter(pointer):
        deleted.append(pointer)
        inner_deleter(pointer)
        _libc.munmap(address, size)

    managed.deleter = DELETER(deleter)
    keep.append(managed.deleter)


FAULTS = ["null_strides", "null_shape", "one_row", "fewer_dims", "other_dtype", "every_other", "null_data",
          "other_device_type", "other_device_id"]
# Flags alone: harmless on a float32 output (a new tensor may say it is a copy; padding is for sub-byte elements).
FLAGS = {"is_copied": IS_COPIED, "padded": IS_SUBBYTE_TYPE_PADDED}


def faulty_type(fault):
    """A new torch.Tensor subclass whose type publishes a table with the allocator fault `fault` (one of FAULTS, FLAGS,
    or "read_only": memory mapped read-only and flagged so, its deleter's calls listed in the type's `faulty_deleted`).
    `other_device_id` allocates on the device after the one asked for (a producer with several devices: tdbdev)."""
    inner = table()
    inner_allocate = ALLOCATOR(inner.managed_tensor_allocator)
    deleted, keep = [], []  # the read-only tensors' deleter calls; their deleters, kept alive

    def allocate(prototype, out, error_ctx, set_error):
        asked = prototype.contents
        if fault == "other_device_id":
            asked.device_id += 1
        try:
            rc = inner_allocate(prototype, out, error_ctx, set_error)
        finally:
            if fault == "other_device_id":
                asked.device_id -= 1
        if rc == 0 and fault == "read_only":
            _read_only(out[0].contents, deleted, keep)
        elif rc == 0 and fault in FLAGS:
            out[0].contents.flags |= FLAGS[fault]
        elif rc == 0:
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
    return type(f"Faulty_{fault}", (torch.Tensor,), {"__dlpack_c_exchange_api__": capsule, "faulty_deleted": deleted,
                                                      "_faulty_keep": (api, callback, inner_allocate, name, keep)})
