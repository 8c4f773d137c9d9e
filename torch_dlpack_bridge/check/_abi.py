"""The DLPack 1.3 C ABI in ctypes, and calls into a producer's exchange table from Python.

Why ctypes and not the package's compiled probe (`_probe`): the checker must run in any framework's
environment (Paddle, cuda.core, a torch without this package), where nothing of this project is built; ctypes
is in the standard library. The table's functions touch Python objects, so they are called through
PYFUNCTYPE prototypes, which keep the GIL; ctypes turns an exception the producer left set into a raised one,
which is how a call's "Python exception set" is seen (the return code of such a call is then not seen).
Deleters are called through CFUNCTYPE, which releases the GIL: DLPack requires a deleter to take it itself.
"""

from __future__ import annotations

import ctypes
from ctypes import (CFUNCTYPE, POINTER, PYFUNCTYPE, Structure, c_char_p, c_int, c_int32, c_int64, c_uint8,
                    c_uint16, c_uint32, c_uint64, c_void_p, py_object)
from typing import Any, Dict, Optional, Tuple

READ_ONLY, IS_COPIED = 1, 2  # the flags an export must agree on
kDLCPU = 1
CAPSULE_ATTR = "__dlpack_c_exchange_api__"
INT_ATTR = "__c_dlpack_exchange_api__"
CAPSULE_NAME = b"dlpack_exchange_api"


class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32), ("dtype", DLDataType),
                ("shape", POINTER(c_int64)), ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


class DLPackVersion(Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class DLManagedTensorVersioned(Structure):
    pass


DELETER = CFUNCTYPE(None, POINTER(DLManagedTensorVersioned))  # releases the GIL around the call
DLManagedTensorVersioned._fields_ = [("version", DLPackVersion), ("manager_ctx", c_void_p), ("deleter", c_void_p),
                                     ("flags", c_uint64), ("dl_tensor", DLTensor)]


class DLManagedTensor(Structure):  # pre-1.0 (`__dlpack__()` without max_version)
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p), ("deleter", c_void_p)]


class DLPackExchangeAPIHeader(Structure):
    pass


DLPackExchangeAPIHeader._fields_ = [("version", DLPackVersion), ("prev_api", POINTER(DLPackExchangeAPIHeader))]

FUNCTIONS = ("managed_tensor_allocator", "managed_tensor_from_py_object_no_sync",
             "managed_tensor_to_py_object_no_sync", "dltensor_from_py_object_no_sync", "current_work_stream")
OPTIONAL = ("dltensor_from_py_object_no_sync",)


class DLPackExchangeAPI(Structure):
    _fields_ = [("header", DLPackExchangeAPIHeader)] + [(name, c_void_p) for name in FUNCTIONS]


assert ctypes.sizeof(DLTensor) == 48 and ctypes.sizeof(DLManagedTensorVersioned) == 80
assert ctypes.sizeof(DLPackExchangeAPI) == 56

SET_ERROR = CFUNCTYPE(None, c_void_p, c_char_p, c_char_p)
ALLOCATOR = PYFUNCTYPE(c_int, POINTER(DLTensor), POINTER(POINTER(DLManagedTensorVersioned)), c_void_p, SET_ERROR)
FROM_PY = PYFUNCTYPE(c_int, py_object, POINTER(POINTER(DLManagedTensorVersioned)))
TO_PY = PYFUNCTYPE(c_int, POINTER(DLManagedTensorVersioned), POINTER(c_void_p))
DLTENSOR_FROM_PY = PYFUNCTYPE(c_int, py_object, POINTER(DLTensor))
STREAM = PYFUNCTYPE(c_int, c_int32, c_int32, POINTER(c_void_p))

_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype, _capsule_pointer.argtypes = c_void_p, [py_object, c_char_p]
_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype, _capsule_name.argtypes = c_char_p, [py_object]
_decref = ctypes.pythonapi.Py_DecRef
_decref.restype, _decref.argtypes = None, [c_void_p]


def is_capsule(obj: Any) -> bool:
    return type(obj).__name__ == "PyCapsule"


def capsule_name(capsule: Any) -> Optional[bytes]:
    return _capsule_name(capsule)


def capsule_pointer(capsule: Any, name: Optional[bytes]) -> int:
    return _capsule_pointer(capsule, name) or 0


class Outcome:
    """What a call did: `rc` (None when the producer left an exception set: ctypes raised it), `error` (that
    exception, or None)."""

    __slots__ = ("rc", "error")

    def __init__(self, rc: Optional[int], error: Optional[BaseException]):
        self.rc, self.error = rc, error

    @property
    def ok(self) -> bool:
        return self.rc == 0 and self.error is None

    def __str__(self) -> str:
        if self.error is not None:  # the first line only: torch appends a C++ backtrace to its messages
            message = (str(self.error).strip().splitlines() or [""])[0]
            return f"{type(self.error).__name__}: {message[:100]}{'...' if len(message) > 100 else ''}"
        return f"returned {self.rc} with no Python exception set"


def _call(fn, *args) -> Outcome:
    try:
        return Outcome(fn(*args), None)
    except Exception as error:  # noqa: BLE001: the producer's exception is the result
        return Outcome(None, error)


class Table:
    """A producer's DLPackExchangeAPI at `address`, with one method per function pointer."""

    def __init__(self, address: int):
        self.address = address
        self.api = DLPackExchangeAPI.from_address(address)

    def pointer(self, name: str) -> int:
        return getattr(self.api, name) or 0

    def dltensor(self, obj: Any) -> Tuple[Outcome, DLTensor]:
        out = DLTensor()
        return _call(DLTENSOR_FROM_PY(self.pointer("dltensor_from_py_object_no_sync")), obj, ctypes.byref(out)), out

    def export(self, obj: Any) -> Tuple[Outcome, Optional["Managed"]]:
        out = POINTER(DLManagedTensorVersioned)()
        outcome = _call(FROM_PY(self.pointer("managed_tensor_from_py_object_no_sync")), obj, ctypes.byref(out))
        return outcome, (Managed(out) if out else None)

    def to_python(self, managed_address: int) -> Tuple[Outcome, Any]:
        """Hands the DLManagedTensorVersioned at `managed_address` to the producer (which owns it from here)."""
        out = c_void_p()
        fn = TO_PY(self.pointer("managed_tensor_to_py_object_no_sync"))
        outcome = _call(fn, ctypes.cast(managed_address, POINTER(DLManagedTensorVersioned)), ctypes.byref(out))
        obj = None
        if out.value:  # a new reference, handed to us: take it over from C
            obj = ctypes.cast(out.value, py_object).value
            _decref(out.value)
        return outcome, obj

    def allocate(self, prototype: DLTensor) -> Tuple[Outcome, Optional["Managed"], list]:
        """(outcome, the tensor, the SetError calls as (kind, message))."""
        errors: list = []
        set_error = SET_ERROR(lambda ctx, kind, message: errors.append(
            ((kind or b"").decode(errors="replace"), (message or b"").decode(errors="replace"))))
        out = POINTER(DLManagedTensorVersioned)()
        fn = ALLOCATOR(self.pointer("managed_tensor_allocator"))
        outcome = _call(fn, ctypes.byref(prototype), ctypes.byref(out), None, set_error)
        return outcome, (Managed(out) if out else None), errors

    def stream(self, device_type: int, device_id: int) -> Tuple[Outcome, int]:
        out = c_void_p(0xDEAD)  # a value no producer returns: shows whether `out` was written
        outcome = _call(STREAM(self.pointer("current_work_stream")), device_type, device_id, ctypes.byref(out))
        return outcome, (out.value or 0)


class Managed:
    """A DLManagedTensorVersioned the checker owns until `release()` (or hands over)."""

    def __init__(self, pointer):
        self.address = ctypes.cast(pointer, c_void_p).value
        self.struct = pointer.contents

    def release(self) -> None:
        """Calls the producer's deleter once (from this thread, the GIL released by ctypes)."""
        address, self.address = self.address, 0
        if address and self.struct.deleter:
            DELETER(self.struct.deleter)(ctypes.cast(address, POINTER(DLManagedTensorVersioned)))


def ndim_tuple(pointer, ndim: int) -> Optional[Tuple[int, ...]]:
    """shape or strides as a tuple: () when ndim is 0 (DLPack lets both be NULL then), None for NULL otherwise."""
    if ndim == 0:
        return ()
    return None if not pointer else tuple(pointer[i] for i in range(ndim))


def describe(t: DLTensor, flags: Optional[int] = None) -> Dict[str, Any]:
    """A DLTensor as plain values (the pointers read now, while valid)."""
    ndim = t.ndim
    if not 0 <= ndim <= 64:
        return {"ndim": ndim}
    shape = ndim_tuple(t.shape, ndim)
    return {"data": t.data or 0, "byte_offset": t.byte_offset, "address": (t.data or 0) + t.byte_offset,
            "ndim": ndim, "shape": shape, "strides": ndim_tuple(t.strides, ndim),
            "dtype": (t.dtype.code, t.dtype.bits, t.dtype.lanes), "device": (t.device.device_type, t.device.device_id),
            "flags": flags}


def numel(shape) -> int:
    n = 1
    for s in shape or ():
        n *= s
    return n


def nbytes(d: Dict[str, Any]) -> int:
    """Bytes from the first element to one past the last (positive strides only; 0 when there is none)."""
    n = numel(d["shape"])
    if n == 0 or d["strides"] is None:
        return 0
    if any(s < 0 for s in d["strides"]):
        return 0
    last = sum((size - 1) * stride for size, stride in zip(d["shape"], d["strides"]))
    return (last + 1) * ((d["dtype"][1] * d["dtype"][2] + 7) // 8)


def reference(obj: Any) -> Tuple[Optional[Dict[str, Any]], Optional[BaseException], Any]:
    """The object's own `__dlpack__()` (max_version=(1, 3) when it takes it): (description, refusal, capsule).
    Keep the capsule while the description's memory is used: dropping it runs the producer's deleter."""
    try:
        try:
            capsule = obj.__dlpack__(max_version=(1, 3))
        except TypeError:
            capsule = obj.__dlpack__()
    except Exception as error:  # noqa: BLE001: a refusal is a result
        return None, error, None
    name = capsule_name(capsule) if is_capsule(capsule) else None
    if name not in (b"dltensor_versioned", b"dltensor"):  # nothing to read (a used or foreign capsule, an int)
        seen = f"a capsule named {name!r}" if is_capsule(capsule) else f"a {type(capsule).__name__}"
        return None, TypeError(f"__dlpack__() returned {seen}, not a 'dltensor' capsule"), None
    if name == b"dltensor_versioned":
        m = DLManagedTensorVersioned.from_address(capsule_pointer(capsule, name))
        return describe(m.dl_tensor, m.flags), None, capsule
    m = DLManagedTensor.from_address(capsule_pointer(capsule, name))
    return describe(m.dl_tensor), None, capsule


def _counting_deleter() -> int:
    """The address of libc's `sem_post`, used as the deleter of the checker's own tensors (0 where it cannot count).

    `sem_post` atomically adds one to the 32-bit value at the start of what it is given: here
    `version.major`, so the struct counts its own deleter calls, from any thread, with or without the GIL, on
    GIL and free-threaded builds alike (glibc and musl keep the value first). `manager_ctx` must be NULL (it is
    read as the semaphore's private flag). A deleter written in Python (a ctypes callback) would misbehave when
    a producer calls it with a Python exception set (a legal thing for C code to do): ctypes reports the
    exception as unraisable and drops it."""
    try:
        address = ctypes.cast(ctypes.CDLL(None).sem_post, c_void_p).value or 0
    except (AttributeError, OSError):
        return 0
    probe = DLManagedTensorVersioned(version=DLPackVersion(1, 3))
    CFUNCTYPE(c_int, c_void_p)(address)(ctypes.addressof(probe))
    return address if (probe.version.major, probe.version.minor) == (2, 3) else 0


COUNTING_DELETER = _counting_deleter()


def own_tensor(data_address: Optional[int], dtype: Tuple[int, int, int], shape, strides, version=(1, 3), flags: int = 0,
               keep: Any = None, byte_offset: int = 0):
    """A DLManagedTensorVersioned made by the checker (a producer of its own), for the import cases: returns
    (address, a function giving the number of deleter calls so far). `shape` or `strides` None: NULL.
    The deleter is COUNTING_DELETER (the caller checks that it is not 0)."""
    ndim = len(shape) if shape is not None else len(strides or ())
    arrays = [None if values is None else (c_int64 * max(ndim, 1))(*values) for values in (shape, strides)]
    pointers = [ctypes.cast(a, POINTER(c_int64)) if a is not None else None for a in arrays]
    m = DLManagedTensorVersioned()
    m.version = DLPackVersion(*version)
    m.flags = flags
    m.dl_tensor = DLTensor(data_address, DLDevice(kDLCPU, 0), ndim, DLDataType(*dtype), pointers[0], pointers[1],
                           byte_offset)
    m.deleter = COUNTING_DELETER
    _kept.append((m, arrays, keep))  # alive for the process: a late call stays safe
    return ctypes.addressof(m), lambda: (m.version.major - version[0]) & 0xFFFFFFFF


_kept: list = []
