// A test module for tests/test_typed_tensor.py: typed tdb::Tensor<...> parameters (torch_dlpack_bridge/tensor.h)
// through the pybind11 caster, or the nanobind caster when compiled with -DTDB_USE_NANOBIND. TDB_MODULE names it.
// Single-overload functions pin each constraint (accepted, refused with its message); overloaded ones pin
// dispatch by dtype, rank, device and memory order; the to_list/fill functions pin the accessors.
#include <complex>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(TDB_USE_NANOBIND)
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <torch_dlpack_bridge/nanobind.h>
namespace py = nanobind;
#define TDB_TEST_MODULE(name, m) NB_MODULE(name, m)
#else
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <torch_dlpack_bridge/pybind11.h>
namespace py = pybind11;
#define TDB_TEST_MODULE(name, m) PYBIND11_MODULE(name, m)
#endif

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

}  // namespace

TDB_TEST_MODULE(TDB_MODULE, m) {
  // ---- element types: each returns the first element's raw bits
  m.def("f32", [](Tensor<float> x) { return first_bits(x); });
  m.def("f64", [](Tensor<double> x) { return first_bits(x); });
  m.def("f16", [](Tensor<tdb::float16> x) { return first_bits(x); });
  m.def("bf16", [](Tensor<tdb::bfloat16> x) { return first_bits(x); });
  m.def("c32", [](Tensor<tdb::complex32> x) { return first_bits(x); });
  m.def("c64", [](Tensor<std::complex<float>> x) { return first_bits(x); });
  m.def("c128", [](Tensor<std::complex<double>> x) { return first_bits(x); });
  m.def("f8e4m3fn", [](Tensor<tdb::float8_e4m3fn> x) { return first_bits(x); });
  m.def("f8e4m3fnuz", [](Tensor<tdb::float8_e4m3fnuz> x) { return first_bits(x); });
  m.def("f8e5m2", [](Tensor<tdb::float8_e5m2> x) { return first_bits(x); });
  m.def("f8e5m2fnuz", [](Tensor<tdb::float8_e5m2fnuz> x) { return first_bits(x); });
  m.def("f8e8m0fnu", [](Tensor<tdb::float8_e8m0fnu> x) { return first_bits(x); });
  m.def("f4e2m1fn_x2", [](Tensor<tdb::float4_e2m1fn_x2> x) { return first_bits(x); });
  m.def("b8", [](Tensor<bool> x) { return first_bits(x); });
  m.def("i8", [](Tensor<int8_t> x) { return first_bits(x); });
  m.def("i16", [](Tensor<int16_t> x) { return first_bits(x); });
  m.def("i32", [](Tensor<int32_t> x) { return first_bits(x); });
  m.def("i64", [](Tensor<int64_t> x) { return first_bits(x); });
  m.def("u8", [](Tensor<uint8_t> x) { return first_bits(x); });
  m.def("u16", [](Tensor<uint16_t> x) { return first_bits(x); });
  m.def("u32", [](Tensor<uint32_t> x) { return first_bits(x); });
  m.def("u64", [](Tensor<uint64_t> x) { return first_bits(x); });
  m.def("any_dtype", [](Tensor<> x) { return tdb::dtype_name(x.dtype()); });

  // ---- rank and sizes
  m.def("rank0", [](Tensor<const float, tdb::shape<>> x) { return x.ndim(); });
  m.def("rank2", [](Tensor<const float, tdb::ndim<2>> x) { return x.ndim(); });
  m.def("rows_of_3", [](Tensor<const float, tdb::shape<-1, 3>> x) { return x.size(0); });
  m.def("fixed_2_any_4", [](Tensor<const float, tdb::shape<2, -1, 4>> x) { return x.size(1); });

  // ---- memory order
  m.def("c_contig", [](Tensor<const float, tdb::c_contig> x) { return x.ndim(); });
  m.def("f_contig", [](Tensor<const float, tdb::f_contig> x) { return x.ndim(); });

  // ---- device type
  m.def("on_cpu", [](Tensor<const float, tdb::device::cpu> x) { return tdb::device_name(x.device()); });
  m.def("on_cuda", [](Tensor<const float, tdb::device::cuda> x) { return tdb::device_name(x.device()); });

  // ---- writability
  m.def("writable", [](Tensor<float> x) { return x.read_only(); });
  m.def("const_elements", [](Tensor<const float> x) { return x.read_only(); });
  m.def("ro_any_dtype", [](Tensor<tdb::ro> x) { return x.read_only(); });

  // ---- names and everything at once
  m.def("named_x", [](Tensor<float, tdb::named<kX>> x) { return std::string(x.name()); });
  m.def("all_of_them", [](Tensor<float, tdb::shape<-1, 3>, tdb::c_contig, tdb::device::cpu, tdb::named<kX>> x) {
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
