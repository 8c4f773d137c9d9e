"""A torch.Tensor subclass whose table reports every tensor as cuda:0: device checks of consumers without a GPU.
This project's table, with dltensor_from_py_object_no_sync wrapped by a ctypes callback."""
import ctypes

import torch

import torch_dlpack_bridge  # noqa: F401  (the table wrapped is this project's)


class _Table(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("prev_api", ctypes.c_void_p)] + [
        (f, ctypes.c_void_p) for f in ("alloc", "from_py", "to_py", "view", "stream")]


_CAPSULE_NAME = b"dlpack_exchange_api"
_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype, _get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.restype, _new_capsule.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_torch_table = _Table.from_address(_get_pointer(torch.Tensor.__dlpack_c_exchange_api__, _CAPSULE_NAME))
_torch_view = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)(_torch_table.view)


@ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
def _cuda_view(obj, out):
    rc = _torch_view(obj, out)
    ctypes.c_int32.from_address(out + 8).value = 2  # DLTensor.device.device_type = kDLCUDA
    return rc


_fake_table = _Table.from_buffer_copy(_torch_table)
_fake_table.view = ctypes.cast(_cuda_view, ctypes.c_void_p).value


class FakeCuda(torch.Tensor):
    __dlpack_c_exchange_api__ = _new_capsule(ctypes.addressof(_fake_table), _CAPSULE_NAME, None)
