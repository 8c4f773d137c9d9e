/*!
 * \file torch_dlpack_bridge/nanobind.h
 * \brief nanobind type casters for tdb::TensorView and tdb::ManagedTensor (see consumer.h), so that bound
 *        functions take torch tensors (or any DLPack producer's tensors) without torch headers or a torch link:
 *
 * \code{.cpp}
 * #include <torch_dlpack_bridge/nanobind.h>
 *
 * m.def("axpy_", [](float a, tdb::TensorView x, tdb::TensorView y) { ... });
 * \endcode
 *
 * Arguments:
 *  - `tdb::TensorView` (by value, `const&` or `&`): a non-owning view filled through the type's exchange
 *    table (or an owning export through `__dlpack__` for producers without one), valid during the call.
 *    Its name in error messages is "tensor": call `x.set_name("x")` to name it.
 *  - `tdb::ManagedTensor` (by value): an owning export (managed_tensor_from_py_object_no_sync or
 *    `__dlpack__`); the function owns it and its deleter runs when it is dropped.
 *  - `tdb::Tensor<float, tdb::shape<-1, 3>, tdb::c_contig, tdb::device::cuda>` (typed parameters,
 *    torch_dlpack_bridge/tensor.h, included here; by value, `const&` or `&`): a TensorView whose dtype, rank,
 *    fixed sizes, memory order, device type and writability the caster checks, one compare each. A tensor
 *    that violates them makes an overloaded function try its next overload in the no-conversion pass
 *    (`f<float>` and `f<double>` under one name dispatch by dtype; rank, device, ... likewise); the converting
 *    pass, or a single overload, raises the first violation, e.g. "argument 'x': expected dtype float32, got
 *    float64" (named "tensor" unless the type has `tdb::named<...>`), as it raises producer refusals (below).
 *  An argument that is neither a table-publishing tensor nor a `__dlpack__` object (a class, such as
 *  `torch.Tensor` itself, never is) makes nanobind try the next overload and finally raise its TypeError
 *  listing the accepted signatures.
 *
 * Overloads and producer refusals, as in pybind11.h: a tensor its producer refuses (a conj view, a sparse
 * tensor, a NumPy string array) raises the producer's exception, with "argument 'tensor': " prepended, in a
 * function with a single overload; in an overloaded function the refusal lets resolution go on to the next
 * overload (e.g. one taking `nb::object`). nanobind tries every overload of an overloaded function first
 * without cast_flags::convert, then again with it; a single overload gets only the converting pass. So a
 * refusal without the flag returns false (next overload), and a refusal with it is kept and raised when the
 * function asks for the value. When no overload takes the tensor without conversion, the converting pass
 * raises the refusal of the first tensor overload; a tensor argument declared `.noconvert()` never raises
 * the refusal (nanobind's TypeError instead).
 *
 * Return values: a `tdb::ManagedTensor` becomes a Python tensor of its producer through the producer's
 * managed_tensor_to_py_object_no_sync (e.g. a torch.Tensor for tdb::allocate_like(x) with a torch x).
 *
 * Errors: a `tdb::Error` thrown by the function becomes its Python exception (TypeError, ValueError,
 * BufferError, ...), through an exception translator that the casters register on first use, once in each
 * extension module that includes this header, whatever its visibility flags; call
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
#include "torch_dlpack_bridge/tensor.h"

namespace tdb {
namespace detail {

/*!
 * \brief This extension module's translator registration (thread-safe, see run_once). TDB_MODULE_LOCAL: as a
 * plain function-local static it would be one symbol for the whole process in modules built without
 * -fvisibility=hidden, and a module whose nanobind keeps its own translator list (another nanobind version
 * or NB_DOMAIN) would never register.
 */
TDB_MODULE_LOCAL inline OnceRegistration& nanobind_translator_registration() {
  static OnceRegistration registration;
  return registration;
}

}  // namespace detail

/*!
 * \brief Registers, once per extension module, a nanobind exception translator that raises a `tdb::Error`
 * as its Python exception (instead of RuntimeError). Thread-safe.
 */
inline void register_nanobind_error_translator() {
  detail::run_once(detail::nanobind_translator_registration(), [] {
    nanobind::register_exception_translator([](const std::exception_ptr& p, void*) {
      try {
        std::rethrow_exception(p);
      } catch (const Error& e) {
        e.restore();  // anything else propagates to the next translator
      }
    });
  });
}

namespace detail {

/*!
 * \brief An argument's refusal kept by its caster until the function asks for the value. nanobind loads the
 * arguments left to right but asks for their values in the compiler's order of evaluation of function arguments
 * (right to left with GCC), so each call attempt remembers, per thread, which kept refusal came first, and the
 * first value asked for raises that one: the error names the first bad argument, as with pybind11. The record is
 * keyed by the call attempt's cleanup list (a stack object) and dropped with the caster that made it; a nested
 * call made while loading only loses the order (each caster then raises its own refusal).
 */
/*! \brief A RuntimeError instance for a failure that set no Python exception (new reference; NULL if none can be made). */
inline PyObject* make_refusal() {
  PyErr_SetString(PyExc_RuntimeError, "argument 'tensor': refused without a Python exception");
  return fetch_exception();
}

class NanobindKeptError {
 public:
  NanobindKeptError() = default;
  NanobindKeptError(const NanobindKeptError&) = delete;
  NanobindKeptError& operator=(const NanobindKeptError&) = delete;
  ~NanobindKeptError() {
    if (!error_) return;  // the common case: no thread-local access (a record of this one implies an error)
    First& f = first();
    if (f.kept == this) f = First{};
    Py_DECREF(error_);  // casters live inside the call: GIL held
  }
  /*! \brief Keeps `error` (a new reference, not NULL) for the call attempt identified by `call`. */
  void keep(PyObject* error, const void* call) noexcept {
    error_ = error;
    First& f = first();
    if (call && (f.call != call || !f.kept)) f = First{call, this};  // an earlier argument's refusal stays first
  }
  /*! \brief True when a refusal is kept. */
  bool kept() const noexcept { return error_ != nullptr; }
  /*! \brief Raises the call attempt's first kept refusal (this one when there is no record), as tdb::Error. */
  [[noreturn]] void raise() {
    First& f = first();
    NanobindKeptError* source = (f.kept && f.kept->error_) ? f.kept : this;
    f = First{};
    PyObject* e = source->error_;
    source->error_ = nullptr;
    restore_exception(e);
    throw Error::pending();
  }

 private:
  struct First {
    const void* call = nullptr;         // the cleanup list of the call attempt
    NanobindKeptError* kept = nullptr;  // its first caster that kept a refusal
  };
  static First& first() {
    // Per thread. Modules built without -fvisibility=hidden may share it: harmless, it is keyed by call attempt.
    static thread_local First f;
    return f;
  }
  PyObject* error_ = nullptr;
};

/*!
 * \brief What both argument casters hold: the value made by from_python, or a refusal kept to raise (as a
 * pending tdb::Error) when the function asks for the value; nanobind takes the value through these operators.
 */
template <class T>
class NanobindHeld {
 public:
  explicit operator T*() { return &value(); }
  explicit operator T&() { return value(); }
  explicit operator T&&() { return std::move(value()); }

 protected:
  T& value() {
    if (error_.kept()) error_.raise();
    return *value_;
  }
  std::optional<T> value_;
  NanobindKeptError error_;
};

/*!
 * \brief The argument caster shared by TensorView and ManagedTensor. nanobind's from_python must not
 * throw, so a producer's refusal is kept aside as a Python exception (owned here) and raised, as a
 * pending tdb::Error, when the function asks for the value (nanobind translates it then).
 */
template <class T>
class NanobindArg : public NanobindHeld<T> {
 public:
  static constexpr auto Name = nanobind::detail::const_name("tensor");
  template <typename U>
  using Cast = nanobind::detail::movable_cast_t<U>;
  template <typename U>
  static constexpr bool can_cast() { return true; }

  NanobindArg() = default;
  NanobindArg(const NanobindArg&) = delete;
  NanobindArg& operator=(const NanobindArg&) = delete;

  /*!
   * \brief false (next overload) for a non-tensor, and for a refused tensor in the no-conversion pass of an
   * overloaded function; true otherwise, keeping a refusal to raise when the function asks for the value.
   */
  bool from_python(nanobind::handle src, uint8_t flags, nanobind::detail::cleanup_list* cleanup) noexcept {
    register_nanobind_error_translator();
    PyObject* obj = src.ptr();  // (capturing nanobind's handle, a hidden-visibility type, would warn)
    if (!is_dlpack_tensor(obj)) return false;
    PyObject* ok = guard([this, obj]() -> PyObject* {
      if constexpr (std::is_same_v<T, TensorView>) this->value_.emplace(obj, "tensor");
      else this->value_.emplace(ManagedTensor::from_python(obj, "tensor"));
      return Py_None;  // borrowed: only a success marker
    });
    if (ok) return true;
    PyObject* refusal = fetch_exception();
    if (!(flags & static_cast<uint8_t>(nanobind::detail::cast_flags::convert))) {
      Py_XDECREF(refusal);  // another overload may take it; nanobind calls us again with convert if none does
      return false;
    }
    if (!refusal) refusal = make_refusal();
    if (!refusal) return false;  // out of memory making the error: nanobind's TypeError instead
    this->error_.keep(refusal, cleanup);
    return true;
  }
};

/*!
 * \brief The caster of a typed tdb::Tensor<...> argument (tensor.h). Without cast_flags::convert (the first
 * pass of an overloaded function) a refused tensor, or one that violates a constraint, returns false: the next
 * overload is tried (dispatch by dtype, rank, device, ...). With it, the refusal or the first violated
 * constraint is kept and raised, as a pending tdb::Error, when the function asks for the value.
 */
template <class V, class... Ts>
class NanobindTypedArg : public NanobindHeld<V> {
 public:
  /*! \brief e.g. "tensor[dtype=float32, shape=(*, 3), order='C', device='cuda']" in signatures and errors. */
  static constexpr auto Name = nanobind::detail::const_name(Signature<Ts...>::value.text);
  template <typename U>
  using Cast = nanobind::detail::movable_cast_t<U>;
  template <typename U>
  static constexpr bool can_cast() { return true; }

  NanobindTypedArg() = default;
  NanobindTypedArg(const NanobindTypedArg&) = delete;
  NanobindTypedArg& operator=(const NanobindTypedArg&) = delete;

  /*! \brief See the class comment; never throws. */
  bool from_python(nanobind::handle src, uint8_t flags, nanobind::detail::cleanup_list* cleanup) noexcept {
    register_nanobind_error_translator();
    PyObject* obj = src.ptr();
    const DLPackExchangeAPI* api;
    if (!dlpack_tensor_table(obj, &api)) return false;
    const bool convert = (flags & static_cast<uint8_t>(nanobind::detail::cast_flags::convert)) != 0;
    PyObject* ok = guard([this, obj, api]() -> PyObject* {
      this->value_.emplace(unchecked, obj, api, V::DefaultName);
      return Py_None;  // borrowed: only a success marker
    });
    if (ok && V::satisfied_by(*this->value_)) return true;  // the fast path: one compare per constraint
    if (!convert) {
      if (!ok) PyErr_Clear();  // another overload may take it; nanobind calls us again with convert if none does
      this->value_.reset();
      return false;
    }
    if (ok) guard([this]() -> PyObject* { V::check(*this->value_); return Py_None; });  // sets the violation
    PyObject* error = fetch_exception();
    if (!error) error = make_refusal();
    this->value_.reset();
    if (!error) return false;  // out of memory making the error: nanobind's TypeError instead
    this->error_.keep(error, cleanup);
    return true;
  }
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

/*! \brief Typed tdb::Tensor<...> arguments (tensor.h; see tdb::detail::NanobindTypedArg). */
template <class... Ts>
struct type_caster<tdb::Tensor<Ts...>> : tdb::detail::NanobindTypedArg<tdb::Tensor<Ts...>, Ts...> {};

}  // namespace detail
}  // namespace nanobind

#endif  // TORCH_DLPACK_BRIDGE_NANOBIND_H_
