// bench_pybind11: the pybind11 caster of torch_dlpack_bridge/pybind11.h, for benchmarks/bindings.py.
// f0(), f1(x), f3(x, y, z), f8(a..h): take tdb::TensorView arguments and read each data pointer.
// Issue 26, 8 tensors each required to be float32, 1-D, row-major contiguous, on the CPU and writable:
// typed8(a..h) declares it (tdb::Tensor<float, tdb::ndim<1>, tdb::c_contig, tdb::device::cpu>; ro8(a..h) the same
// read-only, const float), checked8(a..h)
// takes tdb::TensorView and checks by hand with tdb::check_*. new1(x): a new tensor like x (tdb::OwnedTensor).
#include <cstdint>

#include <torch_dlpack_bridge/pybind11.h>

#include "accepted_calls.h"

namespace {
volatile uintptr_t g_sink;
uintptr_t addr(const tdb::TensorView& v) { return reinterpret_cast<uintptr_t>(v.data<char>()); }
using Typed = tdb::Tensor<float, tdb::ndim<1>, tdb::c_contig, tdb::device::cpu>;
uintptr_t addr(const Typed& t) { return reinterpret_cast<uintptr_t>(t.data()); }
// Issue 29: a written parameter of any strides pays the overlap check (no stride 0 on a dimension of size > 1).
using Strided = tdb::Tensor<float, tdb::ndim<1>, tdb::device::cpu>;
uintptr_t addr(const Strided& t) { return reinterpret_cast<uintptr_t>(t.data()); }
// Issue 44: the same parameter read-only (const float: no writability, overlap or autograd check, no bump).
using ReadOnly = tdb::Tensor<const float, tdb::ndim<1>, tdb::c_contig, tdb::device::cpu>;
uintptr_t addr(const ReadOnly& t) { return reinterpret_cast<uintptr_t>(t.data()); }
uintptr_t checked(tdb::TensorView& v) {
  tdb::check_dtype(v, tdb::kFloat32);
  tdb::check_ndim(v, 1);
  tdb::check_contiguous(v);
  tdb::check_device(v, kDLCPU);
  tdb::check_writable(v);
  return addr(v);
}
}  // namespace

// Returning one new tensor: new1(x) allocates a tensor like x (float32, 1-D) through x's producer and returns it.
using In = tdb::Tensor<const float, tdb::ndim<1>>;
using Out = tdb::OwnedTensor<float, tdb::ndim<1>>;

// CMakeLists.txt builds this file twice: bench_pybind11, and bench_pybind11_explain (accepted_calls.h).
#ifndef TDB_BENCH_MODULE
#define TDB_BENCH_MODULE bench_pybind11
#endif

PYBIND11_MODULE(TDB_BENCH_MODULE, m) {
  m.def("new1", [](const In& x) { return Out::empty_like(x); });
  m.def("f0", []() {});
  m.def("f1", [](const tdb::TensorView& x) { g_sink = addr(x); });
  m.def("f3", [](const tdb::TensorView& x, const tdb::TensorView& y, const tdb::TensorView& z) {
    g_sink = addr(x) + addr(y) + addr(z);
  });
  using V = const tdb::TensorView&;
  m.def("f8", [](V a, V b, V c, V d, V e, V f, V g, V h) {
    g_sink = addr(a) + addr(b) + addr(c) + addr(d) + addr(e) + addr(f) + addr(g) + addr(h);
  });
  using T = const Typed&;
  m.def("typed8", [](T a, T b, T c, T d, T e, T f, T g, T h) {
    g_sink = addr(a) + addr(b) + addr(c) + addr(d) + addr(e) + addr(f) + addr(g) + addr(h);
  });
  using S = const Strided&;
  m.def("strided8", [](S a, S b, S c, S d, S e, S f, S g, S h) {
    g_sink = addr(a) + addr(b) + addr(c) + addr(d) + addr(e) + addr(f) + addr(g) + addr(h);
  });
  using R = const ReadOnly&;
  m.def("ro8", [](R a, R b, R c, R d, R e, R f, R g, R h) {
    g_sink = addr(a) + addr(b) + addr(c) + addr(d) + addr(e) + addr(f) + addr(g) + addr(h);
  });
  using W = tdb::TensorView&;
  m.def("checked8", [](W a, W b, W c, W d, W e, W f, W g, W h) {
    g_sink = checked(a) + checked(b) + checked(c) + checked(d) + checked(e) + checked(f) + checked(g) + checked(h);
  });
  accepted_calls::def_accepted_calls(m);  // last: tdb::explain_refusals(m) in the bench_*_explain build
}
