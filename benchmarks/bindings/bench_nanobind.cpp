// bench_nanobind: the nanobind caster of torch_dlpack_bridge/nanobind.h and nanobind's own nb::ndarray
// (which takes tensors through __dlpack__), for benchmarks/bindings.py.
// f0(), f1(x), f3(x, y, z), f8(a..h): tdb::TensorView arguments; nd1(x), nd3(x, y, z), nd8(a..h): nb::ndarray<>
// arguments.
// Each reads every data pointer.
// Issue 26, 8 tensors each required to be float32, 1-D, row-major contiguous, on the CPU and writable:
// typed8(a..h) declares it (tdb::Tensor<float, tdb::ndim<1>, tdb::c_contig, tdb::device::cpu>; ro8(a..h) the same
// read-only, const float), checked8(a..h)
// takes tdb::TensorView and checks by hand with tdb::check_*, ndc8(a..h) declares it with
// nb::ndarray<float, nb::ndim<1>, nb::c_contig, nb::device::cpu>.
#include <nanobind/ndarray.h>

#include <cstdint>

#include <torch_dlpack_bridge/nanobind.h>

#include "accepted_calls.h"

namespace nb = nanobind;

namespace {
volatile uintptr_t g_sink;
uintptr_t addr(const tdb::TensorView& v) { return reinterpret_cast<uintptr_t>(v.data<char>()); }
uintptr_t addr(const nb::ndarray<>& a) { return reinterpret_cast<uintptr_t>(a.data()); }
using Typed = tdb::Tensor<float, tdb::ndim<1>, tdb::c_contig, tdb::device::cpu>;
uintptr_t addr(const Typed& t) { return reinterpret_cast<uintptr_t>(t.data()); }
// Issue 29: a written parameter of any strides pays the overlap check (no stride 0 on a dimension of size > 1).
using Strided = tdb::Tensor<float, tdb::ndim<1>, tdb::device::cpu>;
uintptr_t addr(const Strided& t) { return reinterpret_cast<uintptr_t>(t.data()); }
// Issue 44: the same parameter read-only (const float: no writability, overlap or autograd check, no bump).
using ReadOnly = tdb::Tensor<const float, tdb::ndim<1>, tdb::c_contig, tdb::device::cpu>;
uintptr_t addr(const ReadOnly& t) { return reinterpret_cast<uintptr_t>(t.data()); }
using Nd = nb::ndarray<float, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
uintptr_t addr(const Nd& a) { return reinterpret_cast<uintptr_t>(a.data()); }
uintptr_t checked(tdb::TensorView& v) {
  tdb::check_dtype(v, tdb::kFloat32);
  tdb::check_ndim(v, 1);
  tdb::check_contiguous(v);
  tdb::check_device(v, kDLCPU);
  tdb::check_writable(v);
  return addr(v);
}
}  // namespace

// Returning one new tensor like x (float32, 1-D): new1(x) through the caster (tdb::OwnedTensor, x's producer
// allocates); nd_new1(x) nanobind's own way, x taken as nb::ndarray and the result a new[]-allocated
// nb::ndarray<nb::pytorch, float, nb::ndim<1>> owned by a capsule (what nanobind's documentation shows).
using In = tdb::Tensor<const float, tdb::ndim<1>>;
using Out = tdb::OwnedTensor<float, tdb::ndim<1>>;
using NdTorch = nb::ndarray<nb::pytorch, float, nb::ndim<1>>;

NdTorch nd_new(size_t n) {
  float* data = new float[n];
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<float*>(p); });
  return NdTorch(data, {n}, owner);
}

// CMakeLists.txt builds this file twice: bench_nanobind, and bench_nanobind_explain (accepted_calls.h).
#ifndef TDB_BENCH_MODULE
#define TDB_BENCH_MODULE bench_nanobind
#endif

NB_MODULE(TDB_BENCH_MODULE, m) {
  m.def("new1", [](const In& x) { return Out::empty_like(x); });
  m.def("nd_new1", [](const nb::ndarray<float, nb::ndim<1>>& x) { return nd_new(x.shape(0)); });
  m.def("nd_return4", [](nb::handle) { return nd_new(4); });  // the return alone: x is not taken as a tensor
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
  using D = const Nd&;
  m.def("ndc8", [](D a, D b, D c, D d, D e, D f, D g, D h) {
    g_sink = addr(a) + addr(b) + addr(c) + addr(d) + addr(e) + addr(f) + addr(g) + addr(h);
  });
  accepted_calls::def_accepted_calls(m);  // last: tdb::explain_refusals(m) in the bench_*_explain build
}
