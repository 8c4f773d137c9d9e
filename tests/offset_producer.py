"""A DLPack producer whose tensors start `byte_offset` bytes after their `data` pointer. Every other producer
the tests use (torch, NumPy) gives byte_offset 0, so a consumer that ignored byte_offset would pass with them.

`Offset(array, shift)` exports `array` through NumPy's versioned capsule, rewritten in place: `data` moved back
by `shift` elements and `byte_offset` set to match, so data + byte_offset is still the array's first element.
Give it a view with at least `shift` elements of its base before it (e.g. `Offset(base[4:], 4)`): a consumer
that ignored byte_offset then reads the base's first elements (wrong values, but memory that exists).
"""
import ctypes

# DLManagedTensorVersioned (64-bit): version (8 bytes), manager_ctx, deleter, flags, then the DLTensor, in
# which data is at offset 0 and byte_offset at offset 40.
_DL_TENSOR = 32
_DATA, _BYTE_OFFSET = _DL_TENSOR, _DL_TENSOR + 40


def _capsule_pointer(capsule, name):
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return get(capsule, name)


class Offset:
    """Exports `array` with data = first element - shift elements, byte_offset = shift * itemsize."""

    def __init__(self, array, shift):
        self.array, self.shift = array, shift

    def __dlpack__(self, **kwargs):
        capsule = self.array.__dlpack__(max_version=(1, 0))  # NumPy's deleter frees through manager_ctx only
        address = _capsule_pointer(capsule, b"dltensor_versioned")
        nbytes = self.shift * self.array.itemsize
        ctypes.c_void_p.from_address(address + _DATA).value -= nbytes
        ctypes.c_uint64.from_address(address + _BYTE_OFFSET).value += nbytes
        return capsule

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()
