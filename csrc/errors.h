// One error path for every entry point of the table: bodies throw, one guard catches everything and turns it
// into a Python exception (or a SetError call for the allocator), so no C++ exception crosses the C ABI.
#pragma once

#include <exception>
#include <string>

namespace tdb {

// The Python exception a failure becomes. BufferError is reserved for "DLPack cannot describe this".
enum class ErrorKind { Buffer, Type, Value, Memory, Runtime };

struct Error : std::exception {
  ErrorKind kind;
  std::string message;
  Error(ErrorKind k, std::string m) : kind(k), message(std::move(m)) {}
  const char* what() const noexcept override { return message.c_str(); }
};

[[noreturn]] void fail(ErrorKind kind, std::string message);

// Name of the Python exception class for `kind` ("BufferError", ...), as SetError wants it.
const char* error_kind_name(ErrorKind kind) noexcept;

// Classifies the exception being handled (call only inside a catch block).
ErrorKind classify_current_exception(std::string& message) noexcept;

// Sets the Python exception for the exception being handled; takes the GIL itself, so it is safe from
// threads that do not hold it (a consumer calling current_work_stream from a native thread).
void set_python_error_from_current_exception() noexcept;

// Sets a Python exception of `kind`, taking the GIL itself. Returns -1 for `return raise_python(...)`.
int raise_python(ErrorKind kind, const char* message) noexcept;

// Runs `body`; returns 0, or -1 with a Python exception set.
template <class Body>
int guarded(Body&& body) noexcept {
  try {
    body();
    return 0;
  } catch (...) {
    set_python_error_from_current_exception();
    return -1;
  }
}

}  // namespace tdb
