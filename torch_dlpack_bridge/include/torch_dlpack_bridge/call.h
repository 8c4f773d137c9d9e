/*!
 * \file torch_dlpack_bridge/call.h
 * \brief The record that a call of a function wrapped by `tdb::explain_refusals` owns while the binding library
 *        resolves it (refusals.h opens and ends it).
 *
 * The design in one paragraph. The wrapper puts a CallRecord on its own stack and makes it its thread's innermost
 * record: a thread-local pointer, put back as it was when the call returns or raises, so no later call can find the
 * record, and nothing in it is shared with another thread (no lock, no atomic). Casters write only to their thread's
 * innermost record, and only while it is open: from the dispatch until a tdb caster converts its argument for a body
 * (body_starts(); an item that a tdb container converts as it loads does not count), and never while a caster runs a
 * producer's Python code (`__dlpack__`). So a call made from a body or a producer either opens a record of its own
 * (wrapped) or finds none open and keeps nothing (a function defined after `explain_refusals`, a module without it, a
 * plain caster). What the record keeps: the tensors exported through `__dlpack__`, lent to every overload and pass so
 * that each producer is asked once per call; the producers' refusals, to word the TypeError and so that a refusing
 * producer is not asked again; and the first exception that was not a refusal, which the call ends with (nanobind.h: a
 * nanobind caster cannot raise it). All of it is released when the record is destroyed, as the call ends. An overload
 * with no tdb parameter has no caster to close the record: with pybind11 the wrapper gives its impl one that does
 * (pybind11.h); with nanobind, whose overloads are internal, its body runs with the record open (a gap), as does, with
 * either library, the body of an overload whose only tdb parameters sit in the library's own casters and took no tensor
 * (std::variant alternatives; pybind11's std::optional or std::vector of tdb::TensorView given None or []): a function
 * that `explain_refusals` did not wrap (one defined after it) or a cast, made in such a body, can be lent the call's
 * exports. Another gap: an item that a container of the binding library's own converts as it loads (a std::variant's,
 * pybind11's std::optional's or std::vector's of tdb::TensorView) closes the record early, so later items and overloads
 * ask their producers again.
 *
 * Included by view.h; a kernel author never includes it directly.
 */
#ifndef TORCH_DLPACK_BRIDGE_CALL_H_
#define TORCH_DLPACK_BRIDGE_CALL_H_

#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>

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
  ~Entries() {  // with the GIL: the wrapper's thread holds it
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

struct CallRecord;
/*! \brief This thread's innermost record (nullptr: no wrapped call of this module is open on it). */
TDB_MODULE_LOCAL inline CallRecord*& innermost() {
  static thread_local CallRecord* record = nullptr;
  return record;
}

/*! \brief A wrapped call's record (see the file comment): innermost on its thread from construction to destruction. */
struct CallRecord {
  CallRecord*& slot;        //!< innermost(), looked up once for both ends
  CallRecord* const outer;  //!< the record it hides (an enclosing wrapped call's), put back at its end
  bool open = true;
  int loading = 0;  //!< tdb containers loading their items (ItemsLoad): an item's conversion is not a body's
  std::unique_ptr<Entries> entries;
  CallRecord() noexcept : slot(innermost()), outer(slot) { slot = this; }
  ~CallRecord() { slot = outer; }
  CallRecord(const CallRecord&) = delete;
  CallRecord& operator=(const CallRecord&) = delete;
  /*! \brief Its entries, made if need be (throws std::bad_alloc). */
  Entries& keep() {
    if (!entries) entries.reset(new Entries());
    return *entries;
  }
};

/*! \brief The record casters may write to now: the innermost, if open, else nullptr. */
inline CallRecord* open_record() noexcept {
  CallRecord* r = innermost();
  return r && r->open ? r : nullptr;
}

/*!
 * \brief Whether this module called `explain_refusals` (set while it is imported, read-only after): a module that did
 * not never opens a record, and its casters never look for one.
 */
TDB_MODULE_LOCAL inline bool& explaining() {
  static bool on = false;
  return on;
}

/*! \brief A tdb caster converts its argument for a body: the call's record closes (see the file comment). */
TDB_ALWAYS_INLINE inline void body_starts() noexcept {
  if (!explaining()) return;
  CallRecord* r = innermost();
  if (r && !r->loading) r->open = false;
}
/*! \brief While a tdb container's caster loads its items, which the binding library converts as it goes. */
struct ItemsLoad {
  CallRecord* const record = innermost();
  ItemsLoad() noexcept {
    if (record) ++record->loading;
  }
  ~ItemsLoad() {
    if (record) --record->loading;
  }
  ItemsLoad(const ItemsLoad&) = delete;
  ItemsLoad& operator=(const ItemsLoad&) = delete;
};

/*!
 * \brief Notes that the producer of `obj` refused it for parameter type `param` with `error` (owned: taken), in the
 * open record; drops `error` when none is open. Never throws.
 */
inline void note_refusal(PyObject* obj, const char* param, PyObject* error) noexcept {
  if (CallRecord* r = open_record()) {
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
 * \brief Keeps `exc` (owned: taken), an exception that was not a refusal, as the open record's failure (the first
 * one wins): the call ends with it. False, leaving `exc` to the caller, when no record is open.
 */
inline bool keep_failure(PyObject* exc) noexcept {
  CallRecord* r = open_record();
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

/*! \brief The export of `obj` that the innermost record keeps, or nullptr (refusals.h words refusals with it). */
inline const DLManagedTensorVersioned* kept_export(PyObject* obj) noexcept {
  CallRecord* r = innermost();
  if (!r || !r->entries) return nullptr;
  const auto found = r->entries->exported.find(obj);
  return found == r->entries->exported.end() ? nullptr : found->second.get();
}

/*!
 * \brief For the casters: `obj` exported through `__dlpack__` once per wrapped call, lent (the record owns it until
 * the call ends), or nullptr when no record is open (the caller exports and owns the tensor itself). Throws the
 * producer's error, as ManagedTensor::from_python() does; a refusal that the producer raised earlier in the call is
 * raised again without asking it.
 */
inline const DLManagedTensorVersioned* lent_export(PyObject* obj, const char* name) {
  CallRecord* r = open_record();
  if (!r) return nullptr;
  if (const DLManagedTensorVersioned* kept = kept_export(obj)) return kept;
  for (size_t i = r->entries ? r->entries->notes.size() : 0; i-- > 0;) {  // a producer that refused: unasked
    const Noted& n = r->entries->notes[i];
    if (n.obj != obj || !n.error) continue;
    Py_INCREF(n.error);
    restore_exception(n.error);  // as it was raised (named already)
    throw Error::pending();
  }
  r->open = false;  // the producer's Python code: a call made there finds no open record
  ManagedTensor tensor;
  try {
    tensor = ManagedTensor::from_python(obj, nullptr, name);
  } catch (...) {
    r->open = true;
    throw;
  }
  r->open = true;
  auto put = r->keep().exported.emplace(obj, std::move(tensor));
  Py_INCREF(obj);
  return put.first->second.get();
}

}  // namespace detail
}  // namespace tdb

#endif  // TORCH_DLPACK_BRIDGE_CALL_H_
