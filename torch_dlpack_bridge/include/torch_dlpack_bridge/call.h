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
 * converter, a `__dlpack__`, a body) removed its own entries when it ended. A call that opens while another is
 * open (here or on another thread) or an export is kept pushes a barrier on its thread's log, so that it lends
 * none of the entries made before it (enter_call()); a call that opens alone says only which thread it is on.
 * Entries are made only inside a wrapped call of their thread (in_call()): a function defined after
 * `explain_refusals` keeps nothing once it returns. So an accepted call that made no entry reads the counters and
 * counts itself in and out: it never reads a thread-local unless another call is open.
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

/*!
 * \brief One thread's entries, oldest first (so their stamps increase), and the barriers of the wrapped calls open
 * on it that are not alone (see enter_call()): a call sees only the entries above its barrier.
 */
struct CallLog {
  std::vector<Noted> notes;
  std::vector<Exported> exports;
  std::unordered_map<PyObject*, std::vector<size_t>> exported;  //!< obj -> its entries in `exports`, oldest first
  std::vector<uint64_t> barriers;                               //!< their stamps, innermost last
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
/*! \brief How many wrapped calls of this module are open, plus how many exports its logs keep, on any thread. */
TDB_MODULE_LOCAL inline std::atomic<long>& busy() {
  static std::atomic<long> count{0};
  return count;
}
/*! \brief The thread whose wrapped call opened alone (busy() was 0), or nullptr: that call has no barrier. */
TDB_MODULE_LOCAL inline std::atomic<const void*>& alone_thread() {
  static std::atomic<const void*> thread{nullptr};
  return thread;
}

/*!
 * \brief Adds `delta` to `count`. With a GIL a call starts and returns holding it, and the casters hold it, so a
 * plain load and store are enough (an atomic increment would cost more than the rest of the wrapper).
 */
template <class T>
TDB_ALWAYS_INLINE inline T add(std::atomic<T>& count, T delta) noexcept {
#ifdef Py_GIL_DISABLED
  return count.fetch_add(delta, std::memory_order_relaxed) + delta;
#else
  const T value = count.load(std::memory_order_relaxed) + delta;
  count.store(value, std::memory_order_relaxed);
  return value;
#endif
}
/*! \cond INTERNAL */
#if defined(__has_builtin) && (defined(__x86_64__) || defined(__aarch64__))
#if __has_builtin(__builtin_thread_pointer)
#define TDB_THREAD_POINTER 1  // the thread pointer register: one instruction
#endif
#endif
/*! \endcond */
/*! \brief This thread, told apart from the others in one instruction where the compiler can. */
TDB_ALWAYS_INLINE inline const void* this_thread() noexcept {
#ifdef TDB_THREAD_POINTER
  return __builtin_thread_pointer();
#else
  return reinterpret_cast<const void*>(static_cast<uintptr_t>(PyThread_get_thread_ident()));
#endif
}
/*! \brief This thread's log (made at its first entry). */
TDB_MODULE_LOCAL inline CallLog& call_log() {
  static thread_local CallLog log;
  return log;
}

/*!
 * \brief Removes the entries of `log` stamped after `since` (0: all), releasing their references and exports,
 * and the barriers. Never throws; keeps any Python exception set.
 */
inline void forget_since(CallLog& log, uint64_t since) noexcept {
  while (!log.notes.empty() && log.notes.back().stamp > since) log.notes.pop_back();
  while (!log.exports.empty() && log.exports.back().stamp > since) {
    Exported& e = log.exports.back();
    const auto found = log.exported.find(e.obj);
    if (found != log.exported.end() && !found->second.empty()) found->second.pop_back();
    if (found != log.exported.end() && found->second.empty()) log.exported.erase(found);
    e.tensor.reset();  // the producer's deleter (keeps the error indicator)
    Py_DECREF(e.obj);
    log.exports.pop_back();
    add(busy(), -1L);
  }
  while (!log.barriers.empty() && log.barriers.back() > since) log.barriers.pop_back();
}

inline CallLog::~CallLog() {
  if (!Py_IsInitialized() || !PyGILState_Check()) {  // a thread's end without its thread state: leak, never crash
    for (Noted& n : notes) n.obj = n.error = nullptr;
    for (Exported& e : exports) e.tensor.release();
    return;
  }
  forget_since(*this, 0);
}

/*! \brief The next stamp. */
inline uint64_t next_stamp() noexcept { return add(call_stamp(), uint64_t{1}); }

/*! \brief Out of line, for enter_call(): the barrier of a call that is not alone. */
TDB_NOINLINE inline void push_barrier() noexcept {
  try {
    call_log().barriers.push_back(next_stamp());
  } catch (...) {  // out of memory: the call lends nothing (in_call() is false on this thread)
  }
}
/*!
 * \brief A wrapped call starts: counted in busy(), and true when it is alone (no other open, on any thread, and no
 * export kept); when it is not, a barrier is pushed on this thread's log, so that the call lends none of the
 * entries made before it (an enclosing call's export of an object that has changed since). Calls nest on a thread:
 * the barrier goes with the call's entries when it ends (forget_since()). A call that is alone only says which
 * thread it is on.
 */
TDB_ALWAYS_INLINE inline bool enter_call() noexcept {
  const bool alone = add(busy(), 1L) == 1;
  if (alone) alone_thread().store(this_thread(), std::memory_order_relaxed);
  else push_barrier();
  return alone;
}
/*! \brief A wrapped call ends: counted out (its entries are removed by forget_since()); one that opened alone
 *  clears alone_thread() (on a free-threaded build two calls may both have opened alone: each then lends nothing). */
TDB_ALWAYS_INLINE inline void end_call(bool alone) noexcept {
  add(busy(), -1L);
  if (alone) alone_thread().store(nullptr, std::memory_order_relaxed);
}
/*! \brief Whether a wrapped call of this module is open on this thread (the entries made now are its own). */
inline bool in_call(const CallLog& log) noexcept {
  return !log.barriers.empty() || alone_thread().load(std::memory_order_relaxed) == this_thread();
}

/*!
 * \brief Notes that the producer of `obj` refused it for parameter type `param` with `error` (owned: taken), while
 * a wrapped call is open on this thread; drops `error` otherwise. Never throws.
 */
inline void note_refusal(PyObject* obj, const char* param, PyObject* error) noexcept {
  try {
    CallLog& log = call_log();
    if (in_call(log)) {
      log.notes.emplace_back(obj, param, error, next_stamp());
      return;
    }
  } catch (...) {  // out of memory: one line fewer
  }
  Py_XDECREF(error);
}

/*! \brief The export of `obj` that the innermost wrapped call on this thread keeps (lent_export()), or nullptr. */
inline const DLManagedTensorVersioned* kept_export(PyObject* obj) {
  CallLog& log = call_log();
  const auto found = log.exported.find(obj);
  if (found == log.exported.end() || found->second.empty()) return nullptr;
  const Exported& e = log.exports[found->second.back()];
  return log.barriers.empty() || e.stamp > log.barriers.back() ? e.tensor.get() : nullptr;
}

/*!
 * \brief For the casters: `obj` exported through `__dlpack__` once per wrapped call, lent (the call's log owns
 * it until the call ends), or nullptr when no wrapped call of this module is open on this thread (the caller
 * exports and owns the tensor itself). Throws the producer's error, as ManagedTensor::from_python() does; a
 * refusal that the producer raised earlier in the call is raised again without asking it.
 */
inline const DLManagedTensorVersioned* lent_export(PyObject* obj, const char* name) {
  if (busy().load(std::memory_order_relaxed) <= 0 || !in_call(call_log())) return nullptr;
  if (const DLManagedTensorVersioned* kept = kept_export(obj)) return kept;
  const CallLog& seen = call_log();  // a producer that refused in this call refuses again, unasked
  for (auto n = seen.notes.rbegin(); n != seen.notes.rend(); ++n) {
    if (!seen.barriers.empty() && n->stamp <= seen.barriers.back()) break;
    if (n->obj != obj || !n->error) continue;
    Py_INCREF(n->error);
    restore_exception(n->error);  // as it was raised (named already)
    throw Error::pending();
  }
  ManagedTensor tensor = ManagedTensor::from_python(obj, nullptr, name);  // may run Python: no reference held
  const DLManagedTensorVersioned* lent = tensor.get();
  CallLog& log = call_log();
  log.exports.push_back(Exported{obj, next_stamp(), std::move(tensor)});
  Py_INCREF(obj);
  add(busy(), 1L);
  try {
    log.exported[obj].push_back(log.exports.size() - 1);
  } catch (...) {
    forget_since(log, log.exports.back().stamp - 1);  // out of memory: released here rather than kept unfound
    throw;
  }
  return lent;
}

}  // namespace detail
}  // namespace tdb

#endif  // TORCH_DLPACK_BRIDGE_CALL_H_
