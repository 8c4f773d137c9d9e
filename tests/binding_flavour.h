// The binding library a test module is built with: pybind11, or nanobind when compiled with -DTDB_USE_NANOBIND
// (tests/typed_tensor_build.py builds each module both ways). Gives `py` (the library's namespace), `Module`
// (its module type) and TDB_TEST_MODULE(name, m) (its module macro), with the STL casters the modules use.
#ifndef TDB_TESTS_BINDING_FLAVOUR_H_
#define TDB_TESTS_BINDING_FLAVOUR_H_

#if defined(TDB_USE_NANOBIND)
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include <torch_dlpack_bridge/nanobind.h>
namespace py = nanobind;
#define TDB_TEST_MODULE(name, m) NB_MODULE(name, m)
using Module = nanobind::module_;
#else
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <torch_dlpack_bridge/pybind11.h>
namespace py = pybind11;
#if defined(Py_GIL_DISABLED)  // free-threaded CPython: declared safe without the GIL, or importing it turns it on
#define TDB_TEST_MODULE(name, m) PYBIND11_MODULE(name, m, pybind11::mod_gil_not_used())
#else
#define TDB_TEST_MODULE(name, m) PYBIND11_MODULE(name, m)
#endif
using Module = pybind11::module_;
#endif

#endif  // TDB_TESTS_BINDING_FLAVOUR_H_
