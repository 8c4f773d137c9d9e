// A test module for tests/test_refusals.py: the reasons tdb::explain_refusals(m) adds to the binding library's
// TypeError (refusals.h), through pybind11, or nanobind when compiled with -DTDB_USE_NANOBIND; TDB_MODULE names it.
// Three parameter families, each bound as one overload and as float/double overloads, in four forms.
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "binding_flavour.h"

namespace {

// "c": written rows of 4, row-major, on the CPU (dtype, rank, size, order, read-only; producer refusals, no data);
// "any": written rows of 4, any strides (an expanded tensor); "cuda": read rows of 4 on a CUDA device.
template <class T>
using C = tdb::Tensor<T, tdb::shape<-1, 4>, tdb::c_contig, tdb::device::cpu>;
template <class T>
using Any = tdb::Tensor<T, tdb::shape<-1, 4>, tdb::device::cpu>;
template <class T>
using Cuda = tdb::Tensor<const T, tdb::shape<-1, 4>, tdb::device::cuda>;

std::string got(const tdb::TensorView& x) { return tdb::dtype_name(x.dtype()) + "[" + std::to_string(x.size(0)) + "]"; }
template <class E>
std::string got(const std::optional<E>& x) { return x ? got(*x) : std::string("none"); }
template <class E>
std::string got(const std::vector<E>& xs) {
  std::string out;
  for (const auto& x : xs) out += (out.empty() ? "" : ",") + got(x);
  return out;
}

// prefix + "_plain" (x, a), "_optional" (x: optional, a), "_vector" (xs, a), "_keyword" (a, x) called with keywords.
template <class E, class S>
void def_forms(Module& m, const std::string& prefix) {
  m.def((prefix + "_plain").c_str(), [](E x, S) { return got(x); }, py::arg("x"), py::arg("a"));
  m.def((prefix + "_optional").c_str(), [](std::optional<E> x, S) { return got(x); }, py::arg("x"), py::arg("a"));
  m.def((prefix + "_vector").c_str(), [](std::vector<E> xs, S) { return got(xs); }, py::arg("xs"), py::arg("a"));
  m.def((prefix + "_keyword").c_str(), [](S, E x) { return got(x); }, py::arg("a"), py::arg("x"));
}

}  // namespace

TDB_TEST_MODULE(TDB_MODULE, m) {
  def_forms<C<float>, float>(m, "c");
  def_forms<Any<float>, float>(m, "any");
  def_forms<Cuda<float>, float>(m, "cuda");
  def_forms<C<float>, float>(m, "c_dtypes");
  def_forms<C<double>, double>(m, "c_dtypes");
  def_forms<Any<float>, float>(m, "any_dtypes");
  def_forms<Any<double>, double>(m, "any_dtypes");
  def_forms<Cuda<float>, float>(m, "cuda_dtypes");
  def_forms<Cuda<double>, double>(m, "cuda_dtypes");
  // Two tensors: only the refused one is named.
  m.def("two", [](C<float> x, C<float> y) { return got(x) + got(y); }, py::arg("x"), py::arg("y"));
  // A variant takes what one alternative takes (pybind11 default-constructs the first alternative: an int).
  m.def("variant", [](std::variant<int, C<float>, C<double>> x, int n) { return n + static_cast<int>(x.index()); },
        py::arg("x"), py::arg("n"));
  // A body that lets another function's overload TypeError through is not run again to explain it.
  m.def("relay", [](py::object callback) { return callback(); });
  // Issue 38.3: no caster runs for bias=None; the tdb::Error is a ValueError from the first call.
  m.def("bias_first", [](int n, std::optional<tdb::Tensor<const float, tdb::ndim<1>>> bias) {
    if (n < 0) throw tdb::Error(PyExc_ValueError, "n must be >= 0, got " + std::to_string(n));
    return bias ? n + 1 : n;
  }, py::arg("n"), py::arg("bias") = py::none());
  tdb::explain_refusals(m);
}
