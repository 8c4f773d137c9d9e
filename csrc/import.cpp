// Import: DLManagedTensorVersioned from any producer -> torch tensor, without a copy.
#include <c10/core/Storage.h>
#include <c10/core/TensorImpl.h>
#include "torch_python.h"

#include <algorithm>
#include <string>

#include "bridge.h"
#include "errors.h"
#include "mapping.h"

namespace tdb {
namespace {

// Runs the producer's deleter; the DataPtr of the imported storage calls this when the last view dies.
void release_producer_tensor(void* ctx) noexcept {
  auto* m = static_cast<DLManagedTensorVersioned*>(ctx);
  if (m->deleter != nullptr) m->deleter(m);
}

// Runs `release` (which may end in the producer's deleter) with the exception meant for the caller put
// aside: a deleter that runs Python code (a ctypes callback, a Python-backed producer) would otherwise fail
// on it or clear it, leaking the producer's tensor and leaving -1 without an exception. Failure paths only
// (the caller holds the GIL: managed_tensor_to_py_object_no_sync needs it).
template <class Release>
void release_keeping_error(Release&& release) noexcept {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  release();
  PyErr_Restore(type, value, traceback);
}

// Bytes spanned by a strided tensor with `numel` > 0 elements, checking every step for overflow.
size_t span_bytes(const DLTensor& t, const int64_t* strides, size_t item_size) {
  uint64_t last = 0;  // offset, in elements, of the last element
  for (int32_t i = 0; i < t.ndim; ++i) {
    uint64_t step;
    if (strides[i] < 0) fail(ErrorKind::Buffer, "torch tensors cannot have negative strides");
    if (__builtin_mul_overflow(static_cast<uint64_t>(t.shape[i] - 1), static_cast<uint64_t>(strides[i]), &step) ||
        __builtin_add_overflow(last, step, &last)) {
      fail(ErrorKind::Value, "DLPack tensor extent overflows");
    }
  }
  uint64_t bytes;
  if (__builtin_add_overflow(last, 1, &last) || __builtin_mul_overflow(last, item_size, &bytes) ||
      bytes > static_cast<uint64_t>(INT64_MAX)) {
    fail(ErrorKind::Value, "DLPack tensor extent overflows");
  }
  return static_cast<size_t>(bytes);
}

// Validates `m` and builds the tensor. Until the DataPtr is made, ownership stays with the caller.
at::Tensor import_tensor(DLManagedTensorVersioned* m, bool& owned_by_tensor) {
  const DLTensor& t = m->dl_tensor;
  const int64_t numel = checked_numel(t.ndim, t.shape);
  const c10::ScalarType scalar_type = torch_dtype_of(t.dtype, ErrorKind::Buffer);
  if ((m->flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED) && t.dtype.bits < 8) {
    fail(ErrorKind::Buffer, "padded sub-byte DLPack data has no torch equivalent (torch packs fp4 pairs)");
  }
  int64_t own_strides[kMaxDims];  // when the producer's strides need filling in or fixing up
  const int64_t* strides = t.strides;
  if (t.ndim > 0 && strides == nullptr) {
    if (m->version.minor >= 2) fail(ErrorKind::Value, "DLPack >= 1.2 tensor has ndim > 0 and NULL strides");
    row_major_strides(t.ndim, t.shape, own_strides);  // before DLPack 1.2, NULL strides meant row-major
    strides = own_strides;
  }
  // A stride that is never used (a size-one dim: numpy gives negative ones after a reversal; or any dim
  // when there are no elements) may be negative; torch wants strides >= 0, so it becomes 1.
  for (int32_t i = 0; i < t.ndim; ++i) {
    if (strides[i] < 0 && (t.shape[i] == 1 || numel == 0)) {
      if (strides != own_strides) std::copy(strides, strides + t.ndim, own_strides);
      strides = own_strides;
      own_strides[i] = 1;
    }
  }
  if (numel > 0 && t.data == nullptr) fail(ErrorKind::Value, "DLPack tensor has elements but NULL data");
  const size_t item_size = c10::elementSize(scalar_type);
  // torch addresses elements, not bytes: a view cannot start inside an element (torch refuses it too).
  if (t.byte_offset != 0 && t.byte_offset % item_size != 0) {
    fail(ErrorKind::Buffer, "DLPack byte_offset " + std::to_string(t.byte_offset) +
                                " is not a multiple of the element size (" + std::to_string(item_size) + ")");
  }
  size_t nbytes = numel == 0 ? 0 : span_bytes(t, strides, item_size);
  const c10::Device device = device_of(t.device);
  // An opaque handle cannot be offset: the storage keeps it as it is and the view starts byte_offset in.
  const bool opaque = has_opaque_data_pointers(device.type());
  if (opaque && __builtin_add_overflow(nbytes, static_cast<size_t>(t.byte_offset), &nbytes)) {
    fail(ErrorKind::Value, "DLPack tensor extent overflows");
  }

  // A dense CPU tensor's key is CPU whatever its dtype (DLPack has no quantized dtypes): no lookup for it.
  const auto keys = c10::DispatchKeySet(device.is_cpu() ? c10::DispatchKey::CPU
                                                         : c10::computeDispatchKey(scalar_type, c10::kStrided, device));
  c10::Storage* allocated = opaque ? nullptr : unshared_allocation(m);
  if (allocated != nullptr) {
    // A tensor our allocator made: the new tensor takes its storage as it is; `m` (shape and strides read
    // first) is freed after, holding nothing. Until then the caller still owns `m`, which owns no memory.
    at::Tensor tensor = at::detail::make_tensor<c10::TensorImpl>(std::move(*allocated), keys,
                                                                 c10::scalarTypeToTypeMeta(scalar_type));
    tensor.unsafeGetTensorImpl()->set_sizes_and_strides(c10::IntArrayRef(t.shape, static_cast<size_t>(t.ndim)),
                                                        c10::IntArrayRef(strides, static_cast<size_t>(t.ndim)));
    owned_by_tensor = true;
    release_producer_tensor(m);
    return tensor;
  }
  // From here on the DataPtr owns `m`: any exception releases it through the producer's deleter, once.
  void* data = t.data == nullptr || opaque ? t.data : static_cast<char*>(t.data) + t.byte_offset;
  c10::DataPtr data_ptr(data, m, release_producer_tensor, device);
  owned_by_tensor = true;
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, std::move(data_ptr), /*allocator=*/nullptr,
                       /*resizable=*/false);
  at::Tensor tensor = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), keys,
                                                               c10::scalarTypeToTypeMeta(scalar_type));
  c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
  impl->set_sizes_and_strides(c10::IntArrayRef(t.shape, static_cast<size_t>(t.ndim)),
                              c10::IntArrayRef(strides, static_cast<size_t>(t.ndim)));
  if (opaque) impl->set_storage_offset(static_cast<int64_t>(t.byte_offset / item_size));
  return tensor;
}

}  // namespace

int managed_tensor_to_py_object_no_sync(DLManagedTensorVersioned* m, void** out_py_object) noexcept {
  if (m == nullptr) return raise_python(ErrorKind::Value, "DLPack tensor must not be NULL");
  if (out_py_object != nullptr) *out_py_object = nullptr;
  // A different major version means a different layout: only the deleter may be touched.
  if (m->version.major != DLPACK_MAJOR_VERSION || out_py_object == nullptr) {
    const uint32_t major = m->version.major;
    release_producer_tensor(m);
    if (out_py_object == nullptr) return raise_python(ErrorKind::Value, "out_py_object must not be NULL");
    PyErr_Format(PyExc_BufferError, "DLPack major version %u is not supported (expected %d)", major,
                 DLPACK_MAJOR_VERSION);
    return -1;
  }
  const uint64_t flags = m->flags;  // `m` may be released by the time the flags are needed
  bool owned_by_tensor = false;
  at::Tensor tensor;
  const int status = guarded([&] { tensor = import_tensor(m, owned_by_tensor); });
  if (status != 0) {
    if (!owned_by_tensor) release_keeping_error([m] { release_producer_tensor(m); });
    return -1;
  }
  // Wrapping a fresh tensor fails only when its Python object cannot be allocated, whatever torch calls that
  // (c10::OutOfMemoryError in 2.13, a plain c10::Error in 2.10-2.12, a MemoryError in 2.4): MemoryError here.
  // Dropping the tensor releases `m` through the DataPtr.
  PyObject* py = nullptr;
  if (guarded([&] { py = THPVariable_Wrap(tensor); }) != 0 || py == nullptr) {
    if (!PyErr_Occurred() || !PyErr_ExceptionMatches(PyExc_MemoryError)) {
      PyErr_Clear();
      PyErr_SetString(PyExc_MemoryError,
                      "torch_dlpack_bridge: cannot allocate the Python object of the imported tensor");
    }
    release_keeping_error([&] { tensor.reset(); });
    return -1;
  }
  // torch has no read-only tensors. Like torch.from_numpy with a non-writable array, say so rather than
  // refuse: a refusal would only send consumers to __dlpack__, which drops the flag silently. Under
  // `-W error` the warning is an exception and the import fails (dropping `py` and `tensor` releases `m`).
  if (C10_UNLIKELY(flags & DLPACK_FLAG_BITMASK_READ_ONLY) &&
      PyErr_WarnEx(PyExc_UserWarning,
                   "torch_dlpack_bridge: the DLPack producer marked this tensor read-only; torch has no "
                   "read-only tensors, so writing to it is undefined behaviour (copy it if you need to write)",
                   1) != 0) {
    release_keeping_error([&] {
      Py_DECREF(py);
      tensor.reset();
    });
    return -1;
  }
  *out_py_object = py;
  return 0;
}

}  // namespace tdb
