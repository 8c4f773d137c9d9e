// bench_nanobind: the nanobind caster of torch_dlpack_bridge/nanobind.h and nanobind's own nb::ndarray
// (which takes tensors through __dlpack__), for benchmarks/bindings.py.
// f0(), f1(x), f3(x, y, z): tdb::TensorView arguments; nd1(x), nd3(x, y, z): nb::ndarray<> arguments.
// Each reads every data pointer.
#include <nanobind/ndarray.h>

#include <cstdint>

#include <torch_dlpack_bridge/nanobind.h>

namespace nb = nanobind;

namespace {
volatile uintptr_t g_sink;
uintptr_t addr(const tdb::TensorView& v) { return reinterpret_cast<uintptr_t>(v.data<char>()); }
uintptr_t addr(const nb::ndarray<>& a) { return reinterpret_cast<uintptr_t>(a.data()); }
}  // namespace

NB_MODULE(bench_nanobind, m) {
  m.def("f0", []() {});
  m.def("f1", [](const tdb::TensorView& x) { g_sink = addr(x); });
  m.def("f3", [](const tdb::TensorView& x, const tdb::TensorView& y, const tdb::TensorView& z) {
    g_sink = addr(x) + addr(y) + addr(z);
  });
  m.def("nd1", [](const nb::ndarray<>& x) { g_sink = addr(x); });
  m.def("nd3", [](const nb::ndarray<>& x, const nb::ndarray<>& y, const nb::ndarray<>& z) {
    g_sink = addr(x) + addr(y) + addr(z);
  });
}
