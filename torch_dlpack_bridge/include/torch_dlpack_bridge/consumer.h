/*!
 * \file torch_dlpack_bridge/consumer.h
 * \brief Header-only C++17 helpers for writing kernels that take tensors of any DLPack producer
 *        (torch.Tensor, ...) through the DLPack C exchange table, from a CPython extension.
 *
 * Depends only on Python.h and torch_dlpack_bridge/dlpack.h: no torch headers, no torch link.
 *
 * Error convention: every helper that can fail throws `tdb::Error`. Wrap the body of each extension
 * function in `tdb::guard`, which turns any C++ exception into a Python exception and returns NULL:
 *
 * \code{.cpp}
 * static PyObject* axpy_(PyObject*, PyObject* args) {
 *   return tdb::guard([&]() -> PyObject* {
 *     tdb::TensorView x(PyTuple_GET_ITEM(args, 1), "x");  // borrowed, valid in this call
 *     tdb::check_dtype(x, tdb::kFloat32);                 // TypeError "argument 'x': ..."
 *     // ...
 *     Py_RETURN_NONE;
 *   });
 * }
 * \endcode
 *
 * Producers: a tensor whose type publishes an exchange table (`__dlpack_c_exchange_api__`) is taken
 * through the table (tens of nanoseconds). Any other object whose type has a `__dlpack__` method (NumPy, JAX,
 * CuPy, older libraries) is taken through the standard Python protocol instead (microseconds): the view then
 * owns the exported tensor, which keeps the producer's data alive for as long as the view. Both names are
 * looked up on the type, as Python looks up special methods, and a class (`torch.Tensor`) is never a tensor.
 *
 * Threads: every function here must be called from a thread attached to the interpreter (holding the GIL,
 * or on a free-threaded CPython, any Python thread), as the exchange table requires. The per-module state
 * (the per-type table cache, the binding headers' translator registration) is thread-safe without the GIL:
 * atomics on the lookup path, written once, so free-threaded CPython (3.13t, 3.14t) is supported. The one
 * exception: a `tdb::ManagedTensor` may be destroyed (or reset()) on any thread, with or without the GIL,
 * as DLPack deleters may run anywhere.
 */
#ifndef TORCH_DLPACK_BRIDGE_CONSUMER_H_
#define TORCH_DLPACK_BRIDGE_CONSUMER_H_

#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "torch_dlpack_bridge/dlpack.h"
#include "torch_dlpack_bridge/names.h"

/*! \cond INTERNAL */
// Attribute macros for this header's own definitions (hidden from the reference: not for kernel code).
// TDB_MODULE_LOCAL gives a function hidden visibility, so that its function-local statics belong to the shared
// object that includes this header. Without it (a module built without -fvisibility=hidden, e.g. with
// setuptools' default flags) GCC emits such a static as one "unique" symbol that the dynamic linker merges
// across every extension module of the process, even those loaded RTLD_LOCAL.
#if defined(__GNUC__) || defined(__clang__)
#define TDB_MODULE_LOCAL __attribute__((visibility("hidden")))
#else
#define TDB_MODULE_LOCAL
#endif

// TDB_ALWAYS_INLINE: for the view's constructors, which run once per tensor argument; compilers keep them out
// of line for their throw paths, and the call then costs about as much as the checks it makes.
#if defined(__GNUC__) || defined(__clang__)
#define TDB_ALWAYS_INLINE __attribute__((always_inline))
#else
#define TDB_ALWAYS_INLINE
#endif
/*! \endcond */

namespace tdb {

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/*!
 * \brief The one exception type thrown by this header. Either carries a Python exception type and a
 * message (raised by `restore()`), or is "pending": a Python exception is already set and owned by the
 * Python error indicator. The Error object owns no Python references.
 */
class Error : public std::exception {
 public:
  /*! \brief An error to be raised as `type(message)`; `type` is a borrowed exception class (PyExc_*). */
  Error(PyObject* type, std::string message) : type_(type), msg_(std::move(message)) {}
  /*! \brief An error whose Python exception is already set (e.g. by a producer function). */
  static Error pending() { return Error(nullptr, "a Python exception is set"); }
  /*! \brief True when the Python exception is already set. */
  bool is_pending() const { return type_ == nullptr; }
  /*! \brief Sets the Python error indicator from this error (GIL held). */
  void restore() const {
    if (type_ != nullptr) {
      PyErr_SetString(type_, msg_.c_str());
    } else if (!PyErr_Occurred()) {
      PyErr_SetString(PyExc_RuntimeError, "DLPack producer failed without setting a Python exception");
    }
  }
  /*! \brief The message (owned by the Error). */
  const char* what() const noexcept override { return msg_.c_str(); }

 private:
  PyObject* type_;
  std::string msg_;
};

/*!
 * \brief Runs `body` (returning a new reference or NULL) and converts any escaping C++ exception into a
 * Python exception: tdb::Error as described, std::bad_alloc as MemoryError, other std::exception as
 * RuntimeError. Returns what `body` returned, or NULL with a Python exception set. Use it as the whole
 * body of a PyCFunction so that no C++ exception crosses into CPython.
 */
template <class F>
PyObject* guard(F&& body) noexcept {
  try {
    return body();
  } catch (const Error& e) {
    e.restore();
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "unknown C++ exception");
  }
  return nullptr;
}

namespace detail {

inline std::string arg(const char* name) { return std::string("argument '") + (name ? name : "?") + "': "; }

/*! \brief Takes the raised exception out of the error indicator: a new reference, or NULL if none. */
inline PyObject* fetch_exception() {
#if PY_VERSION_HEX >= 0x030C0000
  return PyErr_GetRaisedException();
#else
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  if (!type) return nullptr;
  PyErr_NormalizeException(&type, &value, &tb);
  if (tb) PyException_SetTraceback(value, tb);
  Py_XDECREF(tb);
  Py_DECREF(type);
  return value;
#endif
}

/*! \brief Raises `exc` (steals the reference; NULL does nothing). */
inline void restore_exception(PyObject* exc) {
  if (!exc) return;
#if PY_VERSION_HEX >= 0x030C0000
  PyErr_SetRaisedException(exc);
#else
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(exc));
  Py_INCREF(type);
  PyErr_Restore(type, exc, PyException_GetTraceback(exc));
#endif
}

/*! \brief Holds the current Python exception aside for its lifetime (so cleanup may run Python code). */
class ErrorStash {
 public:
  ErrorStash() : exc_(fetch_exception()) {}
  ~ErrorStash() { restore_exception(exc_); }
  ErrorStash(const ErrorStash&) = delete;
  ErrorStash& operator=(const ErrorStash&) = delete;

 private:
  PyObject* exc_;
};

/*!
 * \brief Throws the pending Python exception, re-raised as the same type with "argument 'name': "
 * prepended to its message (the original becomes __cause__). Keeps the original if that fails.
 */
[[noreturn]] inline void throw_pending(const char* name) {
  PyObject* exc = fetch_exception();
  if (!exc) throw Error(PyExc_RuntimeError, arg(name) + "DLPack producer failed without an exception");
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(exc));
  PyObject* text = PyObject_Str(exc);
  const char* utf8 = text ? PyUnicode_AsUTF8(text) : nullptr;
  PyObject* renamed = utf8 ? PyObject_CallFunction(type, "s", (arg(name) + utf8).c_str()) : nullptr;
  Py_XDECREF(text);
  if (renamed && Py_TYPE(renamed) == Py_TYPE(exc)) {
    PyException_SetCause(renamed, exc);  // steals exc
    restore_exception(renamed);
  } else {
    Py_XDECREF(renamed);
    PyErr_Clear();
    restore_exception(exc);
  }
  throw Error::pending();
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Data types, devices and small DLTensor utilities (no ownership involved)
// ---------------------------------------------------------------------------------------------

/*! \brief Common data types and the CPU device, as plain values (nothing to own). */
constexpr DLDataType kBool{kDLBool, 8, 1};
constexpr DLDataType kInt8{kDLInt, 8, 1};
constexpr DLDataType kInt16{kDLInt, 16, 1};
constexpr DLDataType kInt32{kDLInt, 32, 1};
constexpr DLDataType kInt64{kDLInt, 64, 1};
constexpr DLDataType kUInt8{kDLUInt, 8, 1};
constexpr DLDataType kFloat16{kDLFloat, 16, 1};
constexpr DLDataType kBFloat16{kDLBfloat, 16, 1};
constexpr DLDataType kFloat32{kDLFloat, 32, 1};
constexpr DLDataType kFloat64{kDLFloat, 64, 1};
constexpr DLDataType kComplex64{kDLComplex, 64, 1};
constexpr DLDataType kComplex128{kDLComplex, 128, 1};
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

// ---------------------------------------------------------------------------------------------
// Finding a type's exchange table
// ---------------------------------------------------------------------------------------------

namespace detail {

/*! \brief Reads a pointer from a capsule named "dlpack_exchange_api" or from an int; nullptr + why otherwise. */
inline void* table_pointer(PyObject* attr, const char* attr_name, std::string* why) {
  void* p = nullptr;
  if (PyCapsule_CheckExact(attr)) {
    const char* cname = PyCapsule_GetName(attr);
    if (cname && std::string(cname) == TDB_EXCHANGE_API_CAPSULE_NAME) p = PyCapsule_GetPointer(attr, cname);
    else *why = std::string("has ") + attr_name + " as a capsule named '" + (cname ? cname : "NULL") + "'";
  } else if (PyLong_Check(attr)) {
    p = PyLong_AsVoidPtr(attr);
  } else {
    *why = std::string("has ") + attr_name + " of type '" + Py_TYPE(attr)->tp_name + "', not a capsule or int";
  }
  if (!p && why->empty()) *why = std::string("has a NULL ") + attr_name;
  PyErr_Clear();
  return p;
}

/*! \brief Looks the table up on `type` (1.3 capsule, then 1.2 int) and checks its version; no caching. */
inline const DLPackExchangeAPI* read_table(PyTypeObject* type, std::string* why) {
  static const char* const attrs[] = {"__dlpack_c_exchange_api__", "__c_dlpack_exchange_api__"};
  void* p = nullptr;
  for (const char* name : attrs) {
    PyObject* attr = PyObject_GetAttrString(reinterpret_cast<PyObject*>(type), name);
    if (!attr) {
      PyErr_Clear();  // absent (AttributeError) or failing lookup: try the next name
      continue;
    }
    p = table_pointer(attr, name, why);
    Py_DECREF(attr);
    if (p) break;  // an unusable 1.3 attribute still lets a 1.2 one be tried
  }
  if (!p) {
    if (why->empty()) *why = "has no DLPack C exchange table __dlpack_c_exchange_api__";
    return nullptr;
  }
  // A newer major version may chain to older tables through prev_api (bounded walk, in case of cycles).
  const DLPackExchangeAPIHeader* h = static_cast<const DLPackExchangeAPIHeader*>(p);
  for (int hops = 0; h && h->version.major > DLPACK_MAJOR_VERSION && hops < 16; ++hops) h = h->prev_api;
  if (!h || h->version.major != DLPACK_MAJOR_VERSION) {
    const DLPackVersion v = static_cast<const DLPackExchangeAPIHeader*>(p)->version;
    *why = "publishes a DLPack exchange table of version " + std::to_string(v.major) + "." +
           std::to_string(v.minor) + " with no major version " + std::to_string(DLPACK_MAJOR_VERSION) + " table";
    return nullptr;
  }
  const DLPackExchangeAPI* api = reinterpret_cast<const DLPackExchangeAPI*>(h);
  if (!api->managed_tensor_allocator || !api->managed_tensor_from_py_object_no_sync ||
      !api->managed_tensor_to_py_object_no_sync || !api->current_work_stream) {
    *why = "publishes a DLPack exchange table with a NULL required function";
    return nullptr;
  }
  return api;
}

/*!
 * \brief Per-type cache of tables, each entry written once and kept for the life of the process (the type
 * by a strong reference), so readers need no lock, with or without a GIL: an entry's table is stored before
 * its type is published (release), and a reader that sees the type (acquire) sees the table.
 * Two levels: kFast slots filled in order and scanned linearly (an extension meets one or two tensor types:
 * the first compare hits), then kOverflow slots of an open-addressing table keyed by the type's address, for
 * programs with many tensor subclasses, where a type goes at most kProbes slots from its home. Types that
 * find no slot are looked up on every call (correct, slower; the scans that miss stay short).
 * Nothing counts lookups, so nothing can overflow however long the process runs.
 */
struct TableCache {
  static constexpr int kFast = 16;
  static constexpr int kOverflow = 1024;  // a power of two
  static constexpr int kProbes = 8;
  struct Entry {
    PyTypeObject* type;
    const DLPackExchangeAPI* api;
  };
  std::atomic<PyTypeObject*> types[kFast] = {};
  const DLPackExchangeAPI* apis[kFast] = {};
  std::atomic<int> used{0};  // fast slots claimed, at most kFast
  std::atomic<const Entry*> overflow[kOverflow] = {};  // entries are never freed: readers hold no lock
};
TDB_MODULE_LOCAL inline TableCache& table_cache() {
  static TableCache cache;  // one per extension module (TDB_MODULE_LOCAL)
  return cache;
}

/*! \brief Where `type` is, or would go, first in the overflow level. */
inline size_t overflow_home(PyTypeObject* type) noexcept {
  const uint64_t h = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(type) >> 4) * 0x9E3779B97F4A7C15ull;
  return static_cast<size_t>(h >> 40) & (TableCache::kOverflow - 1);
}

/*! \brief The cached table of `type`, or nullptr. */
inline const DLPackExchangeAPI* cached_table(TableCache& c, PyTypeObject* type) noexcept {
  for (int i = 0; i < TableCache::kFast; ++i) {
    PyTypeObject* cached = c.types[i].load(std::memory_order_acquire);
    if (cached == type) return c.apis[i];
    if (cached == nullptr) return nullptr;  // slots fill in order; a slot claimed but not yet published reads null
  }
  for (size_t i = overflow_home(type), probes = 0; probes < TableCache::kProbes; ++probes) {
    const TableCache::Entry* e = c.overflow[i].load(std::memory_order_acquire);
    if (e == nullptr) return nullptr;
    if (e->type == type) return e->api;
    i = (i + 1) & (TableCache::kOverflow - 1);
  }
  return nullptr;
}

/*!
 * \brief Caches `api` for `type` (one strong reference to the type, kept), unless both levels are full.
 * Two threads racing here may both cache the same type in the fast level, which only costs a slot.
 */
inline void cache_table(TableCache& c, PyTypeObject* type, const DLPackExchangeAPI* api) noexcept {
  int slot = c.used.load(std::memory_order_relaxed);
  while (slot < TableCache::kFast && !c.used.compare_exchange_weak(slot, slot + 1, std::memory_order_relaxed)) {
  }
  if (slot < TableCache::kFast) {
    Py_INCREF(type);
    c.apis[slot] = api;
    c.types[slot].store(type, std::memory_order_release);
    return;
  }
  TableCache::Entry* mine = nullptr;  // made only once a free slot is seen: a full window costs no allocation
  for (size_t i = overflow_home(type), probes = 0; probes < TableCache::kProbes; ++probes) {
    const TableCache::Entry* seen = c.overflow[i].load(std::memory_order_acquire);
    if (seen == nullptr) {
      if (mine == nullptr && (mine = new (std::nothrow) TableCache::Entry{type, api}) == nullptr) return;
      if (c.overflow[i].compare_exchange_strong(seen, mine, std::memory_order_acq_rel)) {
        Py_INCREF(type);
        return;
      }
    }
    if (seen->type == type) break;  // another thread cached it meanwhile
    i = (i + 1) & (TableCache::kOverflow - 1);
  }
  delete mine;  // not published: no reader can hold it
}

/*!
 * \brief Runs `f` once per `registration` (module-local), even when threads call at the same time: the
 * binding headers register their exception translators with it, on a free-threaded CPython too.
 */
struct OnceRegistration {
  std::once_flag once;
  std::atomic<bool> done{false};
};
template <class F>
void run_once(OnceRegistration& registration, F&& f) {
  if (registration.done.load(std::memory_order_acquire)) return;  // every call but the first few
  std::call_once(registration.once, [&] {
    f();
    registration.done.store(true, std::memory_order_release);
  });
}

}  // namespace detail

/*!
 * \brief The exchange table published by `type` (the table is static in the producer: never freed),
 * or nullptr with no Python exception set when the type publishes none usable; `why` (optional) says
 * why. Successful lookups are cached per type, so a table must be published before first use.
 */
inline const DLPackExchangeAPI* find_exchange_api(PyTypeObject* type, std::string* why = nullptr) {
  detail::TableCache& c = detail::table_cache();
  if (const DLPackExchangeAPI* cached = detail::cached_table(c, type)) return cached;
  std::string reason;
  const DLPackExchangeAPI* api = detail::read_table(type, &reason);
  if (!api) {
    if (why) *why = reason;
    return nullptr;
  }
  if (detail::cached_table(c, type) == nullptr) detail::cache_table(c, type, api);  // unless a thread just did
  return api;
}

/*!
 * \brief The exchange table of type(obj) (borrowed, static). Throws Error(TypeError) naming the
 * argument and the type when there is none: "argument 'x': expected a tensor, got 'int' (...)".
 */
inline const DLPackExchangeAPI* exchange_api(PyObject* obj, const char* name = "tensor") {
  std::string why;
  const DLPackExchangeAPI* api = find_exchange_api(Py_TYPE(obj), &why);
  if (!api)
    throw Error(PyExc_TypeError, detail::arg(name) + "expected a tensor, got '" + Py_TYPE(obj)->tp_name +
                                     "' (its type " + why + ")");
  return api;
}

namespace detail {

/*!
 * \brief True when type(obj) has a `__dlpack__` method. Looked up on the type, as Python looks up special
 * methods: a class is not a tensor because it has the method (`torch.Tensor`, `numpy.ndarray`), and neither
 * is an object that merely has an attribute of that name. Leaves no Python exception set.
 */
inline bool has_dlpack_method(PyObject* obj) noexcept {
  if (PyType_Check(obj)) return false;
  return PyObject_HasAttrString(reinterpret_cast<PyObject*>(Py_TYPE(obj)), "__dlpack__") == 1;
}

/*!
 * \brief is_dlpack_tensor(obj) (below), also giving type(obj)'s table in `*api` (nullptr when only
 * `__dlpack__` makes it a tensor), so that a type caster looks the table up once for the question and the view.
 */
inline bool dlpack_tensor_table(PyObject* obj, const DLPackExchangeAPI** api) noexcept {
  *api = nullptr;
  if (PyType_Check(obj)) return false;  // one flag test; the metatype of a class publishes nothing anyway
  try {
    if ((*api = find_exchange_api(Py_TYPE(obj)))) return true;
  } catch (...) {  // std::bad_alloc building a message: fall through to the cheaper question
  }
  return has_dlpack_method(obj);
}

}  // namespace detail

/*!
 * \brief True when `obj` (borrowed) can be taken as a tensor: its type publishes an exchange table, or has a
 * `__dlpack__` method. A class (e.g. `torch.Tensor` itself) never is. Never throws and leaves no Python
 * exception set (binding libraries' type casters use it to decide between "not a tensor: try the next
 * overload" and "a tensor: export it").
 */
inline bool is_dlpack_tensor(PyObject* obj) noexcept {
  const DLPackExchangeAPI* api;
  return detail::dlpack_tensor_table(obj, &api);
}

// ---------------------------------------------------------------------------------------------
// The standard Python protocol (__dlpack__), for producers without an exchange table
// ---------------------------------------------------------------------------------------------

namespace detail {

/*!
 * \brief What a tensor taken through `__dlpack__` is handed out as: a versioned tensor of our own that owns
 * the producer's (versioned or legacy) tensor. One heap object; its deleter calls the producer's deleter
 * (which takes the GIL itself if it needs it, as DLPack requires) and frees the wrapper, on any thread.
 */
struct ProtocolTensor {
  DLManagedTensorVersioned self{};     // what ManagedTensor holds; self.manager_ctx points back here
  DLManagedTensorVersioned* versioned = nullptr;  // the producer's tensor: exactly one of these two is set
  DLManagedTensor* legacy = nullptr;
  std::vector<int64_t> strides;        // row-major strides, filled only when the producer gave NULL strides

  static void deleter(DLManagedTensorVersioned* self) {
    ProtocolTensor* w = static_cast<ProtocolTensor*>(self->manager_ctx);
    if (w->versioned && w->versioned->deleter) w->versioned->deleter(w->versioned);
    if (w->legacy && w->legacy->deleter) w->legacy->deleter(w->legacy);
    delete w;
  }
};

/*! \brief `obj.__dlpack_device__()` as a DLDevice; (kDLCPU, 0) when the object has no such method. */
inline DLDevice protocol_device(PyObject* obj, const char* name) {
  PyObject* result = PyObject_CallMethod(obj, "__dlpack_device__", nullptr);
  if (!result) {
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) throw_pending(name);
    PyErr_Clear();
    return DLDevice{kDLCPU, 0};
  }
  int type = 0, id = 0;
  const bool ok = PyTuple_Check(result) && PyArg_ParseTuple(result, "ii", &type, &id);
  Py_DECREF(result);
  if (!ok) {
    PyErr_Clear();
    throw Error(PyExc_BufferError, arg(name) + "__dlpack_device__() did not return a (device_type, device_id) pair");
  }
  return DLDevice{static_cast<DLDeviceType>(type), id};
}

/*!
 * \brief The `stream` argument for `__dlpack__` on `device`, as a new reference, or NULL for None. The
 * Python spec defines streams for CUDA and ROCm only (CPU and the rest must get None). We ask for the
 * default stream (CUDA: 1, the legacy default stream; ROCm: 0): a consumer without an exchange table
 * has no producer to ask for its current stream, and tdb::current_stream() gives NULL (the default
 * stream) for such tensors, so kernels launched there are ordered after the producer's work.
 */
inline PyObject* protocol_stream(DLDevice device) {
  switch (device.device_type) {
    case kDLCUDA:
    case kDLCUDAManaged: return PyLong_FromLong(1);
    case kDLROCM: return PyLong_FromLong(0);
    default: return nullptr;
  }
}

/*! \brief Calls `method(**kwargs)`; kwargs holds `stream` (if not NULL) and, when `versioned`, max_version and copy. */
inline PyObject* call_dlpack(PyObject* method, PyObject* stream, bool versioned) {
  PyObject* kwargs = PyDict_New();
  PyObject* args = PyTuple_New(0);
  PyObject* result = nullptr;
  bool ok = kwargs && args && (!stream || PyDict_SetItemString(kwargs, "stream", stream) == 0);
  if (ok && versioned) {
    PyObject* max_version = Py_BuildValue("(ii)", DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION);
    // copy=False: a kernel may write through the view, so a silent copy would lose its results.
    ok = max_version && PyDict_SetItemString(kwargs, "max_version", max_version) == 0 &&
         PyDict_SetItemString(kwargs, "copy", Py_False) == 0;
    Py_XDECREF(max_version);
  }
  if (ok) result = PyObject_Call(method, args, kwargs);
  Py_XDECREF(args);
  Py_XDECREF(kwargs);
  return result;
}

/*!
 * \brief Exports `obj` through the standard protocol: `__dlpack_device__()`, then `__dlpack__(stream=...,
 * max_version=(1, 3), copy=False)`, and if the producer does not take those arguments (TypeError), the
 * legacy `__dlpack__(stream=...)`. Takes ownership of the capsule's tensor (renaming the capsule to
 * "used_..." as the spec says) and returns it wrapped as a new ProtocolTensor's `self`: the caller owns it.
 * Throws TypeError (naming `name`) when obj is a class or its type has no `__dlpack__` method, BufferError
 * for an unusable capsule or a tensor of another major version, and the producer's own error otherwise.
 */
inline DLManagedTensorVersioned* export_by_protocol(PyObject* obj, const char* name) {
  if (PyType_Check(obj))
    throw Error(PyExc_TypeError, arg(name) + "expected a tensor, got the class '" +
                                     reinterpret_cast<PyTypeObject*>(obj)->tp_name + "' itself");
  PyObject* method = has_dlpack_method(obj) ? PyObject_GetAttrString(obj, "__dlpack__") : nullptr;
  if (!method) {
    PyErr_Clear();
    std::string why;
    read_table(Py_TYPE(obj), &why);
    throw Error(PyExc_TypeError, arg(name) + "expected a tensor, got '" + Py_TYPE(obj)->tp_name + "' (its type " +
                                     why + ", and no __dlpack__ method)");
  }
  DLDevice device{kDLCPU, 0};
  PyObject* stream = nullptr;
  PyObject* capsule = nullptr;
  try {
    device = protocol_device(obj, name);
    stream = protocol_stream(device);
    if (!stream && PyErr_Occurred()) throw_pending(name);
    capsule = call_dlpack(method, stream, true);
    if (!capsule && PyErr_ExceptionMatches(PyExc_TypeError)) {  // a producer older than max_version/copy
      PyErr_Clear();
      capsule = call_dlpack(method, stream, false);
    }
  } catch (...) {
    Py_DECREF(method);
    Py_XDECREF(stream);
    throw;
  }
  Py_DECREF(method);
  Py_XDECREF(stream);
  if (!capsule) throw_pending(name);

  // Take the tensor out of the capsule; from here on we own it (the renamed capsule will not free it).
  DLManagedTensorVersioned* versioned = nullptr;
  DLManagedTensor* legacy = nullptr;
  if (PyCapsule_IsValid(capsule, "dltensor_versioned")) {
    versioned = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(capsule, "dltensor_versioned"));
    if (versioned) PyCapsule_SetName(capsule, "used_dltensor_versioned");
  } else if (PyCapsule_IsValid(capsule, "dltensor")) {
    legacy = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    if (legacy) PyCapsule_SetName(capsule, "used_dltensor");
  }
  const std::string what = PyCapsule_CheckExact(capsule) ? "a capsule not named 'dltensor_versioned' or 'dltensor'"
                                                         : std::string("'") + Py_TYPE(capsule)->tp_name + "'";
  Py_DECREF(capsule);
  PyErr_Clear();
  if (!versioned && !legacy)
    throw Error(PyExc_BufferError, arg(name) + "__dlpack__() returned " + what + ", not a DLPack tensor");
  if (versioned && versioned->version.major != DLPACK_MAJOR_VERSION) {
    const uint32_t major = versioned->version.major;
    if (versioned->deleter) versioned->deleter(versioned);  // the only thing DLPack allows us to touch
    throw Error(PyExc_BufferError, arg(name) + "DLPack tensor of major version " + std::to_string(major) +
                                       " is not supported (need " + std::to_string(DLPACK_MAJOR_VERSION) + ")");
  }

  ProtocolTensor* w = nullptr;
  try {
    w = new ProtocolTensor;
    w->versioned = versioned;
    w->legacy = legacy;
    w->self.version = DLPackVersion{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
    w->self.manager_ctx = w;
    w->self.deleter = &ProtocolTensor::deleter;
    w->self.flags = versioned ? versioned->flags : 0;
    w->self.dl_tensor = versioned ? versioned->dl_tensor : legacy->dl_tensor;
    DLTensor& t = w->self.dl_tensor;
    if (t.ndim > 0 && t.shape && !t.strides) {  // NULL strides meant row-major before DLPack 1.2
      w->strides.resize(t.ndim);
      for (int64_t i = t.ndim - 1, s = 1; i >= 0; s *= t.shape[i], --i) w->strides[i] = s;
      t.strides = w->strides.data();
    }
  } catch (...) {  // out of memory: give the producer's tensor back before reporting
    delete w;
    if (versioned && versioned->deleter) versioned->deleter(versioned);
    if (legacy && legacy->deleter) legacy->deleter(legacy);
    throw;
  }
  return &w->self;
}

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

// ---------------------------------------------------------------------------------------------
// Owning handle
// ---------------------------------------------------------------------------------------------

/*!
 * \brief Owns one DLManagedTensorVersioned: calls its deleter exactly once (destructor or reset()),
 * unless ownership is handed on by release() or to_python(). Movable, not copyable. Also remembers
 * the producer's table (borrowed, static) so the tensor can go back to Python.
 */
class ManagedTensor {
 public:
  /*! \brief An empty handle. */
  ManagedTensor() = default;
  /*!
   * \brief Adopts `t` (takes ownership). If its major version differs from DLPACK_MAJOR_VERSION, calls
   * the deleter at once and throws Error(BufferError), as DLPack requires.
   */
  ManagedTensor(DLManagedTensorVersioned* t, const DLPackExchangeAPI* api) : t_(t), api_(api) {
    if (t_ && t_->version.major != DLPACK_MAJOR_VERSION) {
      const uint32_t major = t_->version.major;
      reset();
      throw Error(PyExc_BufferError, "DLPack tensor of major version " + std::to_string(major) +
                                         " is not supported (need " + std::to_string(DLPACK_MAJOR_VERSION) + ")");
    }
  }
  /*!
   * \brief Exports `obj` (borrowed) and owns the result: through its type's table
   * (managed_tensor_from_py_object_no_sync) when it has one, else through `obj.__dlpack__()` (then api()
   * is nullptr). Throws TypeError naming `name` for an object that is neither, or the producer's error.
   */
  static ManagedTensor from_python(PyObject* obj, const char* name = "tensor") {
    return from_python(obj, find_exchange_api(Py_TYPE(obj)), name);
  }
  /*! \brief from_python() with the table already looked up (`api` nullptr: use `__dlpack__`). */
  static ManagedTensor from_python(PyObject* obj, const DLPackExchangeAPI* api, const char* name) {
    if (!api) {
      ManagedTensor m(detail::export_by_protocol(obj, name), nullptr);
      detail::check_described(m.dl(), name);
      return m;
    }
    DLManagedTensorVersioned* out = nullptr;
    if (api->managed_tensor_from_py_object_no_sync(obj, &out) != 0) detail::throw_pending(name);
    ManagedTensor m(out, api);
    detail::check_described(m.dl(), name);  // the deleter runs if this throws
    return m;
  }
  ManagedTensor(const ManagedTensor&) = delete;
  ManagedTensor& operator=(const ManagedTensor&) = delete;
  ManagedTensor(ManagedTensor&& o) noexcept : t_(o.t_), api_(o.api_) { o.t_ = nullptr; }
  ManagedTensor& operator=(ManagedTensor&& o) noexcept {
    if (this != &o) {
      reset();
      t_ = o.t_;
      api_ = o.api_;
      o.t_ = nullptr;
    }
    return *this;
  }
  ~ManagedTensor() {
    if (t_) reset();  // the empty handle (e.g. inside a TensorView) costs one test, not a call
  }

  /*!
   * \brief Calls the deleter now (if any tensor is held) and empties the handle. Safe with a Python
   * exception set, and safe on any thread with or without the GIL (also after interpreter shutdown):
   * DLPack deleters take the GIL themselves when they need it.
   */
  void reset() noexcept {
    DLManagedTensorVersioned* t = t_;
    t_ = nullptr;
    if (!t || !t->deleter) return;
    // Only a thread holding the GIL has a Python error indicator to protect from a deleter that runs
    // Python code; touching it without the GIL (PyErr_Fetch) dereferences a NULL thread state.
    if (Py_IsInitialized() && PyGILState_Check()) {
      detail::ErrorStash keep;
      t->deleter(t);
    } else {
      t->deleter(t);
    }
  }
  /*! \brief Gives up ownership: the caller must call the deleter (exactly once) or pass the tensor on. */
  DLManagedTensorVersioned* release() noexcept {
    DLManagedTensorVersioned* t = t_;
    t_ = nullptr;
    return t;
  }
  /*!
   * \brief Hands the tensor to its producer's managed_tensor_to_py_object_no_sync (which takes ownership
   * whatever happens) and returns the new Python object (a new reference). The handle is empty after.
   */
  PyObject* to_python() {
    if (!t_) throw Error(PyExc_ValueError, "ManagedTensor::to_python on an empty handle");
    if (!api_)
      throw Error(PyExc_TypeError, "cannot return a tensor taken through __dlpack__ to Python: its producer "
                                   "has no DLPack exchange table (managed_tensor_to_py_object_no_sync)");
    void* out = nullptr;
    if (api_->managed_tensor_to_py_object_no_sync(release(), &out) != 0) throw Error::pending();
    return static_cast<PyObject*>(out);
  }

  /*! \brief The held tensor (still owned by this handle), or nullptr. */
  DLManagedTensorVersioned* get() const { return t_; }
  /*! \brief The held DLTensor; its shape/strides/data live until the deleter runs. Handle must be non-empty. */
  const DLTensor& dl() const { return t_->dl_tensor; }
  DLTensor& dl() { return t_->dl_tensor; }  // mutable overload
  /*! \brief The producer's table (static), or nullptr (empty handle, or a tensor taken through __dlpack__). */
  const DLPackExchangeAPI* api() const { return api_; }
  /*! \brief DLPACK_FLAG_BITMASK_* flags of the held tensor. */
  uint64_t flags() const { return t_ ? t_->flags : 0; }
  explicit operator bool() const { return t_ != nullptr; }

 private:
  DLManagedTensorVersioned* t_ = nullptr;
  const DLPackExchangeAPI* api_ = nullptr;
};

// ---------------------------------------------------------------------------------------------
// Non-owning view
// ---------------------------------------------------------------------------------------------

/*!
 * \brief A DLTensor describing a Python tensor argument, filled on the stack by the producer's
 * dltensor_from_py_object_no_sync: no allocation, no reference taken. It owns nothing and is valid only
 * while `obj` is alive and unchanged, i.e. during the extension call that received `obj` (do not keep it,
 * and do not release the GIL while other threads may resize the tensor). If the producer has no
 * dltensor_from_py_object_no_sync, or no table at all (then `obj.__dlpack__()` is used), the view holds
 * an owning export instead, freed with the view; it keeps the producer's data alive until then.
 * `name` (a string literal, borrowed) names the argument in every error message.
 */
class TensorView {
 public:
  /*! \brief Describes `obj` (borrowed). Throws TypeError for a non-tensor, or the producer's error, named. */
  TDB_ALWAYS_INLINE TensorView(PyObject* obj, const char* name)
      : TensorView(obj, find_exchange_api(Py_TYPE(obj)), name) {}
  /*!
   * \brief Describes `obj` (borrowed) through `api`, the table find_exchange_api(Py_TYPE(obj)) returned
   * (nullptr: through `obj.__dlpack__()`). For type casters that have looked the table up already.
   */
  TDB_ALWAYS_INLINE TensorView(PyObject* obj, const DLPackExchangeAPI* api, const char* name)
      : name_(name), api_(api) {
    if (api_ && api_->dltensor_from_py_object_no_sync) {  // the fast path: no allocation, no reference
      if (api_->dltensor_from_py_object_no_sync(obj, &t_) != 0) detail::throw_pending(name);
    } else {
      owned_ = ManagedTensor::from_python(obj, api_, name);
      t_ = owned_.dl();
      read_only_ = (owned_.flags() & DLPACK_FLAG_BITMASK_READ_ONLY) != 0;
    }
    if (!owned_) detail::check_described(t_, name);  // from_python() checked an owning export already
  }
  TensorView(const TensorView&) = delete;
  TensorView& operator=(const TensorView&) = delete;
  /*! \brief Moves the view (and any owning export it holds); shape/strides stay where they were. */
  TensorView(TensorView&&) noexcept = default;
  /*! \brief As the move constructor, releasing any export this view held (std::variant's casters assign). */
  TensorView& operator=(TensorView&&) noexcept = default;

  /*! \brief The DLTensor (shape/strides/data owned by the producer or by this view). */
  const DLTensor& dl() const { return t_; }
  /*! \brief The argument name used in errors. */
  const char* name() const { return name_; }
  /*!
   * \brief Renames the argument for later error messages (`name` is borrowed: use a string literal).
   * For views made by a binding library's type caster, which cannot know the parameter's name.
   */
  TensorView& set_name(const char* name) {
    name_ = name;
    return *this;
  }
  /*!
   * \brief The producer's table (static), e.g. for allocate() and current_stream(); nullptr for a tensor
   * taken through `__dlpack__` (its producer publishes no table).
   */
  const DLPackExchangeAPI* api() const { return api_; }
  /*! \brief Shortcuts into dl(): borrowed values, valid as long as the view. */
  int32_t ndim() const { return t_.ndim; }
  int64_t size(int32_t dim) const { return t_.shape[dim]; }
  int64_t stride(int32_t dim) const { return t_.strides[dim]; }
  const int64_t* shape() const { return t_.shape; }
  const int64_t* strides() const { return t_.strides; }
  DLDataType dtype() const { return t_.dtype; }
  DLDevice device() const { return t_.device; }
  int64_t numel() const { return tdb::numel(t_); }
  bool is_contiguous() const { return tdb::is_contiguous(t_); }
  /*! \brief True only when the producer said so (the non-owning path carries no flags: then false). */
  bool read_only() const { return read_only_; }
  /*! \brief Typed pointer to the first element (data + byte_offset); memory owned by the producer. */
  template <class T>
  T* data() const { return data_ptr<T>(t_); }

 private:
  DLTensor t_{};
  const char* name_;
  const DLPackExchangeAPI* api_;
  ManagedTensor owned_;
  bool read_only_ = false;
};

// ---------------------------------------------------------------------------------------------
// Streams and allocation
// ---------------------------------------------------------------------------------------------

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
}  // namespace detail

/*!
 * \brief Allocates a new C-contiguous tensor through the producer's managed_tensor_allocator and returns
 * the owning handle (use .to_python() to return it to Python). A failure reported through SetError
 * becomes a Python exception of that kind (MemoryError, ValueError, ...) thrown as tdb::Error.
 */
inline ManagedTensor allocate(const DLPackExchangeAPI* api, int32_t ndim, const int64_t* shape, DLDataType dtype,
                              DLDevice device) {
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
      throw Error(detail::exception_class(err.kind), err.message);
    }
    throw Error::pending();
  }
  ManagedTensor result(out, api);
  const DLTensor& t = result.dl();
  if (t.ndim != ndim || !same_dtype(t.dtype, dtype) || !tdb::is_contiguous(t))
    throw Error(PyExc_BufferError, "producer allocator returned a tensor other than the one requested");
  return result;
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

// ---------------------------------------------------------------------------------------------
// Argument checks: each throws Error (TypeError for dtype, ValueError otherwise) naming the argument.
// The DLTensor forms take the name explicitly; the TensorView forms use the view's name.
// ---------------------------------------------------------------------------------------------

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

inline void check_dtype(const TensorView& v, DLDataType dtype) { check_dtype(v.dl(), v.name(), dtype); }
inline void check_device(const TensorView& v, DLDeviceType type) { check_device(v.dl(), v.name(), type); }
inline void check_device(const TensorView& v, DLDevice device) { check_device(v.dl(), v.name(), device); }
inline void check_ndim(const TensorView& v, int32_t ndim) { check_ndim(v.dl(), v.name(), ndim); }
inline void check_shape(const TensorView& v, std::initializer_list<int64_t> shape) {
  check_shape(v.dl(), v.name(), shape);
}
inline void check_same_shape(const TensorView& a, const TensorView& b) {
  check_same_shape(a.dl(), a.name(), b.dl(), b.name());
}
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

#endif  // TORCH_DLPACK_BRIDGE_CONSUMER_H_
