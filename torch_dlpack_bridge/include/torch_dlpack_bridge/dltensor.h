/*!
 * \file torch_dlpack_bridge/dltensor.h
 * \brief Plain DLTensor values and utilities, nothing owned: common data types and the CPU device, equality
 *        of types and devices, element count, contiguity, iteration over elements, the typed data pointer, and
 *        the check that an exported DLTensor describes its data.
 *
 * Included by managed.h, view.h, allocate.h and checks.h (consumer.h includes it for raw-CPython kernels).
 */
#ifndef TORCH_DLPACK_BRIDGE_DLTENSOR_H_
#define TORCH_DLPACK_BRIDGE_DLTENSOR_H_

#include <cstdint>
#include <vector>

#include "torch_dlpack_bridge/dlpack.h"
#include "torch_dlpack_bridge/errors.h"

namespace tdb {

// Common data types and the CPU device, as plain values (nothing to own).
/*! \brief torch.bool: one byte per element. */
constexpr DLDataType kBool{kDLBool, 8, 1};
/*! \brief torch.int8. */
constexpr DLDataType kInt8{kDLInt, 8, 1};
/*! \brief torch.int16. */
constexpr DLDataType kInt16{kDLInt, 16, 1};
/*! \brief torch.int32. */
constexpr DLDataType kInt32{kDLInt, 32, 1};
/*! \brief torch.int64. */
constexpr DLDataType kInt64{kDLInt, 64, 1};
/*! \brief torch.uint8. */
constexpr DLDataType kUInt8{kDLUInt, 8, 1};
/*! \brief torch.float16 (IEEE half). */
constexpr DLDataType kFloat16{kDLFloat, 16, 1};
/*! \brief torch.bfloat16. */
constexpr DLDataType kBFloat16{kDLBfloat, 16, 1};
/*! \brief torch.float32. */
constexpr DLDataType kFloat32{kDLFloat, 32, 1};
/*! \brief torch.float64. */
constexpr DLDataType kFloat64{kDLFloat, 64, 1};
/*! \brief torch.complex64: two float32. */
constexpr DLDataType kComplex64{kDLComplex, 64, 1};
/*! \brief torch.complex128: two float64. */
constexpr DLDataType kComplex128{kDLComplex, 128, 1};
/*! \brief The CPU device, index 0 (DLPack's only CPU index). */
constexpr DLDevice kCPU{kDLCPU, 0};

/*! \brief Field-wise equality of two data types. */
constexpr bool same_dtype(DLDataType a, DLDataType b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}
/*! \brief Field-wise equality of two devices. */
constexpr bool same_device(DLDevice a, DLDevice b) {
  return a.device_type == b.device_type && a.device_id == b.device_id;
}

/*! \brief Number of elements (1 for a 0-d tensor). */
inline int64_t numel(const DLTensor& t) {
  int64_t n = 1;
  for (int32_t i = 0; i < t.ndim; ++i) n *= t.shape[i];
  return n;
}

/*! \brief True when the elements are dense in row-major order (size-1 dims and empty tensors ignore strides). */
inline bool is_contiguous(const DLTensor& t) {
  int64_t expected = 1;
  for (int32_t i = t.ndim - 1; i >= 0; --i) {
    if (t.shape[i] == 0) return true;
    if (t.shape[i] != 1 && t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

/*!
 * \brief Calls `f(i, offset)` for every element of `t` in row-major order: `i` counts elements from 0,
 * `offset` is the element's distance from the first element, in elements (strides may be negative or 0).
 * Allocates one index vector when ndim > 0 (std::bad_alloc on failure).
 */
template <class F>
void for_each_offset(const DLTensor& t, F&& f) {
  const int64_t n = numel(t);
  std::vector<int64_t> index(t.ndim > 0 ? t.ndim : 0, 0);
  int64_t offset = 0;
  for (int64_t i = 0; i < n; ++i) {
    f(i, offset);
    for (int32_t d = t.ndim - 1; d >= 0; --d) {  // odometer step
      offset += t.strides[d];
      if (++index[d] < t.shape[d]) break;
      offset -= t.strides[d] * t.shape[d];
      index[d] = 0;
    }
  }
}

/*! \brief Typed pointer to the first element (data + byte_offset). The memory belongs to the producer. */
template <class T>
T* data_ptr(const DLTensor& t) {
  return reinterpret_cast<T*>(static_cast<char*>(t.data) + t.byte_offset);
}

namespace detail {

/*!
 * \brief Throws BufferError unless `t` describes its data: shape and strides present (ndim > 0), and a data
 * pointer wherever there are elements (a meta tensor or FakeTensor that its producer exported anyway has
 * none: torch's own table does that, with data = NULL; our producer refuses those itself). The shape is
 * checked first: counting the elements reads it.
 */
inline void check_described(const DLTensor& t, const char* name) {
  if (t.ndim < 0 || (t.ndim > 0 && (!t.shape || !t.strides)))
    throw Error(PyExc_BufferError, arg(name) + "producer gave a DLTensor without shape or strides");
  if (t.data || numel(t) == 0) return;  // data is NULL only at size zero for real tensors: one cheap test
  throw Error(PyExc_BufferError, arg(name) + "has no data (a meta tensor or FakeTensor): torch.compile, "
                                             "torch.export and FakeTensorMode trace with such tensors; call the "
                                             "kernel through a custom op with a fake implementation "
                                             "(torch.library.custom_op and register_fake)");
}

}  // namespace detail

}  // namespace tdb

#endif  // TORCH_DLPACK_BRIDGE_DLTENSOR_H_
