/*!
 * \file torch_dlpack_bridge/nanobind.h
 * \brief nanobind type casters for tdb::TensorView and tdb::ManagedTensor (see consumer.h), so that bound
 *        functions take torch tensors (or any DLPack producer's tensors) without torch headers or a torch link:
 *
 *   #include <torch_dlpack_bridge/nanobind.h>
 *   m.def("axpy_", [](float a, tdb::TensorView x, tdb::TensorView y) { ... });
 *
 * Arguments:
 *  - `tdb::TensorView` (by value, `const&` or `&`): a non-owning view filled through the type's exchange
 *    table (or an owning export through `__dlpack__` for producers without one), valid during the call.
 *    Its name in error messages is "tensor": call `x.set_name("x")` to name it.
 *  - `tdb::ManagedTensor` (by value): an owning export (managed_tensor_from_py_object_no_sync or
 *    `__dlpack__`); the function owns it and its deleter runs when it is dropped.
 *  An argument that is neither a table-publishing tensor nor a `__dlpack__` object makes nanobind try the
 *  next overload and finally raise its TypeError listing the accepted signatures; a tensor its producer
 *  refuses (e.g. a conj view) raises the producer's exception, with "argument 'tensor': " prepended.
 *
 * Return values: a `tdb::ManagedTensor` becomes a Python tensor of its producer through the producer's
 * managed_tensor_to_py_object_no_sync (e.g. a torch.Tensor for tdb::allocate_like(x) with a torch x).
 *
 * Errors: a `tdb::Error` thrown by the function becomes its Python exception (TypeError, ValueError,
 * BufferError, ...), through an exception translator that the casters register on first use; call
 * `tdb::register_nanobind_error_translator()` in NB_MODULE if a function may throw tdb::Error without any
 * tdb argument or result.
 */
#ifndef TORCH_DLPACK_BRIDGE_NANOBIND_H_
#define TORCH_DLPACK_BRIDGE_NANOBIND_H_

#include <nanobind/nanobind.h>

#include <exception>
#include <optional>
#include <utility>

#include "torch_dlpack_bridge/consumer.h"

namespace tdb {

/*!
 * \brief Registers, once per extension module, a nanobind exception translator that raises a `tdb::Error`
 * as its Python exception (instead of RuntimeError). GIL held.
 */
inline void register_nanobind_error_translator() {
  static bool registered = false;  // one per extension module (the GIL guards it)
  if (registered) return;
  registered = true;
  nanobind::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      e.restore();  // anything else propagates to the next translator
    }
  });
}

namespace detail {

/*!
 * \brief The argument caster shared by TensorView and ManagedTensor. nanobind's from_python must not
 * throw, so a producer's refusal is kept aside as a Python exception (owned here) and raised, as a
 * pending tdb::Error, when the function asks for the value (nanobind translates it then).
 */
template <class T>
class NanobindArg {
 public:
  static constexpr auto Name = nanobind::detail::const_name("tensor");
  template <typename U>
  using Cast = nanobind::detail::movable_cast_t<U>;
  template <typename U>
  static constexpr bool can_cast() { return true; }

  NanobindArg() = default;
  NanobindArg(const NanobindArg&) = delete;
  NanobindArg& operator=(const NanobindArg&) = delete;
  ~NanobindArg() { Py_XDECREF(error_); }  // casters live inside the call: GIL held

  /*! \brief false (next overload) for a non-tensor; true otherwise, even when the producer refused it. */
  bool from_python(nanobind::handle src, uint8_t /*flags*/, nanobind::detail::cleanup_list*) noexcept {
    register_nanobind_error_translator();
    PyObject* obj = src.ptr();  // (capturing nanobind's handle, a hidden-visibility type, would warn)
    if (!is_dlpack_tensor(obj)) return false;
    PyObject* ok = guard([this, obj]() -> PyObject* {
      if constexpr (std::is_same_v<T, TensorView>) value_.emplace(obj, "tensor");
      else value_.emplace(ManagedTensor::from_python(obj, "tensor"));
      return Py_None;  // borrowed: only a success marker
    });
    if (!ok) error_ = fetch_exception();
    return true;
  }
  explicit operator T*() { return &value(); }
  explicit operator T&() { return value(); }
  explicit operator T&&() { return std::move(value()); }

 private:
  T& value() {
    if (error_) {
      PyObject* e = error_;
      error_ = nullptr;
      restore_exception(e);
      throw Error::pending();
    }
    return *value_;
  }
  std::optional<T> value_;
  PyObject* error_ = nullptr;
};

}  // namespace detail
}  // namespace tdb

namespace nanobind {
namespace detail {

/*! \brief tdb::TensorView arguments (see the file comment). */
template <>
struct type_caster<tdb::TensorView> : tdb::detail::NanobindArg<tdb::TensorView> {};

/*! \brief tdb::ManagedTensor arguments, and results handed back to their producer. */
template <>
struct type_caster<tdb::ManagedTensor> : tdb::detail::NanobindArg<tdb::ManagedTensor> {
  /*! \brief managed_tensor_to_py_object_no_sync; NULL with the Python exception set on failure. */
  static handle from_cpp(tdb::ManagedTensor&& t, rv_policy, cleanup_list*) noexcept {
    return tdb::guard([&]() -> PyObject* { return t.to_python(); });
  }
};

}  // namespace detail
}  // namespace nanobind

#endif  // TORCH_DLPACK_BRIDGE_NANOBIND_H_
