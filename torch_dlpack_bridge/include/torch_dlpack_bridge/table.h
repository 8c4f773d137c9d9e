/*!
 * \file torch_dlpack_bridge/table.h
 * \brief Finding a producer's DLPack C exchange table on its type (`find_exchange_api`, `exchange_api`,
 *        `is_dlpack_tensor`) and caching it per type, lock-free (free-threaded CPython included); plus the
 *        module-local once-only registration the binding headers use.
 *
 * Included by protocol.h, managed.h and view.h (consumer.h includes it for raw-CPython kernels).
 */
#ifndef TORCH_DLPACK_BRIDGE_TABLE_H_
#define TORCH_DLPACK_BRIDGE_TABLE_H_

#include <atomic>
#include <cstdint>
#include <mutex>
#include <new>
#include <string>

#include "torch_dlpack_bridge/config.h"
#include "torch_dlpack_bridge/dlpack.h"
#include "torch_dlpack_bridge/errors.h"

namespace tdb {

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
 * \brief What a type's TDB_AUTOGRAD_LAYOUT_ATTR, TDB_AUTOGRAD_PROBE_ATTR or TDB_VERSION_BUMP_ATTR capsule holds
 * (dlpack.h; autograd.h uses them), nullptr when it has none usable. Read with the table and cached with it: one
 * lookup per type.
 */
using AutogradProbe = int (*)(PyObject*);
inline void* read_autograd_capsule(PyTypeObject* type, const char* attr_name, const char* capsule_name) noexcept {
  PyObject* attr = PyObject_GetAttrString(reinterpret_cast<PyObject*>(type), attr_name);
  void* p = attr && PyCapsule_IsValid(attr, capsule_name) ? PyCapsule_GetPointer(attr, capsule_name) : nullptr;
  Py_XDECREF(attr);
  PyErr_Clear();  // absent: the generic Python path
  return p;
}
/*!
 * \brief What autograd.h uses for a written parameter of this type (each may be nullptr): the layout that answers
 * inline for torch.Tensor and nn.Parameter objects, else the two functions.
 */
struct AutogradFunctions {
  const TDBAutogradLayout* layout = nullptr;
  AutogradProbe probe = nullptr;  // requires_grad: 1, 0, or -1 (unknown)
  AutogradProbe bump = nullptr;   // the version counter bumped (0), or -1 (unknown)
};
inline AutogradFunctions read_autograd_functions(PyTypeObject* type) noexcept {
  AutogradFunctions f;
  f.layout = static_cast<const TDBAutogradLayout*>(
      read_autograd_capsule(type, TDB_AUTOGRAD_LAYOUT_ATTR, TDB_AUTOGRAD_LAYOUT_CAPSULE_NAME));
  f.probe = reinterpret_cast<AutogradProbe>(
      read_autograd_capsule(type, TDB_AUTOGRAD_PROBE_ATTR, TDB_AUTOGRAD_PROBE_CAPSULE_NAME));
  f.bump = reinterpret_cast<AutogradProbe>(
      read_autograd_capsule(type, TDB_VERSION_BUMP_ATTR, TDB_VERSION_BUMP_CAPSULE_NAME));
  return f;
}

/*!
 * \brief Per-type cache of tables (each with the type's autograd functions), each entry written once and kept
 * for the life of the process (the type by a strong reference), so readers need no lock, with or without a GIL:
 * an entry's table and functions are stored before its type is published (release), and a reader that sees the
 * type (acquire) sees them.
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
    AutogradFunctions autograd;
  };
  std::atomic<PyTypeObject*> types[kFast] = {};
  const DLPackExchangeAPI* apis[kFast] = {};
  AutogradFunctions autograd[kFast] = {};
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

/*!
 * \brief The cached table of `type` (and its autograd functions in `*autograd`, if given), or nullptr (and
 * *autograd unchanged).
 */
inline const DLPackExchangeAPI* cached_table(TableCache& c, PyTypeObject* type,
                                             AutogradFunctions* autograd = nullptr) noexcept {
  for (int i = 0; i < TableCache::kFast; ++i) {
    PyTypeObject* cached = c.types[i].load(std::memory_order_acquire);
    if (cached == type) {
      if (autograd) *autograd = c.autograd[i];
      return c.apis[i];
    }
    if (cached == nullptr) return nullptr;  // slots fill in order; a slot claimed but not yet published reads null
  }
  for (size_t i = overflow_home(type), probes = 0; probes < TableCache::kProbes; ++probes) {
    const TableCache::Entry* e = c.overflow[i].load(std::memory_order_acquire);
    if (e == nullptr) return nullptr;
    if (e->type == type) {
      if (autograd) *autograd = e->autograd;
      return e->api;
    }
    i = (i + 1) & (TableCache::kOverflow - 1);
  }
  return nullptr;
}

/*!
 * \brief Caches `api` for `type` (one strong reference to the type, kept), unless both levels are full.
 * Two threads racing here may both cache the same type in the fast level, which only costs a slot.
 */
inline void cache_table(TableCache& c, PyTypeObject* type, const DLPackExchangeAPI* api,
                        AutogradFunctions autograd) noexcept {
  int slot = c.used.load(std::memory_order_relaxed);
  while (slot < TableCache::kFast && !c.used.compare_exchange_weak(slot, slot + 1, std::memory_order_relaxed)) {
  }
  if (slot < TableCache::kFast) {
    Py_INCREF(type);
    c.apis[slot] = api;
    c.autograd[slot] = autograd;
    c.types[slot].store(type, std::memory_order_release);
    return;
  }
  TableCache::Entry* mine = nullptr;  // made only once a free slot is seen: a full window costs no allocation
  for (size_t i = overflow_home(type), probes = 0; probes < TableCache::kProbes; ++probes) {
    const TableCache::Entry* seen = c.overflow[i].load(std::memory_order_acquire);
    if (seen == nullptr) {
      if (mine == nullptr && (mine = new (std::nothrow) TableCache::Entry{type, api, autograd}) == nullptr) return;
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
inline const DLPackExchangeAPI* find_exchange_api(PyTypeObject* type, std::string* why = nullptr);

namespace detail {
/*!
 * \brief find_exchange_api(), also giving the type's autograd functions in `*autograd` (if given; left as they
 * are when there is no table): a typed caster's written parameter takes them from the same lookup (autograd.h).
 */
inline const DLPackExchangeAPI* find_table(PyTypeObject* type, std::string* why, AutogradFunctions* autograd) {
  TableCache& c = table_cache();
  if (const DLPackExchangeAPI* cached = cached_table(c, type, autograd)) return cached;
  std::string reason;
  const DLPackExchangeAPI* api = read_table(type, &reason);
  if (!api) {
    if (why) *why = reason;
    return nullptr;
  }
  const AutogradFunctions functions = read_autograd_functions(type);
  if (autograd) *autograd = functions;
  if (cached_table(c, type) == nullptr) cache_table(c, type, api, functions);  // unless a thread just did
  return api;
}
}  // namespace detail

inline const DLPackExchangeAPI* find_exchange_api(PyTypeObject* type, std::string* why) {
  return detail::find_table(type, why, nullptr);
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
 * `__dlpack__` makes it a tensor) and its autograd functions in `*autograd` (if given), so that a type caster
 * looks the table up once for the question, the view and a written parameter's autograd.
 */
inline bool dlpack_tensor_table(PyObject* obj, const DLPackExchangeAPI** api,
                                AutogradFunctions* autograd = nullptr) noexcept {
  *api = nullptr;
  if (PyType_Check(obj)) return false;  // one flag test; the metatype of a class publishes nothing anyway
  try {
    if ((*api = find_table(Py_TYPE(obj), nullptr, autograd))) return true;
  } catch (...) {  // std::bad_alloc building a message: fall through to the cheaper question
  }
  return has_dlpack_method(obj);
}

}  // namespace detail

/*!
 * \brief True when `obj` (borrowed) can be taken as a tensor: its type publishes an exchange table, or has a
 * `__dlpack__` method. A class (e.g. `torch.Tensor` itself) never is. Never throws and leaves no Python
 * exception set (binding libraries' type casters use it to decide between
 * "not a tensor: try the next overload" and "a tensor: export it").
 */
inline bool is_dlpack_tensor(PyObject* obj) noexcept {
  const DLPackExchangeAPI* api;
  return detail::dlpack_tensor_table(obj, &api);
}

}  // namespace tdb

#endif  // TORCH_DLPACK_BRIDGE_TABLE_H_
