/*!
 * \file torch_dlpack_bridge/call.h
 * \brief What a call of a function that `tdb::explain_refusals` wrapped leaves on its thread while the binding
 *        library resolves it: the tensors exported through `__dlpack__`, kept so that each producer is asked once
 *        per call however many overloads and passes try it (and so that a refusal can be worded from them), and
 *        the exceptions with which producers refused. refusals.h reads and ends them.
 *
 * How an entry finds its call: every entry goes into its thread's log, stamped with the next value of a counter
 * of this module (call_stamp()). The wrapper reads the counter before it dispatches; when the call ends, the
 * entries its thread made since are the call's own: calls nest on a thread, and a call made meanwhile (by a
 * converter, a `__dlpack__`, a body) removed its own entries when it ended. So an accepted call that made no
 * entry reads the counter twice and counts itself in and out of open_calls(): it never reads a thread-local.
 * Entries are made only while a wrapped call of this module is open on some thread; when the last one ends,
 * whatever its thread's log still holds (a function defined after `explain_refusals`, called on a thread with
 * no wrapped call open while another thread had one) is dropped.
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
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "torch_dlpack_bridge/config.h"
#include "torch_dlpack_bridge/dlpack.h"
#include "torch_dlpack_bridge/managed.h"

namespace tdb {
namespace detail {

/*! \brief A producer's refusal of `obj` in one call: its exception, which words the refusal if the call fails. */
struct Noted {
  PyObject* obj;          //!< owned: the argument or item
  const char* param;      //!< the parameter's type as signatures show it (static text)
  PyObject* error;        //!< owned: the producer's exception
  uint64_t stamp;         //!< call_stamp() when it was noted
  Noted(PyObject* o, const char* p, PyObject* e, uint64_t s) noexcept : obj(o), param(p), error(e), stamp(s) {
    Py_INCREF(o);
  }
  Noted(Noted&& o) noexcept : obj(o.obj), param(o.param), error(o.error), stamp(o.stamp) { o.obj = o.error = nullptr; }
  Noted(const Noted&) = delete;
  Noted& operator=(const Noted&) = delete;
  Noted& operator=(Noted&&) = delete;
  ~Noted() {
    Py_XDECREF(obj);
    Py_XDECREF(error);
  }
};

/*! \brief A tensor exported through `obj.__dlpack__()` during a call, lent to every caster of that call. */
struct Exported {
  PyObject* obj;          //!< owned
  uint64_t stamp;
  ManagedTensor tensor;   //!< released when the call ends
};

/*! \brief One thread's entries, oldest first (so their stamps increase). */
struct CallLog {
  std::vector<Noted> notes;
  std::vector<Exported> exports;
  std::unordered_map<PyObject*, size_t> exported;  //!< obj -> its entry in `exports`
  CallLog() = default;
  CallLog(const CallLog&) = delete;
  CallLog& operator=(const CallLog&) = delete;
  /*! \brief At the thread's end: left to leak if Python cannot take the references back here (no GIL). */
  ~CallLog();
};

/*! \brief The counter that stamps entries: any change during a call means some thread made one. */
TDB_MODULE_LOCAL inline std::atomic<uint64_t>& call_stamp() {
  static std::atomic<uint64_t> stamp{0};
  return stamp;
}
/*! \brief How many wrapped calls of this module are open, on any thread. */
TDB_MODULE_LOCAL inline std::atomic<long>& open_calls() {
  static std::atomic<long> count{0};
  return count;
}
/*!
 * \brief Counts a wrapped call in (+1) or out (-1). With a GIL a call starts and returns holding it, so a plain
 * load and store are enough (an atomic increment would cost more than the rest of the wrapper).
 */
TDB_ALWAYS_INLINE inline void count_open(long delta) noexcept {
#ifdef Py_GIL_DISABLED
  open_calls().fetch_add(delta, std::memory_order_relaxed);
#else
  open_calls().store(open_calls().load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);
#endif
}
/*! \brief This thread's log (made at its first entry). */
TDB_MODULE_LOCAL inline CallLog& call_log() {
  static thread_local CallLog log;
  return log;
}

/*!
 * \brief Removes the entries of `log` stamped after `since` (0: all), releasing their references and exports.
 * Never throws; keeps any Python exception set.
 */
inline void forget_since(CallLog& log, uint64_t since) noexcept {
  while (!log.notes.empty() && log.notes.back().stamp > since) log.notes.pop_back();
  while (!log.exports.empty() && log.exports.back().stamp > since) {
    Exported& e = log.exports.back();
    log.exported.erase(e.obj);
    e.tensor.reset();  // the producer's deleter (keeps the error indicator)
    Py_DECREF(e.obj);
    log.exports.pop_back();
  }
}

inline CallLog::~CallLog() {
  if (!Py_IsInitialized() || !PyGILState_Check()) {  // a thread's end without its thread state: leak, never crash
    for (Noted& n : notes) n.obj = n.error = nullptr;
    for (Exported& e : exports) e.tensor.release();
    return;
  }
  forget_since(*this, 0);
}

/*! \brief The next stamp (callers hold the GIL on a build that has one, as the wrapper's count does). */
inline uint64_t next_stamp() noexcept {
#ifdef Py_GIL_DISABLED
  return call_stamp().fetch_add(1, std::memory_order_relaxed) + 1;
#else
  const uint64_t stamp = call_stamp().load(std::memory_order_relaxed) + 1;
  call_stamp().store(stamp, std::memory_order_relaxed);
  return stamp;
#endif
}

/*!
 * \brief Notes that the producer of `obj` refused it for parameter type `param` with `error` (owned: taken), while
 * a wrapped call is open; drops `error` otherwise. Never throws.
 */
inline void note_refusal(PyObject* obj, const char* param, PyObject* error) noexcept {
  if (open_calls().load(std::memory_order_relaxed) <= 0) {  // nobody would read it
    Py_XDECREF(error);
    return;
  }
  try {
    call_log().notes.emplace_back(obj, param, error, next_stamp());
  } catch (...) {  // out of memory: one line fewer
    Py_XDECREF(error);
  }
}

/*! \brief The export of `obj` that this thread's log keeps for a call (lent_export()), or nullptr. */
inline const DLManagedTensorVersioned* kept_export(PyObject* obj) {
  CallLog& log = call_log();
  const auto found = log.exported.find(obj);
  return found == log.exported.end() ? nullptr : log.exports[found->second].tensor.get();
}

/*!
 * \brief For the casters: `obj` exported through `__dlpack__` once per wrapped call, lent (the call's log owns
 * it until the call ends), or nullptr when no wrapped call of this module is open (the caller exports and owns
 * the tensor itself). Throws the producer's error, as ManagedTensor::from_python() does.
 */
inline const DLManagedTensorVersioned* lent_export(PyObject* obj, const char* name) {
  if (open_calls().load(std::memory_order_relaxed) <= 0) return nullptr;
  if (const DLManagedTensorVersioned* kept = kept_export(obj)) return kept;
  CallLog& log = call_log();
  ManagedTensor tensor = ManagedTensor::from_python(obj, nullptr, name);  // may run Python: no reference held
  const DLManagedTensorVersioned* lent = tensor.get();
  log.exports.push_back(Exported{obj, next_stamp(), std::move(tensor)});
  Py_INCREF(obj);
  try {
    log.exported[obj] = log.exports.size() - 1;
  } catch (...) {
    Exported& e = log.exports.back();  // out of memory: released here rather than kept unfound
    e.tensor.reset();
    Py_DECREF(e.obj);
    log.exports.pop_back();
    throw;
  }
  return lent;
}

}  // namespace detail
}  // namespace tdb

#endif  // TORCH_DLPACK_BRIDGE_CALL_H_
