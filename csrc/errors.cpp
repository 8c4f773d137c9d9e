#include "errors.h"

#include <Python.h>
#include <c10/util/Exception.h>

#include <new>

namespace tdb {

void fail(ErrorKind kind, std::string message) { throw Error(kind, std::move(message)); }

const char* error_kind_name(ErrorKind kind) noexcept {
  switch (kind) {
    case ErrorKind::Buffer: return "BufferError";
    case ErrorKind::Type: return "TypeError";
    case ErrorKind::Value: return "ValueError";
    case ErrorKind::Memory: return "MemoryError";
    case ErrorKind::Runtime: break;
  }
  return "RuntimeError";
}

ErrorKind classify_current_exception(std::string& message) noexcept {
  // Nothing here may throw: building the message falls back to a fixed text.
  try {
    try {
      throw;
    } catch (const Error& e) {
      message = e.message;
      return e.kind;
    } catch (const c10::OutOfMemoryError& e) {
      message = e.what_without_backtrace();
      return ErrorKind::Memory;
    } catch (const c10::TypeError& e) {
      message = e.what_without_backtrace();
      return ErrorKind::Type;
    } catch (const c10::ValueError& e) {
      message = e.what_without_backtrace();
      return ErrorKind::Value;
    } catch (const c10::Error& e) {
      message = e.what_without_backtrace();
      return ErrorKind::Runtime;
    } catch (const std::bad_alloc&) {
      message = "out of memory";
      return ErrorKind::Memory;
    } catch (const std::exception& e) {
      message = e.what();
      return ErrorKind::Runtime;
    } catch (...) {
      message = "unknown C++ exception";
      return ErrorKind::Runtime;
    }
  } catch (...) {
    return ErrorKind::Memory;  // only the string copies above can throw, and only bad_alloc
  }
}

static PyObject* python_exception_type(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::Buffer: return PyExc_BufferError;
    case ErrorKind::Type: return PyExc_TypeError;
    case ErrorKind::Value: return PyExc_ValueError;
    case ErrorKind::Memory: return PyExc_MemoryError;
    case ErrorKind::Runtime: break;
  }
  return PyExc_RuntimeError;
}

int raise_python(ErrorKind kind, const char* message) noexcept {
  PyGILState_STATE gil = PyGILState_Ensure();
  PyErr_SetString(python_exception_type(kind), message);
  PyGILState_Release(gil);
  return -1;
}

void set_python_error_from_current_exception() noexcept {
  std::string message;
  ErrorKind kind = classify_current_exception(message);
  raise_python(kind, message.empty() && kind == ErrorKind::Memory ? "out of memory" : message.c_str());
}

}  // namespace tdb
