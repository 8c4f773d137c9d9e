// The calls that benchmarks/bindings.py times in bench_pybind11 and bench_nanobind against the same modules built
// with TDB_BENCH_EXPLAIN (bench_*_explain, CMakeLists.txt), which call tdb::explain_refusals(m) at their end:
// what explaining refusals costs a call that is accepted (issue 44). Included by both sources after their binding
// header; def_accepted_calls(m) goes last in the module.
#ifndef TDB_BENCH_ACCEPTED_CALLS_H_
#define TDB_BENCH_ACCEPTED_CALLS_H_

#include <cstdint>

namespace accepted_calls {
inline volatile uintptr_t g_sink;
using Read = tdb::Tensor<const float, tdb::ndim<1>, tdb::c_contig, tdb::device::cpu>;
using Read64 = tdb::Tensor<const double, tdb::ndim<1>, tdb::c_contig, tdb::device::cpu>;
using Written = tdb::Tensor<float, tdb::ndim<1>, tdb::c_contig, tdb::device::cpu>;
template <class T>
uintptr_t addr(const T& t) {
  return reinterpret_cast<uintptr_t>(t.data());
}

// ro1(x), ro3(x, y, z) read-only; typed1(x) written; dtype2(x) float32 then float64 (called with float64, its first
// overload refuses and the second takes it); then tdb::explain_refusals(m) in the bench_*_explain builds.
template <class Module>
void def_accepted_calls(Module& m) {
  m.def("ro1", [](const Read& a) { g_sink = addr(a); });
  m.def("ro3", [](const Read& a, const Read& b, const Read& c) { g_sink = addr(a) + addr(b) + addr(c); });
  m.def("typed1", [](const Written& a) { g_sink = addr(a); });
  m.def("dtype2", [](const Read& a) { g_sink = addr(a); });
  m.def("dtype2", [](const Read64& a) { g_sink = addr(a); });
#ifdef TDB_BENCH_EXPLAIN
  tdb::explain_refusals(m);
#endif
}
}  // namespace accepted_calls

#endif  // TDB_BENCH_ACCEPTED_CALLS_H_
