// bench_pybind11: the pybind11 caster of torch_dlpack_bridge/pybind11.h, for benchmarks/bindings.py.
// f0(), f1(x), f3(x, y, z), f8(a..h): take tdb::TensorView arguments and read each data pointer.
#include <cstdint>

#include <torch_dlpack_bridge/pybind11.h>

namespace {
volatile uintptr_t g_sink;
uintptr_t addr(const tdb::TensorView& v) { return reinterpret_cast<uintptr_t>(v.data<char>()); }
}  // namespace

PYBIND11_MODULE(bench_pybind11, m) {
  m.def("f0", []() {});
  m.def("f1", [](const tdb::TensorView& x) { g_sink = addr(x); });
  m.def("f3", [](const tdb::TensorView& x, const tdb::TensorView& y, const tdb::TensorView& z) {
    g_sink = addr(x) + addr(y) + addr(z);
  });
  using V = const tdb::TensorView&;
  m.def("f8", [](V a, V b, V c, V d, V e, V f, V g, V h) {
    g_sink = addr(a) + addr(b) + addr(c) + addr(d) + addr(e) + addr(f) + addr(g) + addr(h);
  });
}
