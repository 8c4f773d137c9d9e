// A nanobind test module for tests/test_bindings.py: overloads that mix tensor and non-tensor parameters, and
// single-overload functions. Built twice in one process (TDB_MODULE names it), with default visibility.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <torch_dlpack_bridge/nanobind.h>

namespace nb = nanobind;

NB_MODULE(TDB_MODULE, m) {
  // Overloaded: a tensor its producer refuses (or a class, e.g. torch.Tensor) must reach the next overload.
  m.def("view_or_object", [](tdb::TensorView x) { return "tensor:" + std::to_string(x.ndim()); });
  m.def("view_or_object", [](nb::object) { return std::string("object"); });
  m.def("managed_or_object", [](tdb::ManagedTensor x) { return "tensor:" + std::to_string(x.dl().ndim); });
  m.def("managed_or_object", [](nb::object) { return std::string("object"); });
  // Overloaded, but no overload takes a refused tensor without conversion: the converting pass raises.
  m.def("view_or_int", [](tdb::TensorView) { return std::string("tensor"); });
  m.def("view_or_int", [](int) { return std::string("int"); });
  // Single overloads: a refusal raises the producer's error.
  m.def("view", [](tdb::TensorView x) { return x.ndim(); });
  m.def("managed", [](tdb::ManagedTensor x) { return x.dl().ndim; });
  // A tdb::Error thrown by a check becomes its Python type (through the module's translator).
  m.def("float32_only", [](tdb::TensorView x) { tdb::check_dtype(x, tdb::kFloat32); });
}
