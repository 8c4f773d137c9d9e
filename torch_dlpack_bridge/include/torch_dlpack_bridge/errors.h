/*!
 * \file torch_dlpack_bridge/errors.h
 * \brief Errors: `tdb::Error`, the one exception type the headers throw, and `tdb::guard`, which turns any
 *        C++ exception into a Python exception at the boundary of an extension function; plus the helpers that
 *        move a Python exception aside and name the argument in a producer's error.
 *
 * Included by every consumer header (consumer.h includes it for raw-CPython kernels).
 */
#ifndef TORCH_DLPACK_BRIDGE_ERRORS_H_
#define TORCH_DLPACK_BRIDGE_ERRORS_H_

#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>

#include <atomic>
#include <exception>
#include <new>
#include <string>
#include <utility>

#include "torch_dlpack_bridge/config.h"
#include "torch_dlpack_bridge/dlpack.h"

namespace tdb {

namespace detail {

/*!
 * \brief The exception-translator registrations of the binding headers this extension module includes
 * (pybind11.h, nanobind.h store theirs when the module is loaded). Every tdb::Error runs them when it is made, so
 * a function translates the error from its first call whatever its arguments: a `std::optional` tensor given
 * None, or an empty `std::vector`, runs no caster that could have registered them.
 */
using TranslatorRegistration = void (*)();
TDB_MODULE_LOCAL inline std::atomic<TranslatorRegistration>* translator_registrations() {
  static std::atomic<TranslatorRegistration> registrations[2] = {};  // pybind11, nanobind
  return registrations;
}
/*! \brief Runs them (each registers once); skipped on a thread without the GIL, where a binding library's
 *  state must not be touched (an argument caster will have registered by then, unless no tensor was ever taken). */
inline void register_translators() noexcept {
  for (int i = 0; i < 2; ++i) {
    const TranslatorRegistration r = translator_registrations()[i].load(std::memory_order_acquire);
    if (!r) continue;
    if (!Py_IsInitialized() || !PyGILState_Check()) return;
    try {
      r();
    } catch (...) {  // out of memory registering: the binding library's RuntimeError, nothing worse
    }
  }
}

}  // namespace detail

/*!
 * \brief The one exception type the consumer headers throw. Either carries a Python exception type and a
 * message (raised by `restore()`), or is "pending": a Python exception is already set and owned by the
 * Python error indicator. The Error object owns no Python references.
 */
class Error : public std::exception {
 public:
  /*! \brief An error to be raised as `type(message)`; `type` is a borrowed exception class (PyExc_*), `message`
   *  any string, e.g. built at run time: `"n must be >= 0, got " + std::to_string(n)`. */
  Error(PyObject* type, std::string message) : type_(type), msg_(std::move(message)) {
    detail::register_translators();
  }
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
 * \brief True when the raised exception is a producer's refusal of a tensor: a TypeError or a BufferError
 * (subclasses too), what DLPack producers raise for what they cannot export. Anything else (KeyboardInterrupt,
 * SystemExit, MemoryError, a ValueError, ...) is not about the tensor, and a type caster raises it as it is.
 */
inline bool refusal_raised() noexcept {
  return PyErr_ExceptionMatches(PyExc_TypeError) || PyErr_ExceptionMatches(PyExc_BufferError);
}

/*! \brief Whether `exc` is a plain refusal: a TypeError or BufferError itself (no subclass) made of one message and
 *  nothing else (no attributes, no notes), so that a copy with a longer message loses nothing but its identity. */
inline bool plain_refusal(PyObject* exc) {
  PyTypeObject* type = Py_TYPE(exc);
  if (type != reinterpret_cast<PyTypeObject*>(PyExc_TypeError) &&
      type != reinterpret_cast<PyTypeObject*>(PyExc_BufferError))
    return false;
  PyObject* args = PyObject_GetAttrString(exc, "args");
  PyObject* dict = PyObject_GetAttrString(exc, "__dict__");
  const bool plain = args && PyTuple_Check(args) && PyTuple_GET_SIZE(args) == 1 &&
                     PyUnicode_Check(PyTuple_GET_ITEM(args, 0)) && dict && PyDict_Check(dict) && PyDict_Size(dict) == 0;
  Py_XDECREF(args);
  Py_XDECREF(dict);
  PyErr_Clear();
  return plain;
}

/*!
 * \brief Throws the pending Python exception. A plain refusal (plain_refusal()) is re-raised as a new exception
 * of its type with `prefix` ("argument 'x': ", "output: ") before its message, the original as its `__cause__`;
 * any other exception (an interrupt, MemoryError, SystemExit, a producer's own class) is re-raised as it is: the
 * same object, its type and attributes kept.
 */
[[noreturn]] inline void throw_pending_as(const std::string& prefix) {
  PyObject* exc = fetch_exception();
  if (!exc) throw Error(PyExc_RuntimeError, prefix + "DLPack producer failed without an exception");
  if (!plain_refusal(exc)) {
    restore_exception(exc);
    throw Error::pending();
  }
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(exc));
  PyObject* text = PyObject_Str(exc);
  const char* utf8 = text ? PyUnicode_AsUTF8(text) : nullptr;
  PyObject* renamed = utf8 ? PyObject_CallFunction(type, "s", (prefix + utf8).c_str()) : nullptr;
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
/*! \brief throw_pending_as("argument 'name': "). */
[[noreturn]] inline void throw_pending(const char* name) { throw_pending_as(arg(name)); }

}  // namespace detail

}  // namespace tdb

#endif  // TORCH_DLPACK_BRIDGE_ERRORS_H_
