/*!
 * \file torch_dlpack_bridge/allocate.h
 * \brief Streams and allocation: the producer's current work stream (`current_stream`) and new tensors from
 *        the producer's allocator (`allocate`, `allocate_like`), returned as owning handles.
 *
 * Included by consumer.h (and output.h, through it).
 */
#ifndef TORCH_DLPACK_BRIDGE_ALLOCATE_H_
#define TORCH_DLPACK_BRIDGE_ALLOCATE_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "torch_dlpack_bridge/checks.h"
#include "torch_dlpack_bridge/config.h"
#include "torch_dlpack_bridge/dlpack.h"
#include "torch_dlpack_bridge/dltensor.h"
#include "torch_dlpack_bridge/errors.h"
#include "torch_dlpack_bridge/managed.h"
#include "torch_dlpack_bridge/names.h"
#include "torch_dlpack_bridge/view.h"

namespace tdb {

/*!
 * \brief The producer's current work stream for `device` (cudaStream_t, hipStream_t, ...; not owned,
 * may be NULL for a default stream). Returns NULL for kDLCPU without asking the producer, and NULL (the
 * default stream, which `__dlpack__` was asked to order the data for) when `api` is nullptr. Launch kernels
 * on it to stay ordered with the producer's work. Throws the producer's error on failure.
 */
inline void* current_stream(const DLPackExchangeAPI* api, DLDevice device) {
  // No table (a tensor taken through __dlpack__): the producer was asked for the default stream.
  if (device.device_type == kDLCPU || !api) return nullptr;
  void* stream = nullptr;
  if (api->current_work_stream(device.device_type, device.device_id, &stream) != 0) throw Error::pending();
  return stream;
}

namespace detail {
struct AllocError {
  std::string kind, message;
  bool called = false;
};
inline void set_alloc_error(void* ctx, const char* kind, const char* message) {  // C callback: never throws
  try {
    AllocError* e = static_cast<AllocError*>(ctx);
    e->called = true;
    e->kind = kind ? kind : "RuntimeError";
    e->message = message ? message : "";
  } catch (...) {
  }
}
/*! \brief The builtin exception class called `kind` (e.g. "MemoryError"), else RuntimeError. Borrowed. */
inline PyObject* exception_class(const std::string& kind) {
  PyObject* builtins = PyEval_GetBuiltins();
  PyObject* cls = builtins ? PyDict_GetItemString(builtins, kind.c_str()) : nullptr;
  return (cls && PyExceptionClass_Check(cls)) ? cls : PyExc_RuntimeError;
}

/*! \brief How errors about an output start: "output: ", or "output 'out': " for a `tdb::named<kOut>` one. */
inline std::string output_prefix(const char* name) {
  return std::string("output") + (std::string(name) == "tensor" ? "" : std::string(" '") + name + "'") + ": ";
}

/*! \brief How an allocator's tensor differs from the request (kAsAsked: it does not). */
enum class AllocationFault {
  kAsAsked, kRank, kNoShape, kShape, kDtype, kDevice, kStrides, kNoData, kReadOnly, kPadded
};

/*!
 * \brief Compares what a producer's allocator returned with what was asked: the rank, the shape and strides
 * present, the sizes, the dtype, the device (its id too, except on the CPU, where torch answers cpu:0 whatever
 * id is asked), row-major strides and data wherever there are elements; then the flags: a kernel writes its
 * output, so memory flagged read-only (DLPACK_FLAG_BITMASK_READ_ONLY, perhaps mapped read-only: a write
 * there is a SIGSEGV) is refused, and so are sub-byte elements padded to a byte each (IS_SUBBYTE_TYPE_PADDED,
 * where bits * lanes < 8: the kernel writes them packed, as DLPack lays them out by default); IS_COPIED says
 * nothing about a new tensor. A kernel indexes the output with its own sizes, so any difference is an out-of-bounds
 * write. Each field is read only once the ones it depends on are known to be right (the strides once the shape
 * is known to be there).
 */
inline AllocationFault allocation_fault(const DLManagedTensorVersioned& m, int32_t ndim, const int64_t* shape,
                                        DLDataType dtype, DLDevice device) noexcept {
  const DLTensor& t = m.dl_tensor;
  if (t.ndim != ndim) return AllocationFault::kRank;
  if (ndim > 0 && (!t.shape || !t.strides)) return AllocationFault::kNoShape;
  for (int32_t i = 0; i < ndim; ++i)
    if (t.shape[i] != shape[i]) return AllocationFault::kShape;
  if (!same_dtype(t.dtype, dtype)) return AllocationFault::kDtype;
  if (t.device.device_type != device.device_type ||
      (device.device_type != kDLCPU && t.device.device_id != device.device_id))
    return AllocationFault::kDevice;
  if (!tdb::is_contiguous(t)) return AllocationFault::kStrides;
  if (!t.data && numel(t) != 0) return AllocationFault::kNoData;
  if (m.flags & DLPACK_FLAG_BITMASK_READ_ONLY) return AllocationFault::kReadOnly;
  if ((m.flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED) && t.dtype.bits * t.dtype.lanes < 8)
    return AllocationFault::kPadded;
  return AllocationFault::kAsAsked;
}

/*! \brief The BufferError for `fault` of the output `name`: what was asked, then what the producer got wrong. Out
 *  of line: the cold path. */
[[noreturn]] TDB_NOINLINE inline void refuse_allocation(const char* name, AllocationFault fault, const DLTensor& t,
                                                        int32_t ndim, const int64_t* shape, DLDataType dtype,
                                                        DLDevice device) {
  std::string got;
  switch (fault) {
    case AllocationFault::kRank: got = std::to_string(t.ndim) + " dimension(s)"; break;
    case AllocationFault::kNoShape: got = "a NULL shape or strides"; break;
    case AllocationFault::kShape: got = "shape " + shape_str(t.ndim, t.shape); break;
    case AllocationFault::kDtype: got = "dtype " + dtype_name(t.dtype); break;
    case AllocationFault::kDevice: got = "a tensor on " + device_name(t.device); break;
    case AllocationFault::kStrides: got = "strides " + shape_str(t.ndim, t.strides); break;
    case AllocationFault::kReadOnly: got = "read-only memory (DLPACK_FLAG_BITMASK_READ_ONLY)"; break;
    case AllocationFault::kPadded:
      got = "sub-byte elements padded to a byte each (DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED)";
      break;
    default: got = "no data (NULL) for " + std::to_string(numel(t)) + " element(s)"; break;
  }
  throw Error(PyExc_BufferError, output_prefix(name) + "producer allocator returned a tensor other than the one "
                                 "requested (" + dtype_name(dtype) + " " + shape_str(ndim, shape) + " on " +
                                 device_name(device) + ", row-major), got " + got);
}

/*! \brief allocate() of the output `name` (its tdb::named, or "tensor"), which its errors name first. */
inline ManagedTensor allocate_output(const char* name, const DLPackExchangeAPI* api, int32_t ndim,
                                     const int64_t* shape, DLDataType dtype, DLDevice device) {
  if (!api) throw Error(PyExc_TypeError, "tdb::allocate: no producer table to allocate with");
  int64_t small[8];  // the prototype's strides: on the stack up to 8 dimensions (a kernel's output, every call)
  std::vector<int64_t> large(ndim > 8 ? ndim : 0);
  int64_t* strides = ndim > 8 ? large.data() : small;
  for (int64_t i = ndim - 1, s = 1; i >= 0; s *= shape[i], --i) strides[i] = s;
  DLTensor proto{nullptr, device, ndim, dtype, const_cast<int64_t*>(shape), strides, 0};
  DLManagedTensorVersioned* out = nullptr;
  detail::AllocError err;
  if (api->managed_tensor_allocator(&proto, &out, &err, detail::set_alloc_error) != 0 || !out) {
    if (err.called) {
      PyErr_Clear();  // SetError is the report; drop anything the producer left set as well
      throw Error(exception_class(err.kind), output_prefix(name) + err.message);
    }
    throw_pending_as(output_prefix(name));
  }
  ManagedTensor result(out, api);
  const AllocationFault fault = allocation_fault(*result.get(), ndim, shape, dtype, device);
  if (fault != AllocationFault::kAsAsked) refuse_allocation(name, fault, result.dl(), ndim, shape, dtype, device);
  return result;
}
}  // namespace detail

/*!
 * \brief Allocates a new C-contiguous tensor through the producer's managed_tensor_allocator and returns
 * the owning handle (use .to_python() to return it to Python). A failure reported through SetError
 * becomes a Python exception of that kind (MemoryError, ValueError, ...) thrown as tdb::Error, its message
 * starting with `"output: "` (the producer's words do not say which tensor it failed to make). A tensor
 * other than the one asked for (rank, sizes, dtype, device, row-major strides, data, writable memory) is given
 * back to its producer and refused with a BufferError saying what differs.
 */
inline ManagedTensor allocate(const DLPackExchangeAPI* api, int32_t ndim, const int64_t* shape, DLDataType dtype,
                              DLDevice device) {
  return detail::allocate_output("tensor", api, ndim, shape, dtype, device);
}
/*! \brief allocate() with a shape list, e.g. allocate(api, {n, 3}, kFloat32, kCPU). */
inline ManagedTensor allocate(const DLPackExchangeAPI* api, std::initializer_list<int64_t> shape, DLDataType dtype,
                              DLDevice device) {
  return allocate(api, static_cast<int32_t>(shape.size()), shape.begin(), dtype, device);
}
/*! \brief allocate() a contiguous tensor with the shape, dtype and device of `like`, from its producer. */
inline ManagedTensor allocate_like(const TensorView& like) {
  if (!like.api())
    throw Error(PyExc_TypeError, detail::arg(like.name()) + "its producer has no DLPack exchange table "
                                 "(it was taken through __dlpack__), so it cannot allocate a tensor like it");
  return allocate(like.api(), like.ndim(), like.shape(), like.dtype(), like.device());
}

}  // namespace tdb

#endif  // TORCH_DLPACK_BRIDGE_ALLOCATE_H_
