"""The table's functions called through ctypes, for what the probe cannot show: what a function leaves in an
`out` argument the caller filled beforehand (the probe always passes NULL there)."""

import ctypes

import torch_dlpack_bridge

SET_ERROR = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p)
GARBAGE = 0xDEAD0  # what a caller's uninitialised `out` might hold


class ExchangeAPI(ctypes.Structure):
    """DLPackExchangeAPI (DLPack 1.3): the header, then the five functions in order."""

    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("prev_api", ctypes.c_void_p),
                ("managed_tensor_allocator", ctypes.c_void_p),
                ("managed_tensor_from_py_object_no_sync", ctypes.c_void_p),
                ("managed_tensor_to_py_object_no_sync", ctypes.c_void_p),
                ("dltensor_from_py_object_no_sync", ctypes.c_void_p), ("current_work_stream", ctypes.c_void_p)]


def table():
    return ExchangeAPI.from_address(torch_dlpack_bridge.exchange_api_address())


def export_into(obj, out):
    """managed_tensor_from_py_object_no_sync(obj, &out); a Python exception set by the table is raised."""
    function = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_void_p))(
        table().managed_tensor_from_py_object_no_sync)
    return function(obj, ctypes.byref(out))


def allocate_into(prototype, out):
    """managed_tensor_allocator(prototype, &out, ...) with a SetError that records [(kind, message)]."""
    errors = []
    set_error = SET_ERROR(lambda ctx, kind, message: errors.append((kind.decode(), message.decode())))
    function = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p,
                                SET_ERROR)(table().managed_tensor_allocator)
    return function(prototype, ctypes.byref(out), None, set_error), errors


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class ManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("manager_ctx", ctypes.c_void_p),
                ("deleter", DELETER), ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


def counted_float32_tensor(array):
    """A DLPack 1.3 tensor over the 1-D float32 NumPy `array`, in memory Python keeps (so a second deleter
    call touches nothing freed), whose deleter only records its calls: (struct, list of calls)."""
    calls = []
    shape = (ctypes.c_int64 * 1)(array.shape[0])
    strides = (ctypes.c_int64 * 1)(1)
    deleter = DELETER(lambda address: calls.append(address))
    m = ManagedTensorVersioned(1, 3, None, deleter, 0, DLTensor(array.ctypes.data, 1, 0, 1, 2, 32, 1, shape, strides, 0))
    m.kept = (array, shape, strides, deleter)
    return m, calls


def import_struct(m):
    """managed_tensor_to_py_object_no_sync(&m, &out): the tensor (a Python exception set by the table is raised)."""
    function = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.py_object))(
        table().managed_tensor_to_py_object_no_sync)
    out = ctypes.py_object()
    function(ctypes.addressof(m), ctypes.byref(out))
    tensor = out.value
    ctypes.pythonapi.Py_DecRef(out)  # the table's new reference, which ctypes does not own
    return tensor
