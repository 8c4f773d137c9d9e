/*!
 * \file torch_dlpack_bridge/pybind11.h
 * \brief pybind11 type casters for tdb::TensorView and tdb::ManagedTensor (see consumer.h), so that bound
 *        functions take torch tensors (or any DLPack producer's tensors) without torch headers or a torch link:
 *
 * \code{.cpp}
 * #include <torch_dlpack_bridge/pybind11.h>
 *
 * m.def("axpy_", [](float a, tdb::TensorView x, tdb::TensorView y) { ... });
 * \endcode
 *
 * Arguments:
 *  - `tdb::TensorView` (by value, `const&` or `&`): a non-owning view filled through the type's exchange
 *    table (or an owning export through `__dlpack__` for producers without one), valid during the call.
 *    Its name in error messages is "tensor": call `x.set_name("x")` to name it.
 *  - `tdb::ManagedTensor` (by value): an owning export (`managed_tensor_from_py_object_no_sync` or
 *    `__dlpack__`); the function owns it and its deleter runs when it is dropped.
 *  - `tdb::Tensor<float, tdb::shape<-1, 3>, tdb::c_contig, tdb::device::cuda>` (typed parameters,
 *    torch_dlpack_bridge/tensor.h, included here; by value, `const&` or `&`): a TensorView whose dtype, rank,
 *    fixed sizes, memory order, device type and writability the caster checks, one compare each (a writable
 *    parameter also refuses an expanded tensor, see tensor.h).
 *  Each works inside `std::optional`, `std::vector`, `std::variant` (pybind11/stl.h), as a keyword argument
 *  and with a `None` default (`py::arg("bias") = py::none()`).
 *
 * Arguments a parameter does not take: a non-tensor (a class, such as `torch.Tensor` itself, never is one), a
 * tensor its producer refuses (a conj view, a sparse tensor, a NumPy string array) and a tensor that violates
 * a typed parameter's constraints are all arguments that do not match: the parameter declines them whether or
 * not pybind11 allows conversions, so the next overload is tried, whatever the other arguments need (`f(Tensor<float>, float)` and `f(Tensor<double>,
 * double)` under one name take `f(float64 tensor, np.float32(2))`), and when no overload takes the call
 * pybind11 raises its TypeError, "f(): incompatible function arguments", listing every overload with its
 * parameters' names (`py::arg`) and constraints, e.g. ``x: typing.Annotated[torch_dlpack_bridge.typing.DLPackTensor,
 * dict(dtype='float32', shape=(None, 3), order='C', device='cuda')]``, and the arguments' reprs. A caster
 * never raises a refusal: raising its own error would stop the overloads after it. Only a refusal is one (a
 * TypeError or BufferError from the producer, or the parameter's own): any other exception raised while a caster
 * takes a tensor (a KeyboardInterrupt in `__dlpack__`, a MemoryError, SystemExit) ends the call, raised as it is
 * (the same object). Call `tdb::explain_refusals(m)` at the
 * end of `PYBIND11_MODULE` and that same TypeError also says which tensor argument each overload refused, and
 * why (refusals.h): ``overload 1: argument 'y': expected dtype float32, got float16``.
 *
 * Return values: a `tdb::OwnedTensor<float, tdb::ndim<2>>` (typed outputs, torch_dlpack_bridge/output.h,
 * included here) or a `tdb::ManagedTensor` becomes a Python tensor of its producer through the producer's
 * `managed_tensor_to_py_object_no_sync` (a `torch.Tensor` for `Out::empty_like(x)` with a torch x); a
 * `std::tuple` of them becomes a Python tuple:
 *
 * \code{.cpp}
 * using Out = tdb::OwnedTensor<float, tdb::ndim<1>>;
 * m.def("split", [](tdb::Tensor<const float, tdb::ndim<1>> x) {
 *   Out lo = Out::empty_like(x), hi = Out::empty_like(x);
 *   ...
 *   return std::make_tuple(std::move(lo), std::move(hi));  // (torch.Tensor, torch.Tensor)
 * });
 * \endcode
 *
 * Signatures (docstrings, errors, and so the stubs pybind11-stubgen writes): a tensor parameter is
 * `torch_dlpack_bridge.typing.DLPackTensor` (what a caller passes: any object with `__dlpack__`), a typed one
 * ``typing.Annotated[torch_dlpack_bridge.typing.DLPackTensorOf[typing.Literal['float32']], dict(dtype='float32',
 * shape=(None,), ...)]``, a returned tensor `typing.Any` or `typing.Annotated[typing.Any, dict(...)]` (the
 * producer's type).
 *
 * Errors: a `tdb::Error` thrown by the function becomes its Python exception (TypeError, ValueError,
 * BufferError, ...), through a module-local exception translator, in every extension module that includes
 * this header, whatever its visibility flags. The first tdb::Error made (or the first caster run) registers it,
 * so every function translates from its first call, whatever its arguments (a `std::optional` tensor given
 * None runs no caster); `tdb::register_pybind11_error_translator()` registers it at once, which only a
 * tdb::Error first made on a thread without the GIL needs.
 */
#ifndef TORCH_DLPACK_BRIDGE_PYBIND11_H_
#define TORCH_DLPACK_BRIDGE_PYBIND11_H_

#include <pybind11/pybind11.h>

#include <atomic>
#include <cstring>
#include <exception>
#include <optional>
#include <utility>

#include "torch_dlpack_bridge/consumer.h"
#include "torch_dlpack_bridge/output.h"
#include "torch_dlpack_bridge/refusals.h"
#include "torch_dlpack_bridge/tensor.h"

namespace tdb {
namespace detail {

/*!
 * \brief This extension module's translator registration (thread-safe, see run_once). TDB_MODULE_LOCAL: the
 * translator list is module-local, so the registration must be too; as a plain function-local static it was one
 * symbol for the whole process when modules were built without -fvisibility=hidden, and only the first
 * module to call a tdb function got the translator.
 */
TDB_MODULE_LOCAL inline OnceRegistration& pybind11_translator_registration() {
  static OnceRegistration registration;
  return registration;
}

}  // namespace detail

/*!
 * \brief Registers, once per extension module, a module-local pybind11 exception translator that raises a
 * `tdb::Error` as its Python exception (instead of pybind11's default RuntimeError). Thread-safe.
 */
inline void register_pybind11_error_translator() {
  detail::run_once(detail::pybind11_translator_registration(), [] {
    pybind11::register_local_exception_translator([](std::exception_ptr p) {
      try {
        if (p) std::rethrow_exception(p);
      } catch (const Error& e) {
        e.restore();  // anything else propagates to the next translator
      }
    });
  });
}

namespace detail {
/*!
 * \brief A caster's answer when making its value failed (fill_or_note() returned false): false for a refusal (next
 * overload); an exception that is not one (KeyboardInterrupt, MemoryError, ...), left raised, is thrown as
 * error_already_set, which ends pybind11's dispatch and raises that same exception object.
 */
inline bool pybind11_refused() {
  if (PyErr_Occurred()) throw pybind11::error_already_set();
  return false;
}

// Hands the registration to tdb::Error's constructor (errors.h) when the extension module is loaded, before any
// call; every file that includes this header stores the same pointer.
[[maybe_unused]] static const bool pybind11_translator_stored =
    (translator_registrations()[0].store(&register_pybind11_error_translator, std::memory_order_release), true);

#if PYBIND11_VERSION_MAJOR >= 3 && !defined(Py_LIMITED_API)
/*! \brief pybind11's dispatcher (protected in cpp_function), the entry point of this module's functions. */
struct TDB_MODULE_LOCAL Pybind11Dispatcher : pybind11::cpp_function {  // hidden, as pybind11 is
  TDB_ALWAYS_INLINE static PyObject* call(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
    return dispatcher(self, args, nargsf, kwnames);
  }
  static bool is(PyCFunction meth) {
    return meth == reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&dispatcher));
  }
  static bool lists_a_tensor(PyObject* self) {  // any overload's signature, as the overload error lists it; `self`
    for (auto* r = pybind11::detail::function_record_ptr_from_PyObject(self); r; r = r->next)  // as for name()
      if (r->signature && std::strstr(r->signature, kSignatureTensor)) return true;
    return false;
  }
  static std::string name(PyObject* self) {  // the function record's, as the overload error starts with it
    const pybind11::detail::function_record* record = pybind11::detail::function_record_ptr_from_PyObject(self);
    return record && record->name ? record->name : "";
  }
};
/*! \brief What a wrapped function's PyMethodDef calls instead of the dispatcher (see refusals.h). */
TDB_MODULE_LOCAL inline PyObject* pybind11_explained(PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                                                     PyObject* kwnames) {
  return dispatch_explained(
      Dispatch{&Pybind11Dispatcher::call, self, args, static_cast<size_t>(nargs), kwnames, &Pybind11Dispatcher::name});
}
/*!
 * \brief Wraps `f` if it is a function of this module's pybind11 with a tdb tensor parameter in some overload: its
 * PyMethodDef (pybind11's own, one per function and its overloads) gets the explaining entry point; CPython reads
 * it at every call. True for any function of this module's pybind11 (one without such a parameter is left as it
 * is: nothing to explain).
 */
inline bool wrap_pybind11_function(PyObject* f) {
  if (!PyCFunction_Check(f)) return false;
  PyMethodDef* def = reinterpret_cast<PyCFunctionObject*>(f)->m_ml;
  const PyCFunction explained = reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&pybind11_explained));
  if (def->ml_meth != explained && !Pybind11Dispatcher::is(def->ml_meth)) return false;
  if (!Pybind11Dispatcher::lists_a_tensor(PyCFunction_GET_SELF(f))) return true;  // nothing to explain: left as it is
  def->ml_meth = explained;
  return true;
}
#endif
}  // namespace detail

/*!
 * \brief Makes every function of `m` with a tdb tensor parameter (its classes' methods and property setters,
 * submodules' functions too) say why a tdb parameter refused a tensor when no overload takes a call: pybind11's
 * TypeError, the same type and listing, with one line per overload and refused tensor argument added (refusals.h). Call
 * it at the end of `PYBIND11_MODULE`, after the last `def` (a function defined later is not wrapped). The call is
 * dispatched once either way: the reasons are worded only for a refused call, by each parameter type's checks, and a
 * producer without a table is asked `__dlpack__` once per call; a call that is taken costs a few nanoseconds more,
 * nothing per tensor. Any other function is left as it is (nothing to explain: its calls cost what they did). Needs
 * pybind11 3; does nothing with pybind11 2 or the limited API.
 */
inline void explain_refusals(pybind11::module_& m) {
#if PYBIND11_VERSION_MAJOR >= 3 && !defined(Py_LIMITED_API)
  detail::wrap_functions(m.ptr(), &detail::wrap_pybind11_function);
#else
  (void)m;
#endif
}

}  // namespace tdb

namespace pybind11 {
namespace detail {

/*!
 * \brief What the untyped argument casters share: the value made by load(), which pybind11 takes through these
 * operators for the chosen overload, right before the body, and the parameter type's recheck, for explain_refusals (refusals.h; hidden, as its module's own).
 */
template <class T>
class tdb_untyped_caster {
 public:
  template <typename U>
  using cast_op_type = movable_cast_op_type<U>;
  operator T*() { return &held(); }
  operator T&() { return held(); }
  operator T&&() && { return std::move(held()); }

 protected:
  T& held() noexcept { return *value_; }
  std::optional<T> value_;
  TDB_MODULE_LOCAL static inline const bool registered_ =
      tdb::detail::register_recheck(tdb::detail::kSignatureTensor, &tdb::detail::recheck<tdb::TensorView>);
};

/*! \brief Loads a tdb::TensorView argument; the view lives in the caster for the duration of the call. */
template <>
class type_caster<tdb::TensorView> : public tdb_untyped_caster<tdb::TensorView> {
 public:
  static constexpr auto name = const_name(tdb::detail::kSignatureTensor);

  /*! \brief false (next overload, or pybind11's TypeError) for a non-tensor and a refused tensor; throws
   *  error_already_set for another exception from the producer (tdb::detail::pybind11_refused). */
  bool load(handle src, bool /*convert*/) {
    tdb::register_pybind11_error_translator();
    PyObject* obj = src.ptr();
    const DLPackExchangeAPI* api;  // looked up once, for the question and the view
    constexpr const char* kParam = tdb::detail::kSignatureTensor;  // as signatures show the parameter
    (void)registered_;
    if (!tdb::detail::dlpack_tensor_table(obj, &api)) return false;
    if (!tdb::detail::fill_or_note([this, obj, api] { value_.emplace(tdb::detail::lent, obj, api, "tensor"); }, obj,
                                   kParam))
      return tdb::detail::pybind11_refused();
    return true;
  }
};

/*! \brief tdb::ManagedTensor: owning export as an argument; a returned one goes back to its producer. */
template <>
class type_caster<tdb::ManagedTensor> : public tdb_untyped_caster<tdb::ManagedTensor> {
 public:
  static constexpr auto name = io_name(tdb::detail::kSignatureTensor, tdb::detail::kSignatureResult);

  /*! \brief false (next overload, or pybind11's TypeError) for a non-tensor and a refused tensor. */
  bool load(handle src, bool /*convert*/) {
    tdb::register_pybind11_error_translator();
    PyObject* obj = src.ptr();
    (void)registered_;
    if (!tdb::is_dlpack_tensor(obj)) return false;
    if (!tdb::detail::fill_or_note([this, obj] { value_.emplace(tdb::ManagedTensor::from_python(obj, "tensor")); },
                                   obj, tdb::detail::kSignatureTensor))
      return tdb::detail::pybind11_refused();
    return true;
  }
  /*! \brief Hands the tensor to its producer's `managed_tensor_to_py_object_no_sync`; throws tdb::Error on failure. */
  static handle cast(tdb::ManagedTensor&& src, return_value_policy /*policy*/, handle /*parent*/) {
    tdb::register_pybind11_error_translator();
    return src.to_python();
  }
};

/*!
 * \brief Loads a typed tdb::Tensor<...> argument (tensor.h), held as `Held`: a tensor that violates its
 * constraints is an argument that does not match (next overload, or pybind11's TypeError), in both passes. A
 * written tensor's version counter is bumped (Tensor::commit()) when the argument is converted, which pybind11
 * does for the chosen overload only, right before the body; `Held` = tdb::detail::Uncommitted<...> inside a
 * std::optional or std::vector, which pybind11 converts while it loads them: the container's caster commits.
 */
template <class Held, class... Ts>
class tdb_typed_caster {
  using Value = tdb::Tensor<Ts...>;

 public:
  /*!
   * \brief e.g. "typing.Annotated[torch_dlpack_bridge.typing.DLPackTensorOf[typing.Literal['float32']],
   * dict(dtype='float32', shape=(None, 3), order='C', device='cuda', writable=True)]" in signatures and errors: a
   * valid annotation for pybind11-stubgen's stubs.
   */
  static constexpr auto name = const_name(tdb::detail::Signature<Ts...>::value.text);
  template <typename T>
  using cast_op_type = movable_cast_op_type<T>;

  /*! \brief false for a non-tensor, a refused tensor and a tensor that violates a constraint. */
  bool load(handle src, bool /*convert*/) {
    tdb::register_pybind11_error_translator();
    PyObject* obj = src.ptr();
    const DLPackExchangeAPI* api;
    constexpr const char* kParam = tdb::detail::Signature<Ts...>::value.text;  // as signatures show it
    (void)registered_;
    if (!tdb::detail::dlpack_tensor_table(obj, &api)) return false;
    if (!tdb::detail::fill_or_note([this, obj, api] { value_.emplace(tdb::detail::unchecked, obj, api,
                                                                     Value::DefaultName); }, obj, kParam))
      return tdb::detail::pybind11_refused();
    if (Value::satisfied_by(*value_)) {  // a compare each (a written one's autograd: autograd.h, seen_layout())
      if constexpr (kCommits) layout_ = tdb::detail::seen_layout_describing(value_->object());
      return true;
    }
    value_.reset();  // another overload may take it
    return false;
  }
  TDB_ALWAYS_INLINE operator Held*() { return &commit(); }
  TDB_ALWAYS_INLINE operator Held&() { return commit(); }
  TDB_ALWAYS_INLINE operator Held&&() && { return std::move(commit()); }

 private:
  /*! \brief A written tensor of this overload's own (not a container's element) is bumped at its conversion. */
  static constexpr bool kCommits = !Value::ReadOnly && std::is_same<Held, Value>::value;
  TDB_ALWAYS_INLINE Held& commit() noexcept {
    if constexpr (kCommits) tdb::detail::commit_write_through(layout_, value_->object());
    return *value_;
  }
  std::optional<Held> value_;
  // Where a written tensor's version counter is found when it is bumped: only this is kept from load() to the
  // conversion (without it, the rare path looks the type's autograd entry up).
  const TDBAutogradLayout* layout_ = nullptr;
  /*! \brief The parameter type's recheck, for explain_refusals (refusals.h); hidden, as its module's own. */
  TDB_MODULE_LOCAL static inline const bool registered_ =
      tdb::detail::register_recheck(tdb::detail::Signature<Ts...>::value.text, &tdb::detail::recheck<Value>);
};

/*! \brief Typed tdb::Tensor<...> arguments (see tdb_typed_caster). */
template <class... Ts>
class type_caster<tdb::Tensor<Ts...>> : public tdb_typed_caster<tdb::Tensor<Ts...>, Ts...> {};
/*! \brief The elements of a std::optional or std::vector of them, as pybind11's own casters hold them. */
template <class... Ts>
class type_caster<tdb::detail::Uncommitted<tdb::Tensor<Ts...>>>
    : public tdb_typed_caster<tdb::detail::Uncommitted<tdb::Tensor<Ts...>>, Ts...> {};

/*!
 * \brief What a std::vector parameter of tdb tensors loads its items from: a tuple that holds them until the call ends.
 * A tuple is its own; a list's items are copied into one (the body may empty the list); any other iterable that
 * pybind11's own std::vector caster takes (a sequence that makes its items as they are asked for, a generator, `map`,
 * ...) is drained into one in the converting pass, as pybind11 drains it. The new tuple is kept by the call
 * (pybind11's loader_life_support), since a view made through a table holds no reference to its tensor. Empty
 * (refused) for what pybind11 would refuse, and for a non-list outside a bound function (`py::cast`), where nothing
 * would keep its items; an exception the iterable raises ends the call, as it does with pybind11's caster.
 */
inline object tdb_held_items(handle src, bool convert) {
  PyObject* o = src.ptr();
  if (PyTuple_Check(o)) return reinterpret_borrow<object>(src);
  const bool sequence = PySequence_Check(o) && !PyUnicode_Check(o) && !PyBytes_Check(o);
  const char* type = Py_TYPE(o)->tp_name;
  const bool iterable = PyGen_Check(o) || PyAnySet_Check(o) || !std::strcmp(type, "dict_keys") ||
                        !std::strcmp(type, "dict_values") || !std::strcmp(type, "dict_items") ||
                        !std::strcmp(type, "map") || !std::strcmp(type, "zip");
  if (!sequence && !(iterable && convert)) return object();
  auto items = reinterpret_steal<object>(PySequence_Tuple(o));
  if (!items) throw error_already_set();
  try {
    loader_life_support::add_patient(items);
  } catch (const cast_error&) {  // outside a bound function: only a list goes on holding the items
    if (!PyList_Check(o)) return object();
  }
  return items;
}

/*! \brief A std::vector's elements, loaded from tdb_held_items() one by one, named as pybind11's own caster names it. */
template <class Vector>
class tdb_items_caster {
  using Element = typename Vector::value_type;

 public:
  static constexpr auto name = io_name("collections.abc.Sequence", "list") + const_name("[") +
                               make_caster<Element>::name + const_name("]");
  bool load(handle src, bool convert) {
    object items = tdb_held_items(src, convert);
    if (!items) return false;
    value_.clear();
    value_.reserve(static_cast<size_t>(PyTuple_GET_SIZE(items.ptr())));
    for (handle item : reinterpret_borrow<tuple>(items)) {
      make_caster<Element> element;
      if (!element.load(item, convert)) return false;
      value_.push_back(cast_op<Element&&>(std::move(element)));
    }
    return true;
  }
  template <typename T>
  using cast_op_type = movable_cast_op_type<T>;
  operator Vector*() { return &value_; }
  operator Vector&() { return value_; }
  operator Vector&&() && { return std::move(value_); }

 private:
  Vector value_;
};

/*!
 * \brief A std::optional (pybind11's own caster, pybind11/stl.h) or std::vector (tdb_items_caster) of typed tensors,
 * held as tdb::detail::Uncommitted elements, so that what it accepts and how it is named stay pybind11's; converting
 * it for the chosen overload commits each element (Tensor::commit()), which loading them would have done in every
 * overload tried.
 */
template <class Container, class Inner, class InnerCaster = make_caster<Inner>>
class TDB_MODULE_LOCAL tdb_container_caster {  // hidden as its field, pybind11's own caster (-Werror=attributes)
  InnerCaster inner_;
  Container value_;

 public:
  static constexpr auto name = InnerCaster::name;
  template <typename T>
  using cast_op_type = movable_cast_op_type<T>;

  bool load(handle src, bool convert) { return inner_.load(src, convert); }
  operator Container*() { return &commit(); }
  operator Container&() { return commit(); }
  operator Container&&() && { return std::move(commit()); }

 private:
  Container& commit() {
    value_ = tdb::detail::committed(static_cast<Inner&&>(std::move(inner_)));
    return value_;
  }
};
/*! \brief std::optional of a typed tensor (see tdb_container_caster). */
template <class... Ts>
class type_caster<std::optional<tdb::Tensor<Ts...>>>
    : public tdb_container_caster<std::optional<tdb::Tensor<Ts...>>,
                                  std::optional<tdb::detail::Uncommitted<tdb::Tensor<Ts...>>>> {};
/*! \brief std::vector of typed tensors (see tdb_container_caster). */
template <class... Ts>
class type_caster<std::vector<tdb::Tensor<Ts...>>>
    : public tdb_container_caster<std::vector<tdb::Tensor<Ts...>>,
                                  std::vector<tdb::detail::Uncommitted<tdb::Tensor<Ts...>>>,
                                  tdb_items_caster<std::vector<tdb::detail::Uncommitted<tdb::Tensor<Ts...>>>>> {};
/*! \brief std::vector of tdb::TensorView: its items held until the call ends (tdb_items_caster). */
template <>
class type_caster<std::vector<tdb::TensorView>> : public tdb_items_caster<std::vector<tdb::TensorView>> {};

/*!
 * \brief A returned tdb::OwnedTensor<...> (output.h) becomes its producer's tensor (a torch.Tensor for torch's
 * table); in a `std::tuple`, each one does. Output only: an OwnedTensor is never an argument.
 */
template <class... Ts>
class type_caster<tdb::OwnedTensor<Ts...>> {
 public:
  /*! \brief e.g. "typing.Annotated[typing.Any, dict(dtype='float32', shape=(None, 3), order='C')]". */
  static constexpr auto name = const_name(tdb::detail::OutputSignature<Ts...>::value.text);
  /*! \brief `managed_tensor_to_py_object_no_sync`; throws tdb::Error (translated) on failure. */
  static handle cast(tdb::OwnedTensor<Ts...>&& src, return_value_policy /*policy*/, handle /*parent*/) {
    tdb::register_pybind11_error_translator();
    return src.to_python();
  }
};

}  // namespace detail
}  // namespace pybind11

#endif  // TORCH_DLPACK_BRIDGE_PYBIND11_H_
