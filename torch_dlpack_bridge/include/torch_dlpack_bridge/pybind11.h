/*!
 * \file torch_dlpack_bridge/pybind11.h
 * \brief pybind11 type casters for tdb::TensorView and tdb::ManagedTensor (see consumer.h), so that bound
 *        functions take torch tensors (or any DLPack producer's tensors) without torch headers or a torch link:
 *
 *   #include <torch_dlpack_bridge/pybind11.h>
 *   m.def("axpy_", [](float a, tdb::TensorView x, tdb::TensorView y) { ... });
 *
 * Arguments:
 *  - `tdb::TensorView` (by value, `const&` or `&`): a non-owning view filled through the type's exchange
 *    table (or an owning export through `__dlpack__` for producers without one), valid during the call.
 *    Its name in error messages is "tensor": call `x.set_name("x")` to name it.
 *  - `tdb::ManagedTensor` (by value): an owning export (managed_tensor_from_py_object_no_sync or
 *    `__dlpack__`); the function owns it and its deleter runs when it is dropped.
 *  An argument that is neither a table-publishing tensor nor a `__dlpack__` object makes pybind11 try the
 *  next overload and finally raise its TypeError listing the accepted signatures; a tensor its producer
 *  refuses (e.g. a conj view) raises the producer's exception, with "argument 'tensor': " prepended.
 *
 * Return values: a `tdb::ManagedTensor` becomes a Python tensor of its producer through the producer's
 * managed_tensor_to_py_object_no_sync (e.g. a torch.Tensor for tdb::allocate_like(x) with a torch x).
 *
 * Errors: a `tdb::Error` thrown by the function becomes its Python exception (TypeError, ValueError,
 * BufferError, ...), through a module-local exception translator that the casters register on first use;
 * call `tdb::register_pybind11_error_translator()` in PYBIND11_MODULE if a function may throw tdb::Error
 * without any tdb argument or result.
 */
#ifndef TORCH_DLPACK_BRIDGE_PYBIND11_H_
#define TORCH_DLPACK_BRIDGE_PYBIND11_H_

#include <pybind11/pybind11.h>

#include <exception>
#include <optional>
#include <utility>

#include "torch_dlpack_bridge/consumer.h"

namespace tdb {

/*!
 * \brief Registers, once per extension module, a module-local pybind11 exception translator that raises a
 * `tdb::Error` as its Python exception (instead of pybind11's default RuntimeError). GIL held.
 */
inline void register_pybind11_error_translator() {
  static bool registered = false;  // one per extension module (the GIL guards it)
  if (registered) return;
  registered = true;
  pybind11::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      e.restore();  // anything else propagates to the next translator
    }
  });
}

}  // namespace tdb

namespace pybind11 {
namespace detail {

/*! \brief Loads a tdb::TensorView argument; the view lives in the caster for the duration of the call. */
template <>
class type_caster<tdb::TensorView> {
 public:
  static constexpr auto name = const_name("tensor");
  template <typename T>
  using cast_op_type = movable_cast_op_type<T>;

  /*! \brief false (next overload) for a non-tensor; throws tdb::Error when the producer refuses the tensor. */
  bool load(handle src, bool /*convert*/) {
    tdb::register_pybind11_error_translator();
    if (!tdb::is_dlpack_tensor(src.ptr())) return false;
    value_.emplace(src.ptr(), "tensor");
    return true;
  }
  operator tdb::TensorView*() { return &*value_; }
  operator tdb::TensorView&() { return *value_; }
  operator tdb::TensorView&&() && { return std::move(*value_); }

 private:
  std::optional<tdb::TensorView> value_;
};

/*! \brief tdb::ManagedTensor: owning export as an argument; a returned one goes back to its producer. */
template <>
class type_caster<tdb::ManagedTensor> {
 public:
  PYBIND11_TYPE_CASTER(tdb::ManagedTensor, const_name("tensor"));

  /*! \brief false (next overload) for a non-tensor; throws tdb::Error when the producer refuses the tensor. */
  bool load(handle src, bool /*convert*/) {
    tdb::register_pybind11_error_translator();
    if (!tdb::is_dlpack_tensor(src.ptr())) return false;
    value = tdb::ManagedTensor::from_python(src.ptr(), "tensor");
    return true;
  }
  /*! \brief Hands the tensor to its producer's managed_tensor_to_py_object_no_sync; throws tdb::Error on failure. */
  static handle cast(tdb::ManagedTensor&& src, return_value_policy /*policy*/, handle /*parent*/) {
    tdb::register_pybind11_error_translator();
    return src.to_python();
  }
};

}  // namespace detail
}  // namespace pybind11

#endif  // TORCH_DLPACK_BRIDGE_PYBIND11_H_
