// A test module for tests/test_typed_tensor.py: typed tdb::Tensor<...> parameters (torch_dlpack_bridge/tensor.h)
// through the pybind11 caster, or the nanobind caster when compiled with -DTDB_USE_NANOBIND. TDB_MODULE names it.
// Single-overload functions pin each constraint (accepted, refused with its message); overloaded ones pin
// dispatch by dtype, rank, device and memory order; the to_list/fill functions pin the accessors.
#include <complex>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "binding_flavour.h"

using tdb::Tensor;

namespace {

static constexpr char kX[] = "x";
static constexpr char kY[] = "y";

// The accessors are plain values: what a CUDA kernel takes by value.
static_assert(std::is_trivially_copyable<tdb::StridedView<float, 3>>::value, "StridedView is trivially copyable");
static_assert(std::is_trivially_copyable<tdb::ContiguousView<const double, 2>>::value, "ContiguousView too");
static_assert(std::is_trivially_copyable<tdb::StridedView<tdb::bfloat16, 0>>::value, "rank 0 too");
static_assert(sizeof(tdb::bfloat16) == 2 && sizeof(tdb::float8_e4m3fn) == 1 && sizeof(tdb::complex32) == 4, "");
static_assert(std::is_same<decltype(std::declval<Tensor<const float, tdb::ndim<1>>&>().view()),
                           tdb::StridedView<const float, 1>>::value, "any strides: StridedView");
static_assert(std::is_same<decltype(std::declval<Tensor<float, tdb::ndim<2>, tdb::c_contig>&>().view()),
                           tdb::ContiguousView<float, 2>>::value, "c_contig: ContiguousView");
static_assert(std::is_same<decltype(std::declval<Tensor<float, tdb::ro, tdb::ndim<1>>&>().view()),
                           tdb::StridedView<const float, 1>>::value, "tdb::ro: const elements");
static_assert(std::is_same<Tensor<float, tdb::shape<-1, 3>>::Scalar, float>::value &&
                  Tensor<float, tdb::shape<-1, 3>>::Rank == 2 && Tensor<float>::Rank == -1,
              "Scalar and Rank");

// The first element's raw bits (any element type), as an integer: for the dtype tests.
template <class T>
int64_t first_bits(const T& t) {
  if (t.numel() == 0) return -1;
  using E = std::remove_const_t<typename T::Scalar>;
  E value;
  std::memcpy(&value, t.data(), sizeof(E));
  int64_t out = 0;
  std::memcpy(&out, &value, sizeof(E) < sizeof(out) ? sizeof(E) : sizeof(out));
  return out;
}

// All elements in row-major order, read through view() (StridedView or ContiguousView).
template <class V>
std::vector<double> elements(const V& a) {
  std::vector<double> out;
  if constexpr (V::rank == 0) {
    out.push_back(static_cast<double>(a()));
  } else if constexpr (V::rank == 1) {
    for (int64_t i = 0; i < a.size(0); ++i) out.push_back(static_cast<double>(a(i)));
  } else if constexpr (V::rank == 2) {
    for (int64_t i = 0; i < a.size(0); ++i)
      for (int64_t j = 0; j < a.size(1); ++j) out.push_back(static_cast<double>(a(i, j)));
  } else {
    static_assert(V::rank == 3, "ranks 0-3");
    for (int64_t i = 0; i < a.size(0); ++i)
      for (int64_t j = 0; j < a.size(1); ++j)
        for (int64_t k = 0; k < a.size(2); ++k) out.push_back(static_cast<double>(a(i, j, k)));
  }
  return out;
}

// Writes i*10000 + j*100 + k through view() (2-D and 3-D).
template <class V>
void fill(const V& a) {
  if constexpr (V::rank == 2) {
    for (int64_t i = 0; i < a.size(0); ++i)
      for (int64_t j = 0; j < a.size(1); ++j) a(i, j) = static_cast<float>(i * 10000 + j * 100);
  } else {
    for (int64_t i = 0; i < a.size(0); ++i)
      for (int64_t j = 0; j < a.size(1); ++j)
        for (int64_t k = 0; k < a.size(2); ++k) a(i, j, k) = static_cast<float>(i * 10000 + j * 100 + k);
  }
}

template <class T>
std::string dtype_of(const Tensor<const T, tdb::ndim<1>>&) {
  return tdb::dtype_name(tdb::dtype_traits<T>::value);
}

// ---- tests/test_binding_matrix.py: a tensor parameter as kernel authors write it (plain, std::optional,
// std::vector, keyword, None default), with one overload or dtype overloads whose scalar needs conversion.
// Each returns what it received, e.g. "float32[3]*2": the overload reached and the values it got.
std::string got(const DLTensor& t) { return tdb::dtype_name(t.dtype) + "[" + std::to_string(t.shape[0]) + "]"; }
std::string got(const tdb::TensorView& x) { return got(x.dl()); }
std::string got(const tdb::ManagedTensor& x) { return got(x.dl()); }
template <class E>
std::string got(const std::optional<E>& x) { return x ? got(*x) : std::string("none"); }
template <class E>
std::string got(const std::vector<E>& xs) {
  std::string out;
  for (const auto& x : xs) out += (out.empty() ? "" : ",") + got(x);
  return out;
}
std::string times(double a) { return "*" + std::to_string(static_cast<int>(a)); }

// The five parameter forms of element E (a typed parameter, a TensorView or a ManagedTensor) and scalar S,
// bound under `prefix` + "_plain" (...): once, or once more per call for dtype overloads.
template <class E, class S>
void def_forms(Module& m, const std::string& prefix) {
  // (both binding libraries copy the name)
  m.def((prefix + "_plain").c_str(), [](E x, S a) { return got(x) + times(a); });
  m.def((prefix + "_optional").c_str(), [](std::optional<E> x, S a) { return got(x) + times(a); });
  m.def((prefix + "_vector").c_str(), [](std::vector<E> xs, S a) { return got(xs) + times(a); });
  m.def((prefix + "_keyword").c_str(), [](E x, S a) { return got(x) + times(a); }, py::arg("x"), py::arg("a"));
  m.def((prefix + "_none_default").c_str(), [](S a, std::optional<E> x) { return got(x) + times(a); },
        py::arg("a"), py::arg("x") = py::none());
}

// Binds `f` twice: as `name`, taking the typed parameter T (the caster checks it), and as `name` + "_body",
// taking a TensorView that the body turns into a T (tdb checks it and raises the violation, as in the raw flavour).
template <class T, class F>
void def_both(Module& m, const std::string& name, F f) {
  m.def(name.c_str(), [f](T x) { return f(x); });
  m.def((name + "_body").c_str(), [f](tdb::TensorView v) { return f(T(std::move(v))); });
}

#if !defined(TDB_USE_NANOBIND)
// The raw flavour (no binding library): scale_(x, a) as a METH_FASTCALL function whose parameter is made by
// Tensor's constructor, which raises the precise refusal (writes and autograd, issue 38.7).
PyObject* raw_scale_(PyObject*, PyObject* const* args, Py_ssize_t n) {
  return tdb::guard([&]() -> PyObject* {
    if (n != 2) throw tdb::Error(PyExc_TypeError, "raw_scale_(x, a): 2 arguments");
    const double a = PyFloat_AsDouble(args[1]);
    if (a == -1.0 && PyErr_Occurred()) throw tdb::Error::pending();
    Tensor<float, tdb::device::cpu> x(args[0], "x");
    tdb::for_each_offset(x.dl(), [&](int64_t, int64_t off) { x.data()[off] *= static_cast<float>(a); });
    Py_RETURN_NONE;
  });
}
PyMethodDef kRawScale{"raw_scale_", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(raw_scale_)),
                      METH_FASTCALL, nullptr};
#endif

}  // namespace

TDB_TEST_MODULE(TDB_MODULE, m) {
  // view_in_body takes no tdb argument, so no caster registers the tdb::Error translator before it may throw.
#if defined(TDB_USE_NANOBIND)
  tdb::register_nanobind_error_translator();
#else
  tdb::register_pybind11_error_translator();
#endif
  // ---- the matrix (tests/test_binding_matrix.py)
  def_forms<Tensor<const float, tdb::ndim<1>>, float>(m, "typed");
  def_forms<tdb::TensorView, float>(m, "view");
  def_forms<tdb::ManagedTensor, float>(m, "managed");
  def_forms<Tensor<const float, tdb::ndim<1>>, float>(m, "dtypes");
  def_forms<Tensor<const double, tdb::ndim<1>>, double>(m, "dtypes");
  // (pybind11 default-constructs a variant: a tensor is not its first alternative)
  m.def("variant", [](std::variant<int, Tensor<const float, tdb::ndim<1>>, Tensor<const double, tdb::ndim<1>>> x) {
    return std::visit([](const auto& v) -> std::string {
      if constexpr (std::is_same_v<std::decay_t<decltype(v)>, int>) return "int";
      else return got(v);
    }, x);
  });
  m.def("view_variant", [](std::variant<std::string, tdb::TensorView> x) {
    return x.index() == 1 ? got(std::get<1>(x)) : "str";
  });
  // ---- overlap: a written parameter refuses an expanded tensor; a read-only one takes it
  m.def("scale_", [](Tensor<float, tdb::device::cpu> x, float a) {
    tdb::for_each_offset(x.dl(), [&](int64_t, int64_t off) { x.data()[off] *= a; });
  });
  m.def("scale2_", [](Tensor<float, tdb::ndim<2>> x, float a) {
    auto v = x.view();
    for (int64_t i = 0; i < v.size(0); ++i)
      for (int64_t j = 0; j < v.size(1); ++j) v(i, j) *= a;
  });
  // ---- version counters (issue 44.2): x written by every overload, which says which one ran; 2 and 3
  // overloads that each try x before the scalar decides (a str: refused by all)
  using W = Tensor<float, tdb::device::cpu>;
  const auto times = [](W& x, double a, const char* overload) {
    tdb::for_each_offset(x.dl(), [&](int64_t, int64_t off) { x.data()[off] *= static_cast<float>(a); });
    return std::string(overload);
  };
  m.def("bumps1_", [times](W x, double a) { return times(x, a, "double"); });
  m.def("bumps2_", [times](W x, int64_t a) { return times(x, static_cast<double>(a), "int"); });
  m.def("bumps2_", [times](W x, double a) { return times(x, a, "double"); });
  m.def("bumps3_", [times](W x, bool a) { return times(x, a ? 1.0 : 0.0, "bool"); });
  m.def("bumps3_", [times](W x, int64_t a) { return times(x, static_cast<double>(a), "int"); });
  m.def("bumps3_", [times](W x, double a) { return times(x, a, "double"); });
  m.def("bumps_optional_", [times](std::optional<W> x, int64_t a) {
    return x ? times(*x, static_cast<double>(a), "int") : std::string("none");
  });
  m.def("bumps_optional_", [times](std::optional<W> x, double a) { return x ? times(*x, a, "double") : "none"; });
  m.def("bumps_vector_", [times](std::vector<W> xs, int64_t a) {
    for (W& x : xs) times(x, static_cast<double>(a), "int");
    return std::string("int");
  });
  m.def("bumps_vector_", [times](std::vector<W> xs, double a) {
    for (W& x : xs) times(x, a, "double");
    return std::string("double");
  });
  m.def("bumps_nogil_", [times](W x, double a) { return times(x, a, "double"); },
        py::call_guard<py::gil_scoped_release>());
#if !defined(TDB_USE_NANOBIND)
  m.attr("raw_scale_") = py::reinterpret_steal<py::object>(PyCFunction_New(&kRawScale, nullptr));
#endif
  m.def("sum_ro", [](Tensor<const float, tdb::ndim<2>> x) {
    auto v = x.view();
    double total = 0;
    for (int64_t i = 0; i < v.size(0); ++i)
      for (int64_t j = 0; j < v.size(1); ++j) total += v(i, j);
    return total;
  });
  // The same checks in a function's body (the raw flavour's way): tdb raises them, named.
  m.def("writable_in_body", [](tdb::TensorView v) {
    v.set_name("v");
    Tensor<float> t(std::move(v));
    return t.ndim();
  });
  // The exception rule in a body: the check's own type (TypeError, ValueError, BufferError).
  m.def("view_in_body", [](py::object o) { return tdb::TensorView(o.ptr(), "o").ndim(); });
  m.def("float32_in_body", [](tdb::TensorView v) {
    v.set_name("v");
    return Tensor<const float, tdb::ndim<1>>(std::move(v)).ndim();
  });

  // ---- element types: each returns the first element's raw bits
  def_both<Tensor<float>>(m, "f32", [](const Tensor<float>& x) { return first_bits(x); });
  def_both<Tensor<double>>(m, "f64", [](const Tensor<double>& x) { return first_bits(x); });
  def_both<Tensor<tdb::float16>>(m, "f16", [](const Tensor<tdb::float16>& x) { return first_bits(x); });
  def_both<Tensor<tdb::bfloat16>>(m, "bf16", [](const Tensor<tdb::bfloat16>& x) { return first_bits(x); });
  def_both<Tensor<tdb::complex32>>(m, "c32", [](const Tensor<tdb::complex32>& x) { return first_bits(x); });
  def_both<Tensor<std::complex<float>>>(m, "c64", [](const Tensor<std::complex<float>>& x) { return first_bits(x); });
  def_both<Tensor<std::complex<double>>>(m, "c128", [](const Tensor<std::complex<double>>& x) { return first_bits(x); });
  def_both<Tensor<tdb::float8_e4m3fn>>(m, "f8e4m3fn", [](const Tensor<tdb::float8_e4m3fn>& x) { return first_bits(x); });
  def_both<Tensor<tdb::float8_e4m3fnuz>>(m, "f8e4m3fnuz", [](const Tensor<tdb::float8_e4m3fnuz>& x) { return first_bits(x); });
  def_both<Tensor<tdb::float8_e5m2>>(m, "f8e5m2", [](const Tensor<tdb::float8_e5m2>& x) { return first_bits(x); });
  def_both<Tensor<tdb::float8_e5m2fnuz>>(m, "f8e5m2fnuz", [](const Tensor<tdb::float8_e5m2fnuz>& x) { return first_bits(x); });
  def_both<Tensor<tdb::float8_e8m0fnu>>(m, "f8e8m0fnu", [](const Tensor<tdb::float8_e8m0fnu>& x) { return first_bits(x); });
  def_both<Tensor<tdb::float4_e2m1fn_x2>>(m, "f4e2m1fn_x2", [](const Tensor<tdb::float4_e2m1fn_x2>& x) { return first_bits(x); });
  def_both<Tensor<bool>>(m, "b8", [](const Tensor<bool>& x) { return first_bits(x); });
  def_both<Tensor<int8_t>>(m, "i8", [](const Tensor<int8_t>& x) { return first_bits(x); });
  def_both<Tensor<int16_t>>(m, "i16", [](const Tensor<int16_t>& x) { return first_bits(x); });
  def_both<Tensor<int32_t>>(m, "i32", [](const Tensor<int32_t>& x) { return first_bits(x); });
  def_both<Tensor<int64_t>>(m, "i64", [](const Tensor<int64_t>& x) { return first_bits(x); });
  def_both<Tensor<uint8_t>>(m, "u8", [](const Tensor<uint8_t>& x) { return first_bits(x); });
  def_both<Tensor<uint16_t>>(m, "u16", [](const Tensor<uint16_t>& x) { return first_bits(x); });
  def_both<Tensor<uint32_t>>(m, "u32", [](const Tensor<uint32_t>& x) { return first_bits(x); });
  def_both<Tensor<uint64_t>>(m, "u64", [](const Tensor<uint64_t>& x) { return first_bits(x); });
  def_both<Tensor<>>(m, "any_dtype", [](const Tensor<>& x) { return tdb::dtype_name(x.dtype()); });

  // ---- rank and sizes
  def_both<Tensor<const float, tdb::shape<>>>(m, "rank0", [](const Tensor<const float, tdb::shape<>>& x) { return x.ndim(); });
  def_both<Tensor<const float, tdb::ndim<2>>>(m, "rank2", [](const Tensor<const float, tdb::ndim<2>>& x) { return x.ndim(); });
  def_both<Tensor<const float, tdb::shape<-1, 3>>>(m, "rows_of_3", [](const Tensor<const float, tdb::shape<-1, 3>>& x) { return x.size(0); });
  def_both<Tensor<const float, tdb::shape<2, -1, 4>>>(m, "fixed_2_any_4", [](const Tensor<const float, tdb::shape<2, -1, 4>>& x) { return x.size(1); });

  // ---- memory order
  def_both<Tensor<const float, tdb::c_contig>>(m, "c_contig", [](const Tensor<const float, tdb::c_contig>& x) { return x.ndim(); });
  def_both<Tensor<const float, tdb::f_contig>>(m, "f_contig", [](const Tensor<const float, tdb::f_contig>& x) { return x.ndim(); });

  // ---- device type
  def_both<Tensor<const float, tdb::device::cpu>>(m, "on_cpu", [](const Tensor<const float, tdb::device::cpu>& x) { return tdb::device_name(x.device()); });
  def_both<Tensor<const float, tdb::device::cuda>>(m, "on_cuda", [](const Tensor<const float, tdb::device::cuda>& x) { return tdb::device_name(x.device()); });

  // ---- writability
  def_both<Tensor<float>>(m, "writable", [](const Tensor<float>& x) { return x.read_only(); });
  def_both<Tensor<const float>>(m, "const_elements", [](const Tensor<const float>& x) { return x.read_only(); });
  def_both<Tensor<tdb::ro>>(m, "ro_any_dtype", [](const Tensor<tdb::ro>& x) { return x.read_only(); });

  // ---- names and everything at once
  def_both<Tensor<float, tdb::named<kX>>>(m, "named_x", [](const Tensor<float, tdb::named<kX>>& x) { return std::string(x.name()); });
  def_both<Tensor<float, tdb::shape<-1, 3>, tdb::c_contig, tdb::device::cpu, tdb::named<kX>>>(m, "all_of_them", [](const Tensor<float, tdb::shape<-1, 3>, tdb::c_contig, tdb::device::cpu, tdb::named<kX>>& x) {
    return x.size(0);
  });
  // ---- several bad arguments: the first is reported (nanobind asks for values right to left with GCC)
  m.def("two", [](Tensor<float, tdb::named<kX>> x, Tensor<float, tdb::named<kY>>) { return x.ndim(); });
  m.def("two_views", [](tdb::TensorView x, tdb::TensorView) { return x.ndim(); });
  // ---- a typed parameter made from a TensorView, in the function (checks named by the view)
  m.def("from_view", [](tdb::TensorView v) {
    v.set_name("v");
    Tensor<const float, tdb::shape<-1, 2>> t(std::move(v));
    return elements(t.view());
  });
  m.def("describe", []() {
    return Tensor<const float, tdb::shape<-1, 3>, tdb::c_contig, tdb::device::cuda>::describe() + " | " +
           Tensor<tdb::bfloat16, tdb::ndim<2>, tdb::f_contig>::describe() + " | " + Tensor<>::describe();
  });

  // ---- dispatch by dtype (f<float>, f<double>, ... under one name), with a fallback for the rest
  m.def("dtype", &dtype_of<float>);
  m.def("dtype", &dtype_of<double>);
  m.def("dtype", &dtype_of<int64_t>);
  m.def("dtype", &dtype_of<tdb::bfloat16>);
  m.def("dtype_or_object", &dtype_of<float>);
  m.def("dtype_or_object", [](py::object) { return std::string("object"); });
  // ---- dispatch by rank (the more specific shape first), device and memory order
  m.def("rank", [](Tensor<const float, tdb::shape<-1, 3>>) { return std::string("rows_of_3"); });
  m.def("rank", [](Tensor<const float, tdb::ndim<1>>) { return std::string("1"); });
  m.def("rank", [](Tensor<const float, tdb::ndim<2>>) { return std::string("2"); });
  m.def("device", [](Tensor<const float, tdb::device::cuda>) { return std::string("cuda"); });
  m.def("device", [](Tensor<const float, tdb::device::cpu>) { return std::string("cpu"); });
  m.def("order", [](Tensor<const float, tdb::ndim<2>, tdb::c_contig>) { return std::string("c_contig"); });
  m.def("order", [](Tensor<const float, tdb::ndim<2>>) { return std::string("strided"); });
  m.def("writable_or_not", [](Tensor<float, tdb::ndim<1>>) { return std::string("writable"); });
  m.def("writable_or_not", [](Tensor<const float, tdb::ndim<1>>) { return std::string("read-only"); });

  // ---- accessors
  m.def("to_list0", [](Tensor<const float, tdb::ndim<0>> x) { return elements(x.view()); });
  m.def("to_list1", [](Tensor<const float, tdb::ndim<1>> x) { return elements(x.view()); });
  m.def("to_list2", [](Tensor<const float, tdb::ndim<2>> x) { return elements(x.view()); });
  m.def("to_list3", [](Tensor<const float, tdb::ndim<3>> x) { return elements(x.view()); });
  m.def("to_list2_i64", [](Tensor<const int64_t, tdb::ndim<2>> x) { return elements(x.view()); });
  m.def("to_list1_c", [](Tensor<const float, tdb::ndim<1>, tdb::c_contig> x) { return elements(x.view()); });
  m.def("to_list3_c", [](Tensor<const float, tdb::ndim<3>, tdb::c_contig> x) { return elements(x.view()); });
  m.def("to_list2_c_strided", [](Tensor<const float, tdb::shape<-1, 3>, tdb::c_contig> x) {
    return elements(x.strided_view());
  });
  m.def("fill2", [](Tensor<float, tdb::ndim<2>> y) { fill(y.view()); });
  m.def("fill3", [](Tensor<float, tdb::ndim<3>> y) { fill(y.view()); });
  m.def("fill3_c", [](Tensor<float, tdb::ndim<3>, tdb::c_contig> y) { fill(y.view()); });
  m.def("view_layout", [](Tensor<const float, tdb::ndim<3>> x) {
    auto a = x.view();
    std::vector<int64_t> out;
    for (int d = 0; d < 3; ++d) out.push_back(a.size(d));
    for (int d = 0; d < 3; ++d) out.push_back(a.stride(d));
    out.push_back(a.numel());
    return out;
  });
  m.def("contiguous_layout", [](Tensor<const float, tdb::ndim<3>, tdb::c_contig> x) {
    auto a = x.view();
    std::vector<int64_t> out;
    for (int d = 0; d < 3; ++d) out.push_back(a.size(d));
    for (int d = 0; d < 3; ++d) out.push_back(a.stride(d));
    out.push_back(a.numel());
    return out;
  });
  // bfloat16 reinterpreted as its raw bits through view<U>() (same size)
  m.def("bf16_bits", [](Tensor<const tdb::bfloat16, tdb::ndim<1>> x) { return elements(x.view<uint16_t>()); });
}
