/*!
 * \file torch_dlpack_bridge/checks.h
 * \brief Argument checks: each `check_*` throws `tdb::Error` (TypeError for dtype, ValueError otherwise)
 *        naming the argument, with the messages typed parameters raise. The DLTensor forms take the name
 *        explicitly; the TensorView forms use the view's name.
 *
 * Included by consumer.h, and by annotations.h (typed parameters raise the same messages).
 */
#ifndef TORCH_DLPACK_BRIDGE_CHECKS_H_
#define TORCH_DLPACK_BRIDGE_CHECKS_H_

#include <cstdint>
#include <initializer_list>
#include <string>

#include "torch_dlpack_bridge/dlpack.h"
#include "torch_dlpack_bridge/dltensor.h"
#include "torch_dlpack_bridge/errors.h"
#include "torch_dlpack_bridge/names.h"
#include "torch_dlpack_bridge/view.h"

namespace tdb {

/*! \brief Requires dtype `dtype`: "argument 'x': expected dtype float32, got float64". */
inline void check_dtype(const DLTensor& t, const char* name, DLDataType dtype) {
  if (!same_dtype(t.dtype, dtype))
    throw Error(PyExc_TypeError, detail::arg(name) + "expected dtype " + dtype_name(dtype) + ", got " +
                                     dtype_name(t.dtype));
}
/*! \brief Requires a device of type `type` (any id): "argument 'x': expected a cpu tensor, got cuda:0". */
inline void check_device(const DLTensor& t, const char* name, DLDeviceType type) {
  if (t.device.device_type != type)
    throw Error(PyExc_ValueError, detail::arg(name) + "expected a " + device_type_name(type) +
                                      " tensor, got " + device_name(t.device));
}
/*! \brief Requires exactly `device`: "argument 'y': expected device cuda:0, got cuda:1". */
inline void check_device(const DLTensor& t, const char* name, DLDevice device) {
  if (!same_device(t.device, device))
    throw Error(PyExc_ValueError, detail::arg(name) + "expected device " + device_name(device) + ", got " +
                                      device_name(t.device));
}
/*! \brief Requires `ndim` dimensions: "argument 'x': expected 1 dimension(s), got 2". */
inline void check_ndim(const DLTensor& t, const char* name, int32_t ndim) {
  if (t.ndim != ndim)
    throw Error(PyExc_ValueError, detail::arg(name) + "expected " + std::to_string(ndim) + " dimension(s), got " +
                                      std::to_string(t.ndim));
}
/*! \brief Formats a shape as "[2, 3]". */
inline std::string shape_str(int32_t ndim, const int64_t* shape) {
  std::string s = "[";
  for (int32_t i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}
/*! \brief Requires shape `shape`, where -1 matches any size: "argument 'x': expected shape [-1, 3], got [4, 2]". */
inline void check_shape(const DLTensor& t, const char* name, std::initializer_list<int64_t> shape) {
  bool ok = t.ndim == static_cast<int32_t>(shape.size());
  for (int32_t i = 0; ok && i < t.ndim; ++i) ok = shape.begin()[i] == -1 || shape.begin()[i] == t.shape[i];
  if (!ok)
    throw Error(PyExc_ValueError, detail::arg(name) + "expected shape " +
                                      shape_str(static_cast<int32_t>(shape.size()), shape.begin()) + ", got " +
                                      shape_str(t.ndim, t.shape));
}
/*! \brief Requires b to have a's shape: "argument 'y': expected shape [3] (the shape of 'x'), got [4]". */
inline void check_same_shape(const DLTensor& a, const char* a_name, const DLTensor& b, const char* b_name) {
  bool ok = a.ndim == b.ndim;
  for (int32_t i = 0; ok && i < a.ndim; ++i) ok = a.shape[i] == b.shape[i];
  if (!ok)
    throw Error(PyExc_ValueError, detail::arg(b_name) + "expected shape " + shape_str(a.ndim, a.shape) +
                                      " (the shape of '" + a_name + "'), got " + shape_str(b.ndim, b.shape));
}
/*! \brief Requires row-major contiguity: "argument 'y': expected a contiguous tensor, got strides [1, 3]". */
inline void check_contiguous(const DLTensor& t, const char* name) {
  if (!tdb::is_contiguous(t))
    throw Error(PyExc_ValueError, detail::arg(name) + "expected a contiguous tensor, got strides " +
                                      shape_str(t.ndim, t.strides) + " for shape " + shape_str(t.ndim, t.shape));
}

// The same checks on a TensorView, its name() in the message.
/*! \brief check_dtype on a view: "argument 'x': expected dtype float32, got float64". */
inline void check_dtype(const TensorView& v, DLDataType dtype) { check_dtype(v.dl(), v.name(), dtype); }
/*! \brief check_device on a view, any device index of `type`. */
inline void check_device(const TensorView& v, DLDeviceType type) { check_device(v.dl(), v.name(), type); }
/*! \brief check_device on a view, that device type and index. */
inline void check_device(const TensorView& v, DLDevice device) { check_device(v.dl(), v.name(), device); }
/*! \brief check_ndim on a view: "argument 'x': expected 2 dimension(s), got 3". */
inline void check_ndim(const TensorView& v, int32_t ndim) { check_ndim(v.dl(), v.name(), ndim); }
/*! \brief check_shape on a view (-1 for any size of a dimension). */
inline void check_shape(const TensorView& v, std::initializer_list<int64_t> shape) {
  check_shape(v.dl(), v.name(), shape);
}
/*! \brief check_same_shape on two views: b must have a's shape. */
inline void check_same_shape(const TensorView& a, const TensorView& b) {
  check_same_shape(a.dl(), a.name(), b.dl(), b.name());
}
/*! \brief check_contiguous on a view: row-major contiguity. */
inline void check_contiguous(const TensorView& v) { check_contiguous(v.dl(), v.name()); }
/*! \brief Requires b on a's device: "argument 'y': expected device cpu (the device of 'x'), got cuda:0". */
inline void check_same_device(const TensorView& a, const TensorView& b) {
  if (!same_device(a.device(), b.device()))
    throw Error(PyExc_ValueError, detail::arg(b.name()) + "expected device " + device_name(a.device()) +
                                      " (the device of '" + a.name() + "'), got " + device_name(b.device()));
}
/*! \brief Requires the producer not to have flagged the tensor read-only (see TensorView::read_only). */
inline void check_writable(const TensorView& v) {
  if (v.read_only()) throw Error(PyExc_ValueError, detail::arg(v.name()) + "is read-only");
}

}  // namespace tdb

#endif  // TORCH_DLPACK_BRIDGE_CHECKS_H_
