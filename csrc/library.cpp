// The table library's C entry points. The Python package loads this library with ctypes (one build per torch
// minor version, see torch_dlpack_bridge/_loader.py), so it is not a CPython extension module: nothing here
// depends on the Python version beyond the few stable C API calls the table makes.
#include <Python.h>

#include <cstdio>
#include <string>

#include "bridge.h"
#include "mapping.h"

#define TDB_EXPORT extern "C" __attribute__((visibility("default")))

// What libstdc++'s inline code reads instead of glibc's __libc_single_threaded (see compile_flags in
// _build.py): never single-threaded, so reference counts always use atomics.
// (A C-linkage block, not `extern "C" char x = 0;`: gcc 16 warns about a variable both initialized and
// declared extern.)
extern "C" {
char tdb_libc_single_threaded = 0;
}

// A new reference to a capsule named "dlpack_exchange_api" holding the table (needs the GIL).
TDB_EXPORT PyObject* tdb_exchange_api_capsule() {
  return PyCapsule_New(&tdb::g_exchange_api, TDB_EXCHANGE_API_CAPSULE_NAME, nullptr);
}

// A new reference to a capsule named TDB_AUTOGRAD_PROBE_CAPSULE_NAME holding tdb::requires_grad_or_unknown,
// which the package publishes on torch.Tensor as __tdb_autograd_probe__ (needs the GIL).
TDB_EXPORT PyObject* tdb_autograd_probe_capsule() {
  return PyCapsule_New(reinterpret_cast<void*>(&tdb::requires_grad_or_unknown), TDB_AUTOGRAD_PROBE_CAPSULE_NAME,
                       nullptr);
}

// A new reference to a capsule named TDB_VERSION_BUMP_CAPSULE_NAME holding tdb::bump_version_or_unknown,
// which the package publishes on torch.Tensor as __tdb_version_bump__ (needs the GIL).
TDB_EXPORT PyObject* tdb_version_bump_capsule() {
  return PyCapsule_New(reinterpret_cast<void*>(&tdb::bump_version_or_unknown), TDB_VERSION_BUMP_CAPSULE_NAME,
                       nullptr);
}

// A new reference to a capsule named TDB_AUTOGRAD_LAYOUT_CAPSULE_NAME holding tdb::autograd_layout(), which the
// package publishes on torch.Tensor as __tdb_autograd_layout__; None where the layout could not be checked
// (needs the GIL).
TDB_EXPORT PyObject* tdb_autograd_layout_capsule() {
  const TDBAutogradLayout* layout = tdb::autograd_layout();
  if (layout == nullptr) Py_RETURN_NONE;
  return PyCapsule_New(const_cast<TDBAutogradLayout*>(layout), TDB_AUTOGRAD_LAYOUT_CAPSULE_NAME, nullptr);
}

// The table's address (the DLPack 1.2 int name holds it).
TDB_EXPORT const DLPackExchangeAPI* tdb_exchange_api() { return &tdb::g_exchange_api; }

// What this library was compiled against, as "key=value" lines (static storage). python_abi says which
// CPython it can run in: "gil" (any CPython 3.9+ with a GIL) or e.g. "cp313t" (that free-threaded CPython
// only: its reference counting differs). Built on first use, once even when threads call at the same time.
TDB_EXPORT const char* tdb_build_info() {
  static const std::string info = [] {
    char python_abi[16] = "gil";
#ifdef Py_GIL_DISABLED
    std::snprintf(python_abi, sizeof python_abi, "cp%d%dt", PY_MAJOR_VERSION, PY_MINOR_VERSION);
#endif
    char text[512];
    std::snprintf(text, sizeof text,
                  "torch_version=%s\ncxx11_abi=%d\npython_abi=%s\ncompiler=%s\ndlpack_version=%d.%d\n",
                  TORCH_VERSION, _GLIBCXX_USE_CXX11_ABI, python_abi, __VERSION__, DLPACK_MAJOR_VERSION,
                  DLPACK_MINOR_VERSION);
    return std::string(text);
  }();
  return info.c_str();
}
