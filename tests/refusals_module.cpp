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

// Issue 44: constructors and methods (a constructor's listing has no `self`, its call's arguments start with it).
using Vec = tdb::Tensor<const float, tdb::ndim<1>>;
struct Pair {
  int64_t n;
  Pair(Vec x, Vec y) : n(x.size(0) + y.size(0)) {}
  int64_t scale(Vec x) const { return n * x.size(0); }
  static int64_t make(Vec x, Vec y) { return x.size(0) * y.size(0); }
};

double sum(const Vec& x) {
  double total = 0;
  for (int64_t i = 0; i < x.size(0); ++i) total += x.data()[i];
  return total;
}
double sum(const std::vector<Vec>& xs) {
  double total = 0;
  for (const auto& x : xs) total += sum(x);
  return total;
}

// Issue 59: a list of untyped views, read as float32 rows (each item's own strides).
double sum_views(const std::vector<tdb::TensorView>& xs) {
  double total = 0;
  for (const auto& x : xs)
    for (int64_t i = 0; i < x.size(0); ++i) total += x.data<const float>()[i * x.stride(0)];
  return total;
}

// Issue 51: a property whose setter takes a tensor.
struct Holder {
  double total = 0;
};

}  // namespace

// Which name a reason line gives an argument: the binding library's (py::arg, or its own), never tdb::named's.
namespace {
constexpr char kNamed[] = "named";
using Named = tdb::Tensor<float, tdb::ndim<1>, tdb::named<kNamed>>;
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
  // A body that lets another function's overload TypeError through is not run again to explain it. relay is
  // wrapped (a tdb parameter, never given in the tests); untyped_relay is left as it is (no tdb parameter).
  m.def("relay", [](py::object callback, std::optional<Vec>) { return callback(); }, py::arg("callback"),
        py::arg("x") = py::none());
  m.def("untyped_relay", [](py::object callback) { return callback(); }, py::arg("callback"));
  // Wrapped as its first overload takes a tensor, though its last does not.
  m.def("tensor_or_int", [](Vec x) { return x.size(0); }, py::arg("x"));
  m.def("tensor_or_int", [](int n) { return static_cast<int64_t>(n); }, py::arg("n"));
  // Issue 38.3: no caster runs for bias=None; the tdb::Error is a ValueError from the first call.
  m.def("bias_first", [](int n, std::optional<tdb::Tensor<const float, tdb::ndim<1>>> bias) {
    if (n < 0) throw tdb::Error(PyExc_ValueError, "n must be >= 0, got " + std::to_string(n));
    return bias ? n + 1 : n;
  }, py::arg("n"), py::arg("bias") = py::none());
  // Issue 44: one dispatch. A list parameter given a generator (pybind11 takes any iterable: converts it once),
  // a callback run by the body (it may call this function or another wrapped one), every calling form.
  m.def("total", [](std::vector<Vec> xs) { return sum(xs); }, py::arg("xs"));
  m.def("total_dtypes", [](std::vector<Vec> xs) { return sum(xs); }, py::arg("xs"));
  m.def("total_dtypes", [](std::vector<tdb::Tensor<const double, tdb::ndim<1>>> xs) { return xs.size(); },
        py::arg("xs"));
  m.def("total_doubles", [](std::vector<double> xs) {
    double total = 0;
    for (double x : xs) total += x;
    return total;
  }, py::arg("xs"));
  m.def("apply", [](py::object callback, C<float> x) {
    callback();
    return got(x);
  }, py::arg("callback"), py::arg("x"));
  m.def("apply", [](py::object callback, C<double> x) {  // a float32 tensor noted as refused by the first
    callback();
    return got(x);
  }, py::arg("callback"), py::arg("x"));
  // An overload that takes any object after one whose producer refused: the refusal stays noted in the call.
  m.def("either", [](C<float> x, py::object) { return got(x); }, py::arg("x"), py::arg("callback"));
  m.def("either", [](py::object, py::object callback) {
    callback();
    return std::string("object");
  }, py::arg("x"), py::arg("callback"));
  py::class_<Pair>(m, "Pair")
      .def(py::init<Vec, Vec>(), py::arg("x"), py::arg("y"))
      .def("scale", &Pair::scale, py::arg("x"))
      .def_static("make", &Pair::make, py::arg("x"), py::arg("y"));
  m.def("keywords", [](Vec x, Vec y, std::optional<Vec> z) { return x.size(0) + y.size(0) + (z ? z->size(0) : 0); },
        py::arg("x"), py::kw_only(), py::arg("y"), py::arg("z") = py::none());
#if defined(TDB_USE_NANOBIND)
  py::class_<Holder>(m, "Holder").def(py::init<>()).def_prop_rw(
#else
  py::class_<Holder>(m, "Holder").def(py::init<>()).def_property(
#endif
      "w", [](const Holder& h) { return h.total; }, [](Holder& h, Vec x) { h.total = sum(x); });
  m.def_submodule("sub").def("vec", [](Vec x) { return x.size(0); }, py::arg("x"));
  m.def("named_by_arg", [](std::vector<Named> xs) { return xs.size(); }, py::arg("xs"));
  m.def("named_by_library", [](std::vector<Named> xs) { return xs.size(); });
  // Untyped parameters (issue 45.6: what a non-tensor argument is told).
  m.def("view", [](tdb::TensorView x, float) { return got(x); }, py::arg("x"), py::arg("a"));
  m.def("managed", [](tdb::ManagedTensor x, float) { return x.dl().ndim; }, py::arg("x"), py::arg("a"));
  // Issue 51: a producer's exception that is not a refusal ends the call, even when nanobind gives the overload that
  // met it up for another argument and chooses one without a tdb parameter.
  m.def("vec_or_objects", [](Vec x, int) { return x.size(0); }, py::arg("x"), py::arg("n"));
  m.def("vec_or_objects", [](py::object, py::object) { return int64_t{-1}; }, py::arg("x"), py::arg("n"));
  // Issue 51: an overload without a tdb parameter, tried first and given up, leaves the record open for the next.
  m.def("int_or_vec", [](int n) { return double(n); }, py::arg("x"));
  m.def("int_or_vec", [](Vec x) { return sum(x); }, py::arg("x"));
  // Issue 51: an overload whose only tdb parameter is in a std::variant, given an int: no tdb caster closes the record.
  m.def("vary", [](C<float> x, int, py::object) { return got(x); }, py::arg("x"), py::arg("y"), py::arg("callback"));
  m.def("vary", [](py::object, std::variant<int, C<float>>, py::object callback) {
    callback();
    return std::string("variant");
  }, py::arg("x"), py::arg("y"), py::arg("callback"));
  // The same with a std::optional of tdb::TensorView given None: pybind11's own caster, which converts no tensor.
  m.def("maybe", [](C<float> x, py::object, int) { return got(x); }, py::arg("x"), py::arg("y").none(),
        py::arg("callback"));
  m.def("maybe", [](py::object, std::optional<tdb::TensorView>, py::object callback) {
    callback();
    return std::string("optional");
  }, py::arg("x"), py::arg("y"), py::arg("callback"));
  // Issue 51: a producer's `__dlpack__` may call the module's functions (wrapped or not).
  m.def("read_sum", [](Vec x) { return sum(x); }, py::arg("x"));
  // Issue 59: every tensor a body reads lives until it returns, however its container was made. Each body runs its
  // callback first (which drops what the caller held, collects garbage and reuses freed memory), then reads.
  m.def("total_after", [](std::vector<Vec> xs, py::object callback) {
    callback();
    return sum(xs);
  }, py::arg("xs"), py::arg("callback"));
  m.def("views_after", [](std::vector<tdb::TensorView> xs, py::object callback) {
    callback();
    return sum_views(xs);
  }, py::arg("xs"), py::arg("callback"));
  m.def("nested_after", [](std::vector<std::vector<Vec>> xss, py::object callback) {
    callback();
    double total = 0;
    for (const auto& xs : xss) total += sum(xs);
    return total;
  }, py::arg("xss"), py::arg("callback"));
  m.def("optional_after", [](std::optional<Vec> x, py::object callback) {
    callback();
    return x ? sum(*x) : -1.0;
  }, py::arg("x"), py::arg("callback"));
  m.def("variant_after", [](std::variant<int, Vec> x, py::object callback) {
    callback();
    return x.index() == 1 ? sum(std::get<1>(x)) : -1.0;
  }, py::arg("x"), py::arg("callback"));
  // Issue 59: a producer is asked once per call, whatever container took its tensor: the first overload converts
  // it (a variant's alternative; a vector of views) and is given up for its int; the second takes it.
  m.def("vary_once", [](std::variant<int, C<double>, Vec>, int) { return -1.0; }, py::arg("x"), py::arg("n"));
  m.def("vary_once", [](Vec x, std::string) { return sum(x); }, py::arg("x"), py::arg("n"));
  m.def("views_once", [](std::vector<tdb::TensorView>, int) { return -1.0; }, py::arg("xs"), py::arg("n"));
  m.def("views_once", [](std::vector<tdb::TensorView> xs, std::string) { return sum_views(xs); }, py::arg("xs"),
        py::arg("n"));
  tdb::explain_refusals(m);
  // Defined after explain_refusals: not wrapped (the library's message, no reasons).
  m.def("late_sum", [](Vec x) { return sum(x); }, py::arg("x"));
  m.def("late", [](Vec x) { return x.size(0); }, py::arg("x"));
  m.def("late_c", [](C<float> x) { return got(x); }, py::arg("x"));
  m.def("late_total", [](std::vector<Vec> xs) { return sum(xs); }, py::arg("xs"));
  // Issue 59: a body that converts an object itself (no tdb parameter: never wrapped).
  m.def("cast_sum", [](py::object x) { return sum(py::cast<Vec>(x)); }, py::arg("x"));
  m.def("cast_total", [](py::object xs, py::object callback) {
    std::vector<Vec> items = py::cast<std::vector<Vec>>(xs);
    callback();
    return sum(items);
  }, py::arg("xs"), py::arg("callback"));
}
