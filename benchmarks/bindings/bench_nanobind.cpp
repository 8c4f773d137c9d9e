// bench_nanobind: the nanobind caster of torch_dlpack_bridge/nanobind.h and nanobind's own nb::ndarray
// (which takes tensors through __dlpack__), for benchmarks/bindings.py.
// f0(), f1(x), f3(x, y, z), f8(a..h): tdb::TensorView arguments; nd1(x), nd3(x, y, z), nd8(a..h): nb::ndarray<>
// arguments.
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
  using V = const tdb::TensorView&;
  m.def("f8", [](V a, V b, V c, V d, V e, V f, V g, V h) {
    g_sink = addr(a) + addr(b) + addr(c) + addr(d) + addr(e) + addr(f) + addr(g) + addr(h);
  });
  m.def("nd1", [](const nb::ndarray<>& x) { g_sink = addr(x); });
  m.def("nd3", [](const nb::ndarray<>& x, const nb::ndarray<>& y, const nb::ndarray<>& z) {
    g_sink = addr(x) + addr(y) + addr(z);
  });
  using N = const nb::ndarray<>&;
  m.def("nd8", [](N a, N b, N c, N d, N e, N f, N g, N h) {
    g_sink = addr(a) + addr(b) + addr(c) + addr(d) + addr(e) + addr(f) + addr(g) + addr(h);
  });
}
