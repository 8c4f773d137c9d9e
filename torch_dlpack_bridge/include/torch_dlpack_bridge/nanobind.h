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
 *  - `tdb::ManagedTensor` (by value): an owning export (`managed_tensor_from_py_object_no_sync` or
 *    `__dlpack__`); the function owns it and its deleter runs when it is dropped.
 *  - `tdb::Tensor<float, tdb::shape<-1, 3>, tdb::c_contig, tdb::device::cuda>` (typed parameters,
 *    torch_dlpack_bridge/tensor.h, included here; by value, `const&` or `&`): a TensorView whose dtype, rank,
 *    fixed sizes, memory order, device type and writability the caster checks, one compare each (a writable
 *    parameter also refuses an expanded tensor, see tensor.h).
 *  Each works inside `std::optional`, `std::vector`, `std::variant` (nanobind/stl/...), as a keyword argument
 *  and with a `None` default (`nb::arg("bias") = nb::none()`; a std::optional needs no `.none()`).
 *
 * Arguments a parameter does not take, as in pybind11.h: a non-tensor (a class, such as `torch.Tensor` itself,
 * never is one), a tensor its producer refuses (a conj view, a sparse tensor, a NumPy string array) and a tensor
 * that violates a typed parameter's constraints are all arguments that do not match: the parameter declines them
 * whether or not nanobind allows conversions, so the next overload is tried whatever the other arguments need,
 * and when no overload takes the call nanobind raises its TypeError, "f(): incompatible function arguments",
 * listing every overload with its parameters' names (`nb::arg`) and constraints, and the arguments' types.
 * A parameter never raises while nanobind tries it (nanobind takes the items of a `std::optional` or a list parameter
 * in code that must not throw, where an exception would end the process). Call
 * `tdb::explain_refusals(m)` at the end of `NB_MODULE` and that same TypeError also says which tensor argument each
 * overload refused, and why (refusals.h): ``overload 1: argument 'y': expected dtype float32, got float16``.
 *
 * Return values: a `tdb::OwnedTensor<float, tdb::ndim<2>>` (typed outputs, torch_dlpack_bridge/output.h,
 * included here) or a `tdb::ManagedTensor` becomes a Python tensor of its producer through the producer's
 * `managed_tensor_to_py_object_no_sync` (a `torch.Tensor` for `Out::empty_like(x)` with a torch x); a
 * `std::tuple` of them (with `#include <nanobind/stl/tuple.h>`) becomes a Python tuple:
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
 * Signatures (docstrings, errors, and so the stubs `python -m nanobind.stubgen` writes), as in pybind11.h: a
 * tensor parameter is `torch_dlpack_bridge.typing.DLPackTensor`, a typed one ``typing.Annotated[
 * torch_dlpack_bridge.typing.DLPackTensorOf[typing.Literal['float32']], dict(dtype='float32', ...)]``, a returned
 * tensor `typing.Any` or `typing.Annotated[typing.Any, dict(...)]`.
 *
 * Errors: a `tdb::Error` thrown by the function becomes its Python exception (TypeError, ValueError,
 * BufferError, ...), through an exception translator, once in each extension module that includes this header,
 * whatever its visibility flags. The first tdb::Error made (or the first caster run) registers it, so every
 * function translates from its first call, whatever its arguments (a `std::optional` tensor given None runs no
 * caster); `tdb::register_nanobind_error_translator()` registers it at once, which only a tdb::Error first
 * made on a thread without the GIL needs.
 */
#ifndef TORCH_DLPACK_BRIDGE_NANOBIND_H_
#define TORCH_DLPACK_BRIDGE_NANOBIND_H_

#include <nanobind/nanobind.h>
#include <nanobind/stl/detail/nb_list.h>
#include <nanobind/stl/detail/nb_optional.h>

#include <cstring>
#include <exception>
#include <optional>
#include <utility>
#include <vector>

#include "torch_dlpack_bridge/consumer.h"
#include "torch_dlpack_bridge/output.h"
#include "torch_dlpack_bridge/refusals.h"
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
// Hands the registration to tdb::Error's constructor (errors.h) when the extension module is loaded, before any
// call; every file that includes this header stores the same pointer.
[[maybe_unused]] static const bool nanobind_translator_stored =
    (translator_registrations()[1].store(&register_nanobind_error_translator, std::memory_order_release), true);

#if !defined(Py_LIMITED_API)
/*! \brief A nanobind function's entry point (its vectorcall), one per kind nanobind uses; kept for the wrappers. */
using Vectorcall = PyObject* (*)(PyObject*, PyObject* const*, size_t, PyObject*);
constexpr int kNanobindEntries = 8;
TDB_MODULE_LOCAL inline std::atomic<Vectorcall>* nanobind_entries() {
  static std::atomic<Vectorcall> entries[kNanobindEntries] = {};
  return entries;
}
/*! \brief A nanobind function's `__name__`, as its overload error starts with it ("" if it has none). */
inline std::string nanobind_function_name(PyObject* f) {
  PyObject* name = PyObject_GetAttrString(f, "__name__");
  const char* utf8 = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : nullptr;
  std::string out = utf8 ? utf8 : "";
  Py_XDECREF(name);
  PyErr_Clear();
  return out;
}
/*! \brief Whether some overload of `f` has a tdb tensor parameter, as its signatures (the overload error's) show. */
inline bool nanobind_lists_a_tensor(PyObject* f) {
  PyObject* signatures = PyObject_GetAttrString(f, "__nb_signature__");
  PyObject* text = signatures ? PyObject_Str(signatures) : nullptr;
  const char* utf8 = text ? PyUnicode_AsUTF8(text) : nullptr;
  const bool yes = utf8 && std::strstr(utf8, kSignatureTensor);
  Py_XDECREF(text);
  Py_XDECREF(signatures);
  PyErr_Clear();
  return yes;
}
/*! \brief What a wrapped function's vectorcall slot holds instead of entry I (see refusals.h). */
template <int I>
TDB_MODULE_LOCAL PyObject* nanobind_explained(PyObject* f, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  return dispatch_explained(Dispatch{nanobind_entries()[I].load(std::memory_order_relaxed), f, args, nargsf, kwnames,
                                     &nanobind_function_name});
}
/*!
 * \brief Wraps `f` if it is a nanobind function (any module's: the wrapper calls whatever entry point it had) with a
 * tdb tensor parameter in some overload: its vectorcall slot, which every call reads, gets the explaining wrapper of
 * its entry point. True for any nanobind function (one without such a parameter is left as it is).
 */
TDB_MODULE_LOCAL inline bool wrap_nanobind_function(PyObject* f) {
  static constexpr Vectorcall wrappers[kNanobindEntries] = {
      &nanobind_explained<0>, &nanobind_explained<1>, &nanobind_explained<2>, &nanobind_explained<3>,
      &nanobind_explained<4>, &nanobind_explained<5>, &nanobind_explained<6>, &nanobind_explained<7>};
  PyTypeObject* type = Py_TYPE(f);
  if (std::strcmp(type->tp_name, "nanobind.nb_func") != 0 && std::strcmp(type->tp_name, "nanobind.nb_method") != 0)
    return false;
  if (!nanobind_lists_a_tensor(f)) return true;  // nothing to explain: left as it is
  Vectorcall* slot = reinterpret_cast<Vectorcall*>(reinterpret_cast<char*>(f) + type->tp_vectorcall_offset);
  for (Vectorcall w : wrappers)
    if (*slot == w) return true;
  for (int i = 0; i < kNanobindEntries; ++i) {
    Vectorcall seen = nullptr;
    if (nanobind_entries()[i].compare_exchange_strong(seen, *slot) || seen == *slot) {
      *slot = wrappers[i];
      return true;
    }
  }
  return true;  // more kinds of entry point than wrappers: left as it is (no reasons, nothing else changes)
}
#endif
}  // namespace detail

/*!
 * \brief Makes every function of `m` with a tdb tensor parameter (its classes' methods and property setters,
 * submodules' functions too) say why a tdb parameter refused a tensor when no overload takes a call: nanobind's
 * TypeError, the same type and listing, with one line per overload and refused tensor argument added (refusals.h). Call
 * it at the end of `NB_MODULE`, after the last `def` (a function defined later is not wrapped). The call is dispatched
 * once either way: the reasons are worded only for a refused call, by each parameter type's checks, and a producer
 * without a table is asked `__dlpack__` once per call; a call that is taken costs a few nanoseconds more, nothing per
 * tensor. Any other function is left as it is (nothing to explain: its calls cost what they did). Does nothing with
 * the limited API (`NB_STABLE_ABI`).
 */
inline void explain_refusals(nanobind::module_& m) {
#if !defined(Py_LIMITED_API)
  detail::wrap_functions(m.ptr(), &detail::wrap_nanobind_function);
#else
  (void)m;
#endif
}

namespace detail {

/*! \brief The name of the capsules that carry a failure through nanobind's cleanup list of a call. */
constexpr const char kCarriedFailure[] = "torch_dlpack_bridge.failure";

/*!
 * \brief How a tdb caster ends a call with an exception that is not a refusal (a KeyboardInterrupt, MemoryError,
 * SystemExit or a producer's own, from `__dlpack__` or a table): nanobind calls from_python from noexcept code (its
 * std::optional, std::vector, std::variant and std::tuple casters), where nothing may be thrown. So the exception is
 * carried in nanobind's cleanup list of the call (a capsule: nanobind releases it when the dispatch ends, so it never
 * outlives the call) and kept by the caster, which says it converted (true) while can_cast() says it cannot be used
 * (a container of nanobind's own refuses the item). Every tdb caster that the dispatch runs after it (another overload
 * or pass, a container around the item) takes the carried exception over instead of its argument, and converting
 * any tdb argument (which nanobind does for the chosen overload, right before the body) throws it as
 * nanobind::python_error: the call raises that same exception object, and no body with a tdb parameter runs. In a
 * wrapped call the record keeps it too (call.h), so the call raises it even if nanobind chose an overload without a
 * tdb parameter (after its body ran). Without `explain_refusals` such an overload's body runs and the exception is
 * dropped with the call.
 */
class NanobindDeferred {
 public:
  NanobindDeferred() = default;
  NanobindDeferred(const NanobindDeferred&) = delete;
  NanobindDeferred& operator=(const NanobindDeferred&) = delete;
  ~NanobindDeferred() { Py_XDECREF(raised_); }
  /*! \brief false while an exception is kept: a container of nanobind's own refuses the item. */
  template <typename U>
  bool can_cast() const noexcept { return !raised_; }

 protected:
  /*! \brief Remembers the call (nanobind's cleanup list) and takes over an exception carried in it: true then. */
  TDB_ALWAYS_INLINE bool take_carried(nanobind::detail::cleanup_list* call) noexcept {
    call_ = call;
    return call && call->used() && take_carried_from(call);  // a used list is rare: the search is out of line
  }
  /*! \brief take_carried() past its first checks. */
  TDB_NOINLINE bool take_carried_from(nanobind::detail::cleanup_list* call) noexcept {
    for (size_t i = 1; i < call->size(); ++i) {
      PyObject* c = (*call)[i];
      const char* name = PyCapsule_CheckExact(c) ? PyCapsule_GetName(c) : nullptr;
      if (!name || std::strcmp(name, kCarriedFailure) != 0) continue;
      PyObject* exc = static_cast<PyObject*>(PyCapsule_GetPointer(c, kCarriedFailure));
      Py_INCREF(exc);
      Py_XDECREF(raised_);
      raised_ = exc;
      return true;
    }
    return false;
  }
  /*! \brief After fill_or_note() returned false: false for a refusal; true for another exception (left raised),
   *  now carried and kept (see the class comment). */
  bool refused_or_kept(nanobind::detail::cleanup_list* call) noexcept {
    if (!PyErr_Occurred()) return false;
    Py_XDECREF(raised_);
    raised_ = fetch_exception();
    Py_INCREF(raised_);
    if (!keep_failure(raised_)) Py_DECREF(raised_);  // the wrapped call's record: raised whatever nanobind chooses
    PyObject* carried = call ? PyCapsule_New(raised_, kCarriedFailure, [](PyObject* c) {
      Py_DECREF(static_cast<PyObject*>(PyCapsule_GetPointer(c, kCarriedFailure)));
    }) : nullptr;
    if (carried) {
      Py_INCREF(raised_);
      call->append(carried);  // nanobind owns it now
    }
    PyErr_Clear();
    return true;
  }
  /*! \brief For a container: runs `load` (nanobind's own container caster); an exception an item's caster carried
   *  (or carried before) is kept by the container. */
  template <class F>
  bool load_holding(nanobind::detail::cleanup_list* call, F&& load) noexcept {
    if (take_carried(call)) return true;
    const bool loaded = load();
    return take_carried(call) || loaded;
  }
  /*! \brief Throws the kept exception, or one carried since, as itself. */
  TDB_ALWAYS_INLINE void raise_kept() {
    if (raised_ || take_carried(static_cast<nanobind::detail::cleanup_list*>(call_))) throw_kept();
  }
  /*! \brief raise_kept() once an exception is kept. */
  [[noreturn]] TDB_NOINLINE void throw_kept() {
    PyObject* exc = raised_;
    raised_ = nullptr;
    restore_exception(exc);
    throw nanobind::python_error();
  }

 private:
  PyObject* raised_ = nullptr;  //!< owned
  void* call_ = nullptr;  //!< the call's cleanup list, while nanobind dispatches it (a hidden type: not named here)
};

/*! \brief What both argument casters hold: the value made by from_python; nanobind takes it through these operators. */
template <class T>
class NanobindHeld : public NanobindDeferred {
 public:
  explicit operator T*() { return &held(); }
  explicit operator T&() { return held(); }
  explicit operator T&&() { return std::move(held()); }

 protected:
  T& held() {
    raise_kept();
    return *value_;
  }
  std::optional<T> value_;
};

/*! \brief The argument caster shared by TensorView and ManagedTensor (see the file comment). */
template <class T>
class NanobindArg : public NanobindHeld<T> {
 public:
  /*! \brief In a signature: the protocol type a caller passes; a returned ManagedTensor: the producer's type. */
  static constexpr auto Name = nanobind::detail::io_name(kSignatureTensor, kSignatureResult);
  template <typename U>
  using Cast = nanobind::detail::movable_cast_t<U>;

  /*! \brief false (next overload, or nanobind's TypeError) for a non-tensor and a refused tensor; another
   *  exception from the producer is raised when the argument is converted (NanobindDeferred). */
  bool from_python(nanobind::handle src, uint8_t /*flags*/, nanobind::detail::cleanup_list* call) noexcept {
    register_nanobind_error_translator();
    PyObject* obj = src.ptr();  // (capturing nanobind's handle, a hidden-visibility type, would warn)
    (void)registered_;
    if (!is_dlpack_tensor(obj)) return false;
    if (this->take_carried(call)) return true;
    if (!fill_or_note([this, obj] {
          if constexpr (std::is_same_v<T, TensorView>)
            this->value_.emplace(lent, obj, find_exchange_api(Py_TYPE(obj)), "tensor");
          else this->value_.emplace(ManagedTensor::from_python(obj, "tensor"));
        }, obj, kSignatureTensor))
      return this->refused_or_kept(call);
    return true;
  }

 private:
  /*! \brief The parameter type's recheck, for explain_refusals (refusals.h); hidden, as its module's own. */
  TDB_MODULE_LOCAL static inline const bool registered_ =
      register_recheck(kSignatureTensor, &recheck<TensorView>);
};

/*!
 * \brief The caster of a typed tdb::Tensor<...> argument (tensor.h): a refused tensor, or one that violates a
 * constraint, returns false in both passes (dispatch by dtype, rank, device, ...; nanobind's TypeError).
 */
template <class V, class... Ts>
class NanobindTypedArg : public NanobindHeld<V> {
 public:
  /*!
   * \brief e.g. "typing.Annotated[torch_dlpack_bridge.typing.DLPackTensorOf[typing.Literal['float32']],
   * dict(dtype='float32', shape=(None, 3), order='C', device='cuda', writable=True)]" in signatures and errors: a
   * valid annotation for nanobind's stubgen.
   */
  static constexpr auto Name = nanobind::detail::const_name(Signature<Ts...>::value.text);
  template <typename U>
  using Cast = nanobind::detail::movable_cast_t<U>;

  /*! \brief See the class comment; never throws (another exception from the producer: NanobindDeferred). */
  bool from_python(nanobind::handle src, uint8_t /*flags*/, nanobind::detail::cleanup_list* call) noexcept {
    register_nanobind_error_translator();
    PyObject* obj = src.ptr();
    const DLPackExchangeAPI* api;
    constexpr const char* kParam = Signature<Ts...>::value.text;  // as signatures show the parameter
    (void)registered_;
    if (!dlpack_tensor_table(obj, &api, &autograd_)) return false;
    if (this->take_carried(call)) return true;
    if (!fill_or_note([this, obj, api] { this->value_.emplace(unchecked, obj, api, V::DefaultName); }, obj, kParam))
      return this->refused_or_kept(call);
    if (V::satisfied_by(*this->value_, &autograd_)) return true;  // one compare per constraint
    this->value_.reset();  // another overload may take it
    return false;
  }
  // A written tensor's version counter is bumped (Tensor::commit()) when nanobind converts the argument, which
  // it does for the chosen overload only, right before the body; not for a tdb::detail::Uncommitted element of
  // a std::optional or std::vector, which nanobind converts while it loads them (NanobindContainer commits).
  TDB_ALWAYS_INLINE explicit operator V*() { return &commit(); }
  TDB_ALWAYS_INLINE explicit operator V&() { return commit(); }
  TDB_ALWAYS_INLINE explicit operator V&&() { return std::move(commit()); }

 private:
  TDB_ALWAYS_INLINE V& commit() {
    V& value = this->held();  // throws a kept exception (NanobindDeferred)
    if constexpr (std::is_same_v<V, Tensor<Ts...>>) value.commit(&autograd_);
    return value;
  }
  AutogradFunctions autograd_;  // type(obj)'s, from the table's lookup
  /*! \brief The parameter type's recheck, for explain_refusals (refusals.h); hidden, as its module's own. */
  TDB_MODULE_LOCAL static inline const bool registered_ =
      register_recheck(Signature<Ts...>::value.text, &recheck<Tensor<Ts...>>);
};

/*! \brief A container of untyped elements (tdb::TensorView, tdb::ManagedTensor): nothing to commit. */
template <class T>
std::optional<T> committed(std::optional<T>&& from) {
  return std::move(from);
}
template <class T>
std::vector<T> committed(std::vector<T>&& from) {
  return std::move(from);
}

/*!
 * \brief What a std::vector parameter of tdb tensors loads its items from (borrowed): something that holds them until
 * the call ends. A tuple holds its own; a list's items are copied into a tuple (the body may empty the list), and so
 * are those of any other sequence that nanobind's own caster takes (one that makes its items as they are asked for),
 * kept in the call's cleanup list, since a view made through a table holds no reference to its tensor. nullptr
 * (refused) when such a sequence fails, and for one that is not a list in `nb::cast` (whose cleanup list ends with the
 * cast: its items would not outlive it).
 */
inline PyObject* held_items(PyObject* src, uint8_t flags, nanobind::detail::cleanup_list* cleanup) noexcept {
  if (PyTuple_Check(src) || !cleanup || !PySequence_Check(src) || PyUnicode_Check(src) || PyBytes_Check(src))
    return src;  // nanobind takes or refuses it as it is
  if ((flags & static_cast<uint8_t>(nanobind::detail::cast_flags::manual)) && !PyList_Check(src)) return nullptr;
  PyObject* items = PySequence_Tuple(src);
  if (!items) {
    PyErr_Clear();  // refused, as nanobind refuses a sequence it cannot read
    return nullptr;
  }
  cleanup->append(items);  // the call owns it now
  return items;
}

/*!
 * \brief A std::optional or std::vector of typed tensors: nanobind's own caster (nanobind/stl/optional.h,
 * vector.h) of the same container of tdb::detail::Uncommitted elements, so that what it accepts and how it is
 * named stay nanobind's; converting it for the chosen overload commits each element (Tensor::commit()), which
 * nanobind's caster would have done as it loaded them, in every overload it tried.
 */
template <class Container, class Inner, class InnerCaster = nanobind::detail::make_caster<Inner>>
class NanobindContainer : public NanobindDeferred {
  InnerCaster inner_;
  Container value_;

 public:
  static constexpr auto Name = InnerCaster::Name;
  template <typename U>
  using Cast = nanobind::detail::movable_cast_t<U>;

  /*! \brief nanobind's own container caster, given a vector's items held (held_items()); an element's exception
   *  that is not a refusal is kept by the container, which raises it when converted (NanobindDeferred). */
  bool from_python(nanobind::handle src, uint8_t flags, nanobind::detail::cleanup_list* cleanup) noexcept {
    PyObject* items = src.ptr();
    if constexpr (std::is_same<Container, std::vector<typename Container::value_type>>::value)
      if (!(items = held_items(items, flags, cleanup))) return false;
    return load_holding(cleanup, [&] { return inner_.from_python(items, flags, cleanup); });
  }
  explicit operator Container*() { return &commit(); }
  explicit operator Container&() { return commit(); }
  explicit operator Container&&() { return std::move(commit()); }

 private:
  Container& commit() {
    raise_kept();
    value_ = committed(inner_.operator nanobind::detail::cast_t<Inner>());
    return value_;
  }
};

/*! \brief std::optional and std::vector of tdb::TensorView or tdb::ManagedTensor: nanobind's own caster (its
 *  nanobind/stl header is still what a module includes for them), through NanobindDeferred. */
template <class T>
using NanobindOptional = NanobindContainer<std::optional<T>, std::optional<T>,
                                          nanobind::detail::optional_caster<std::optional<T>>>;
template <class T>
using NanobindVector = NanobindContainer<std::vector<T>, std::vector<T>,
                                        nanobind::detail::list_caster<std::vector<T>, T>>;

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
  /*! \brief `managed_tensor_to_py_object_no_sync`; NULL with the Python exception set on failure. */
  static handle from_cpp(tdb::ManagedTensor&& t, rv_policy, cleanup_list*) noexcept {
    return tdb::guard([&]() -> PyObject* { return t.to_python(); });
  }
};

/*! \brief std::optional and std::vector of tdb::TensorView and tdb::ManagedTensor (tdb::detail::NanobindOptional). */
template <>
struct type_caster<std::optional<tdb::TensorView>> : tdb::detail::NanobindOptional<tdb::TensorView> {};
template <>
struct type_caster<std::vector<tdb::TensorView>> : tdb::detail::NanobindVector<tdb::TensorView> {};
template <>
struct type_caster<std::optional<tdb::ManagedTensor>> : tdb::detail::NanobindOptional<tdb::ManagedTensor> {};
template <>
struct type_caster<std::vector<tdb::ManagedTensor>> : tdb::detail::NanobindVector<tdb::ManagedTensor> {};

/*! \brief Typed tdb::Tensor<...> arguments (tensor.h; see tdb::detail::NanobindTypedArg). */
template <class... Ts>
struct type_caster<tdb::Tensor<Ts...>> : tdb::detail::NanobindTypedArg<tdb::Tensor<Ts...>, Ts...> {};
/*! \brief The elements of a std::optional or std::vector of them, as nanobind's own casters hold them. */
template <class... Ts>
struct type_caster<tdb::detail::Uncommitted<tdb::Tensor<Ts...>>>
    : tdb::detail::NanobindTypedArg<tdb::detail::Uncommitted<tdb::Tensor<Ts...>>, Ts...> {};
/*! \brief std::optional and std::vector of typed tensors (see tdb::detail::NanobindContainer). */
template <class... Ts>
struct type_caster<std::optional<tdb::Tensor<Ts...>>>
    : tdb::detail::NanobindContainer<std::optional<tdb::Tensor<Ts...>>,
                                     std::optional<tdb::detail::Uncommitted<tdb::Tensor<Ts...>>>> {};
template <class... Ts>
struct type_caster<std::vector<tdb::Tensor<Ts...>>>
    : tdb::detail::NanobindContainer<std::vector<tdb::Tensor<Ts...>>,
                                     std::vector<tdb::detail::Uncommitted<tdb::Tensor<Ts...>>>> {};

/*!
 * \brief A returned tdb::OwnedTensor<...> (output.h) becomes its producer's tensor (a torch.Tensor for torch's
 * table); in a `std::tuple` (with nanobind/stl/tuple.h), each one does. Output only.
 */
template <class... Ts>
struct type_caster<tdb::OwnedTensor<Ts...>> {
  /*! \brief e.g. "typing.Annotated[typing.Any, dict(dtype='float32', shape=(None, 3), order='C')]". */
  static constexpr auto Name = const_name(tdb::detail::OutputSignature<Ts...>::value.text);
  /*! \brief `managed_tensor_to_py_object_no_sync`; NULL with the Python exception set on failure. */
  static handle from_cpp(tdb::OwnedTensor<Ts...>&& t, rv_policy, cleanup_list*) noexcept {
    return tdb::guard([&]() -> PyObject* { return t.to_python(); });
  }
};

}  // namespace detail
}  // namespace nanobind

#endif  // TORCH_DLPACK_BRIDGE_NANOBIND_H_
