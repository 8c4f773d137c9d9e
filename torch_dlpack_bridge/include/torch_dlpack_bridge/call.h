/*!
 * \file torch_dlpack_bridge/call.h
 * \brief What a call of a function that `tdb::explain_refusals` wrapped leaves on its thread while the binding
 *        library resolves it: the casters' notes (which argument a tdb parameter took or refused, and what
 *        words the refusal later) and the tensors exported through `__dlpack__`, kept so that each producer is
 *        asked once per call however many overloads and passes try it. refusals.h reads and ends them.
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
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "torch_dlpack_bridge/config.h"
#include "torch_dlpack_bridge/dlpack.h"
#include "torch_dlpack_bridge/managed.h"

namespace tdb {
namespace detail {

/*!
 * \brief What a caster did with `obj` in one call: taken (`why` is nullptr) or refused, with what words it later.
 * Owns its references (an item of a converted generator is gone after the call).
 */
struct Noted {
  PyObject* obj = nullptr;       //!< owned: the argument or item
  const char* param = nullptr;   //!< the parameter's type as signatures show it (static text)
  std::string (*why)(const Noted&) = nullptr;  //!< words the refusal (only if the call is refused); nullptr: taken
  PyObject* error = nullptr;     //!< owned: the producer's exception, for a refusal it raised
  DLTensor t{};                  //!< a refused view's description, its shape then strides in `dims` (or `more`)
  int64_t dims[8];
  std::vector<int64_t> more;     //!< beyond 4 dimensions
  bool read_only = false;
  uint64_t stamp = 0;            //!< call_stamp() when it was noted

  Noted(PyObject* o, const char* p) noexcept : obj(o), param(p) { Py_INCREF(o); }
  Noted(Noted&& o) noexcept
      : obj(o.obj), param(o.param), why(o.why), error(o.error), t(o.t), more(std::move(o.more)),
        read_only(o.read_only), stamp(o.stamp) {
    std::memcpy(dims, o.dims, sizeof(dims));
    o.obj = o.error = nullptr;
  }
  /*! \brief Where the shape then the strides are kept. */
  int64_t* kept() { return more.empty() ? dims : more.data(); }
  const int64_t* kept() const { return more.empty() ? dims : more.data(); }
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
  size_t refusals = 0;  //!< the notes that are refusals: counted in refusals_noted()
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
/*! \brief How many refusal notes this module's logs hold, on any thread: the casters' one read when taking. */
TDB_MODULE_LOCAL inline std::atomic<size_t>& refusals_noted() {
  static std::atomic<size_t> count{0};
  return count;
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
  while (!log.notes.empty() && log.notes.back().stamp > since) {
    if (log.notes.back().why) {
      --log.refusals;
      refusals_noted().fetch_sub(1, std::memory_order_relaxed);
    }
    log.notes.pop_back();
  }
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

/*!
 * \brief Notes `obj` in this thread's log while a wrapped call is open; `fill(noted)` says why (sets `why` and
 * what it reads) and is run only then. A take is kept only beside a refusal (a variant's next alternative may take
 * what the first refused; such a tensor is not blamed). Never throws. Out of line: the casters' paths stay lean.
 */
template <class F>
TDB_NOINLINE void note(PyObject* obj, const char* param, F&& fill) noexcept {
  if (open_calls().load(std::memory_order_relaxed) <= 0) return;  // nobody would read it
  try {
    CallLog& log = call_log();
    Noted noted(obj, param);
    fill(noted);
    const bool refusal = noted.why != nullptr;
    if (!refusal && log.refusals == 0) return;
    noted.stamp = call_stamp().fetch_add(1, std::memory_order_relaxed) + 1;
    log.notes.push_back(std::move(noted));
    if (refusal) {
      ++log.refusals;
      refusals_noted().fetch_add(1, std::memory_order_relaxed);
    }
  } catch (...) {  // out of memory: one line fewer
  }
}

/*!
 * \brief For the casters: `obj` exported through `__dlpack__` once per wrapped call, lent (the call's log owns
 * it until the call ends), or nullptr when no wrapped call of this module is open (the caller exports and owns
 * the tensor itself). Throws the producer's error, as ManagedTensor::from_python() does.
 */
inline const DLManagedTensorVersioned* lent_export(PyObject* obj, const char* name) {
  if (open_calls().load(std::memory_order_relaxed) <= 0) return nullptr;
  CallLog& log = call_log();
  const auto found = log.exported.find(obj);
  if (found != log.exported.end()) return log.exports[found->second].tensor.get();
  ManagedTensor tensor = ManagedTensor::from_python(obj, nullptr, name);  // may run Python: no reference held
  const DLManagedTensorVersioned* lent = tensor.get();
  log.exports.push_back(Exported{obj, call_stamp().fetch_add(1, std::memory_order_relaxed) + 1, std::move(tensor)});
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
