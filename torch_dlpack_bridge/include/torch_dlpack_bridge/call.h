/*!
 * \file torch_dlpack_bridge/call.h
 * \brief The record of a call of a function wrapped by `tdb::explain_refusals`, which only that call reaches
 *        (refusals.h opens and ends it).
 *
 * The design in one paragraph. A wrapped call puts its CallRecord on its own stack and lists it, with the Python frame
 * that made the call, among the live records (with the GIL, the module's list, changed only with the GIL held and only
 * by the threads of the interpreter that wrapped the module; without it, the thread's own); the record takes itself off
 * the list when the call returns or raises, in whatever order calls end. A caster finds a record only through the frame
 * it runs in: the list is searched for the current frame, and no record is read unless its frame matches. The binding
 * library converts a call's arguments and runs its body in the caller's frame, so the call's own casters (every
 * overload and pass) and the casts its C++ body makes itself find its record. Any Python code that runs meanwhile runs
 * in a frame of its own and finds nothing: a producer's `__dlpack__`, a list's `__getitem__`, a scalar's `__index__`, a
 * trace or profile function, a callback the body calls, and whatever runs on another greenlet (a greenlet suspended
 * inside a call has its stack copied away, and its frames are not the running ones, so its record is never read). A
 * call made from there opens a record of its own (wrapped) or keeps nothing (a function defined after
 * `explain_refusals`, a module without it). What the record keeps: the tensors exported through `__dlpack__`, lent to
 * every overload and pass so that each producer is asked once per call; the producers' refusals, to word the TypeError
 * and so that a refusing producer is not asked again; and the first exception that was not a refusal, which the call
 * ends with (nanobind.h: a nanobind caster cannot raise it). All of it is released when the record is destroyed, as the
 * call ends. The items a list parameter's caster makes while it converts are another matter, kept for every call,
 * wrapped or not (pybind11.h, nanobind.h).
 *
 * Included by view.h; a kernel author never includes it directly.
 */
#ifndef TORCH_DLPACK_BRIDGE_CALL_H_
#define TORCH_DLPACK_BRIDGE_CALL_H_

#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <unordered_map>
#include <vector>

#include "torch_dlpack_bridge/config.h"
#include "torch_dlpack_bridge/dlpack.h"
#include "torch_dlpack_bridge/managed.h"

namespace tdb {
namespace detail {

/*! \brief A producer's refusal of `obj`: its exception, which words the refusal if the call fails. */
struct Noted {
  PyObject* obj;      //!< owned: the argument or item
  const char* param;  //!< the parameter's type as signatures show it (static text)
  PyObject* error;    //!< owned: the producer's exception
};

/*! \brief What a record keeps, made at its first entry (an accepted call through tables makes none). */
struct Entries {
  std::vector<Noted> notes;
  std::unordered_map<PyObject*, ManagedTensor> exported;  //!< owned keys: each object's `__dlpack__` export
  PyObject* failure = nullptr;                            //!< owned: the first exception that was not a refusal
  Entries() = default;
  Entries(const Entries&) = delete;
  Entries& operator=(const Entries&) = delete;
  TDB_NOINLINE ~Entries() {  // with the GIL: the wrapper's thread holds it
    for (Noted& n : notes) {
      Py_DECREF(n.obj);
      Py_XDECREF(n.error);
    }
    for (auto& e : exported) {
      e.second.reset();  // the producer's deleter, before its object may go
      Py_DECREF(e.first);
    }
    Py_XDECREF(failure);
  }
};

#if !defined(Py_LIMITED_API)
/*! \brief The running thread's state (a call holds the GIL, or is attached without one: never nullptr). */
inline PyThreadState* running_thread() noexcept {
#if PY_VERSION_HEX >= 0x030D0000
  return PyThreadState_GetUnchecked();
#else
  return _PyThreadState_UncheckedGet();
#endif
}

/*!
 * \brief The Python frame running on `t`: the key by which a call's casters find its record, compared and never read
 * (the interpreter's own frame, so that no frame object is made for it).
 */
inline const void* running_frame(PyThreadState* t) noexcept {
#if PY_VERSION_HEX >= 0x030D0000
  return t->current_frame;
#elif PY_VERSION_HEX >= 0x030B0000
  return t->cframe->current_frame;
#else
  return t->frame;
#endif
}
#endif

struct CallRecord;
/*! \brief A live record and the frame of the call that made it. */
struct LiveRecord {
  const void* frame;
  CallRecord* record;
};

/*!
 * \brief Live records, oldest first. Only the record whose frame matches is ever read: the others may sit on the
 * copied-away stack of a suspended greenlet.
 */
struct LiveRecords {
  std::vector<LiveRecord> items;  // never shrinks: as long as the most calls ever live at once

  /*! \brief Lists `record`; false when out of memory (the call then keeps nothing: no lines, no lending). */
  TDB_ALWAYS_INLINE bool add(const void* frame, CallRecord* record) noexcept {
    try {
      items.push_back(LiveRecord{frame, record});
      return true;
    } catch (...) {
      return false;
    }
  }
  /*! \brief Takes `record` off the list: the newest, but for calls on greenlets or threads that end out of order. */
  TDB_ALWAYS_INLINE void remove(const CallRecord* record) noexcept {
    if (!items.empty() && items.back().record == record) items.pop_back();
    else remove_older(record);
  }
  TDB_NOINLINE void remove_older(const CallRecord* record) noexcept {
    for (size_t i = items.size(); i-- > 0;)
      if (items[i].record == record) return (void)items.erase(items.begin() + static_cast<std::ptrdiff_t>(i));
  }
  /*! \brief The newest record made in `frame`, or nullptr. */
  CallRecord* find(const void* frame) const noexcept {
    for (size_t i = items.size(); i-- > 0;)
      if (items[i].frame == frame) return items[i].record;
    return nullptr;
  }
};

#if !defined(Py_LIMITED_API)
/*! \brief The interpreter whose threads list records: the first to wrap the module's functions (refusals.h). */
TDB_MODULE_LOCAL inline std::atomic<PyInterpreterState*>& home_interpreter() {
  static std::atomic<PyInterpreterState*> home{nullptr};
  return home;
}

/*!
 * \brief The live records that thread `t` lists its calls in, or nullptr (it lists none). Without the GIL, one list per
 * thread. With it, one list per module (no thread-local to look up, which costs a taken call more than the rest of its
 * record): listed, searched and taken off only with the GIL held, by the threads of the home interpreter; a call in
 * another interpreter (which may have a GIL of its own) keeps nothing.
 */
TDB_MODULE_LOCAL TDB_ALWAYS_INLINE inline LiveRecords* live_records(PyThreadState* t) noexcept {
#if defined(Py_GIL_DISABLED)
  (void)t;
  static thread_local LiveRecords records;
  return &records;
#else
  static LiveRecords records;
  return t->interp == home_interpreter().load(std::memory_order_relaxed) ? &records : nullptr;
#endif
}
#endif

/*! \brief A wrapped call's record (see the file comment): live from construction to destruction. */
struct CallRecord {
  LiveRecords* live = nullptr;  //!< the list it is on (nullptr: none, it keeps nothing), looked up once for both ends
  std::unique_ptr<Entries> entries;
#if !defined(Py_LIMITED_API)
  CallRecord() noexcept {
    PyThreadState* t = running_thread();
    if ((live = live_records(t)) && !live->add(running_frame(t), this)) live = nullptr;
  }
  TDB_ALWAYS_INLINE ~CallRecord() {
    if (live) live->remove(this);
  }
#else
  CallRecord() noexcept = default;  // explain_refusals wraps nothing under the limited API
#endif
  CallRecord(const CallRecord&) = delete;
  CallRecord& operator=(const CallRecord&) = delete;
  /*! \brief Its entries, made if need be (throws std::bad_alloc). */
  Entries& keep() {
    if (!entries) entries.reset(new Entries());
    return *entries;
  }
};

/*! \brief The record of the call whose frame runs now, or nullptr: the only way a caster reaches a record. */
inline CallRecord* own_record() noexcept {
#if defined(Py_LIMITED_API)
  return nullptr;
#else
  PyThreadState* t = running_thread();
  LiveRecords* live = live_records(t);
  return live && !live->items.empty() ? live->find(running_frame(t)) : nullptr;
#endif
}

/*! \brief Makes the running interpreter the home of this module's records, unless one is already (refusals.h). */
inline void claim_home_interpreter() noexcept {
#if !defined(Py_LIMITED_API)
  PyInterpreterState* none = nullptr;
  home_interpreter().compare_exchange_strong(none, running_thread()->interp);
#endif
}

/*!
 * \brief Notes that the producer of `obj` refused it for parameter type `param` with `error` (owned: taken), in the
 * running call's record; drops `error` when there is none. Never throws.
 */
inline void note_refusal(PyObject* obj, const char* param, PyObject* error) noexcept {
  if (CallRecord* r = own_record()) {
    try {
      r->keep().notes.push_back(Noted{obj, param, error});
      Py_INCREF(obj);
      return;
    } catch (...) {  // out of memory: one line fewer
    }
  }
  Py_XDECREF(error);
}

/*!
 * \brief Keeps `exc` (owned: taken), an exception that was not a refusal, as the running call's failure (the first
 * one wins): the call ends with it. False, leaving `exc` to the caller, when the running frame has no record.
 */
inline bool keep_failure(PyObject* exc) noexcept {
  CallRecord* r = own_record();
  if (!r) return false;
  try {
    Entries& e = r->keep();
    if (e.failure) Py_DECREF(exc);
    else e.failure = exc;
  } catch (...) {  // out of memory: the call's own MemoryError will do
    Py_DECREF(exc);
  }
  return true;
}

/*! \brief The export of `obj` that the running call's record keeps, or nullptr (refusals.h words refusals with it). */
inline const DLManagedTensorVersioned* kept_export(PyObject* obj) noexcept {
  CallRecord* r = own_record();
  if (!r || !r->entries) return nullptr;
  const auto found = r->entries->exported.find(obj);
  return found == r->entries->exported.end() ? nullptr : found->second.get();
}

/*!
 * \brief For the casters: `obj` exported through `__dlpack__` once per wrapped call, lent (the record owns it until
 * the call ends), or nullptr when the running frame has no record (the caller exports and owns the tensor itself). Throws the
 * producer's error, as ManagedTensor::from_python() does; a refusal that the producer raised earlier in the call is
 * raised again without asking it.
 */
inline const DLManagedTensorVersioned* lent_export(PyObject* obj, const char* name) {
  CallRecord* r = own_record();
  if (!r) return nullptr;
  if (const DLManagedTensorVersioned* kept = kept_export(obj)) return kept;
  for (size_t i = r->entries ? r->entries->notes.size() : 0; i-- > 0;) {  // a producer that refused: unasked
    const Noted& n = r->entries->notes[i];
    if (n.obj != obj || !n.error) continue;
    Py_INCREF(n.error);
    restore_exception(n.error);  // as it was raised (named already)
    throw Error::pending();
  }
  // The producer's Python code runs in a frame of its own: a call it makes finds no record.
  ManagedTensor tensor = ManagedTensor::from_python(obj, nullptr, name);
  auto put = r->keep().exported.emplace(obj, std::move(tensor));
  if (put.second) Py_INCREF(obj);
  return put.first->second.get();
}

}  // namespace detail
}  // namespace tdb

#endif  // TORCH_DLPACK_BRIDGE_CALL_H_
