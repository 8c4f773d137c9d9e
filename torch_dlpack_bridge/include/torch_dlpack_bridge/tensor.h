/*!
 * \file torch_dlpack_bridge/tensor.h
 * \brief Typed tensor parameters for kernels: the element type, rank, fixed sizes, memory order, device type
 *        and writability a kernel accepts, declared in its signature and checked when the argument is taken;
 *        plus accessors (`a(i, j)`) that a CUDA kernel can take by value. Header-only, torch-free, C++17.
 *
 * \code{.cpp}
 * #include <torch_dlpack_bridge/tensor.h>  // or pybind11.h / nanobind.h, which include it
 *
 * using Points =
 *     tdb::Tensor<const float, tdb::shape<-1, 3>, tdb::c_contig, tdb::device::cpu>;
 * using Out = tdb::Tensor<float, tdb::ndim<1>, tdb::device::cpu>;
 *
 * // pybind11 / nanobind: the casters check the constraints before the call
 * void norms(Points p, Out out) {
 *   auto a = p.view();    // tdb::ContiguousView<const float, 2>: a(i, j)
 *   auto o = out.view();  // tdb::StridedView<float, 1>: o(i), strides in elements
 *   for (int64_t i = 0; i < a.size(0); ++i)
 *     o(i) = std::sqrt(a(i, 0) * a(i, 0) + a(i, 1) * a(i, 1) + a(i, 2) * a(i, 2));
 * }
 * \endcode
 *
 * The names follow nanobind's `nb::ndarray<float, nb::shape<-1, 3>, nb::c_contig, nb::device::cuda>`:
 * annotations come in any order after (or before) the element type, each at most once.
 *
 *  - element type: `float`, `double`, `int8_t` ... `uint64_t`, `bool`, `std::complex<float|double>`, or a tag
 *    type for the DLPack types C++ has no name for (`tdb::bfloat16`, `tdb::float16`, `tdb::float8_e4m3fn`,
 *    ...; see below); any other type through a `tdb::dtype_traits` specialization (e.g. `__nv_bfloat16`).
 *    `const T` accepts read-only tensors; a non-const `T` requires a writable one. No element type: any dtype.
 *  - `tdb::shape<-1, 3>`: the rank and the sizes that are fixed (-1: any size). `tdb::ndim<2>`: the rank only.
 *  - `tdb::c_contig` (row-major dense), `tdb::f_contig` (column-major dense), `tdb::any_contig` (the default).
 *  - `tdb::device::cpu`, `tdb::device::cuda`, ... (`tdb::device::type<kDLXXX>` for any DLDeviceType): the
 *    device type; any device id.
 *  - `tdb::ro`: read-only, as `const T` (also for a tensor without an element type).
 *  - `tdb::named<kName>`: the argument's name in the errors tdb raises itself (`static constexpr char kName[] =
 *    "x";`): the raw CPython flavour, and checks in a function's body (`tdb::check_same_shape(x, y)`); otherwise
 *    "tensor". A binding library's own error names parameters from its `py::arg` / `nb::arg`.
 *
 * Checks: a satisfied constraint costs one compare (contiguity: one per dimension, unrolled for a declared
 * rank), all made on the DLTensor the producer filled. A violated one throws `tdb::Error` naming the argument
 * and the expectation, as the `check_*` functions do, in this order: dtype (TypeError), rank, fixed sizes,
 * device type, memory order, writability (ValueError). A pybind11 / nanobind parameter raises none of them: a
 * tensor that it does not take is an argument that does not match, and the binding library tries the next
 * overload, then raises its TypeError listing the overloads (pybind11.h).
 *
 * Writability: DLPack's non-owning exchange path carries no flags, so a torch.Tensor taken through the
 * exchange table is never read-only; a tensor exported with DLPACK_FLAG_BITMASK_READ_ONLY (a read-only NumPy
 * array, through `__dlpack__`) is, and a non-const parameter refuses it. A non-const parameter also refuses a
 * tensor with a dimension of size > 1 and stride 0 (`torch.ones(3).expand(2, 3)`: a kernel writing it would
 * write each element twice), as torch's in-place operations do; other overlapping strides are not detected.
 * Read-only parameters take expanded tensors; a size-1 dimension may have any stride.
 */
#ifndef TORCH_DLPACK_BRIDGE_TENSOR_H_
#define TORCH_DLPACK_BRIDGE_TENSOR_H_

#include <complex>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "torch_dlpack_bridge/consumer.h"

/*! \brief `__host__ __device__` when compiled by nvcc or hipcc (accessors usable in kernels), empty otherwise. */
#if defined(__CUDACC__) || defined(__HIPCC__)
#define TDB_HOST_DEVICE __host__ __device__
#else
#define TDB_HOST_DEVICE
#endif

/*! \cond INTERNAL */
// TDB_NOINLINE keeps the error path (string building) out of the callers of the checks.
#if defined(__GNUC__) || defined(__clang__)
#define TDB_NOINLINE __attribute__((noinline))
#else
#define TDB_NOINLINE
#endif
/*! \endcond */

namespace tdb {

// ---------------------------------------------------------------------------------------------
// Element types
// ---------------------------------------------------------------------------------------------

/*!
 * \brief The DLPack data type of the C++ element type `T`, as `static constexpr DLDataType value`. Defined
 * for the standard arithmetic types, std::complex<float|double> and the tag types below; specialize it for
 * your own types. The second parameter is for partial specializations (enable_if).
 *
 * \code{.cpp}
 * template <>
 * struct tdb::dtype_traits<__nv_bfloat16> {
 *   static constexpr DLDataType value{kDLBfloat, 16, 1};
 * };
 * \endcode
 */
template <class T, class = void>
struct dtype_traits {};

/*! \brief Integer types by size and signedness (int8_t ... uint64_t, char, long long, ...). */
template <class T>
struct dtype_traits<T, std::enable_if_t<std::is_integral<T>::value && !std::is_same<T, bool>::value>> {
  static constexpr DLDataType value{static_cast<uint8_t>(std::is_signed<T>::value ? kDLInt : kDLUInt),
                                    static_cast<uint8_t>(8 * sizeof(T)), 1};  //!< the DLPack data type
};
/*! \brief bool: DLPack's kDLBool, 8 bits. */
template <>
struct dtype_traits<bool> {
  static constexpr DLDataType value{kDLBool, 8, 1};  //!< the DLPack data type
};
/*! \brief IEEE binary32. */
template <>
struct dtype_traits<float> {
  static constexpr DLDataType value{kDLFloat, 32, 1};  //!< the DLPack data type
};
/*! \brief IEEE binary64. */
template <>
struct dtype_traits<double> {
  static constexpr DLDataType value{kDLFloat, 64, 1};  //!< the DLPack data type
};
/*! \brief complex64 (two float32). */
template <>
struct dtype_traits<std::complex<float>> {
  static constexpr DLDataType value{kDLComplex, 64, 1};  //!< the DLPack data type
};
/*! \brief complex128 (two float64). */
template <>
struct dtype_traits<std::complex<double>> {
  static constexpr DLDataType value{kDLComplex, 128, 1};  //!< the DLPack data type
};

/*!
 * \brief Storage-only element types for DLPack dtypes that C++ has no standard type for: each holds the raw
 * bits (`.bits`), has the size of one element, and is trivially copyable, so a kernel can read them or
 * reinterpret the view (`t.view<__nv_bfloat16>()`, same size) as its own arithmetic type.
 */
struct float16 {
  uint16_t bits;  //!< IEEE binary16 bits
};
/*! \brief bfloat16 bits (DLPack kDLBfloat, 16). */
struct bfloat16 {
  uint16_t bits;  //!< bfloat16 bits
};
/*! \brief complex32: two float16 (torch.complex32; DLPack kDLComplex, 32). */
struct complex32 {
  uint16_t real;  //!< float16 bits of the real part
  uint16_t imag;  //!< float16 bits of the imaginary part
};
/*! \brief float8 bits of the DLPack format `Code` (kDLFloat8_e4m3fn, ...); named by the aliases below. */
template <DLDataTypeCode Code>
struct float8 {
  static_assert(Code >= kDLFloat8_e3m4 && Code <= kDLFloat8_e8m0fnu, "tdb::float8: a DLPack float8 code");
  uint8_t bits;  //!< raw bits
};
using float8_e3m4 = float8<kDLFloat8_e3m4>;  //!< float8 e3m4 bits
using float8_e4m3 = float8<kDLFloat8_e4m3>;  //!< float8 e4m3 bits
using float8_e4m3b11fnuz = float8<kDLFloat8_e4m3b11fnuz>;  //!< float8 e4m3b11fnuz bits
using float8_e4m3fn = float8<kDLFloat8_e4m3fn>;  //!< float8 e4m3fn bits (torch.float8_e4m3fn)
using float8_e4m3fnuz = float8<kDLFloat8_e4m3fnuz>;  //!< float8 e4m3fnuz bits (torch.float8_e4m3fnuz)
using float8_e5m2 = float8<kDLFloat8_e5m2>;  //!< float8 e5m2 bits (torch.float8_e5m2)
using float8_e5m2fnuz = float8<kDLFloat8_e5m2fnuz>;  //!< float8 e5m2fnuz bits (torch.float8_e5m2fnuz)
using float8_e8m0fnu = float8<kDLFloat8_e8m0fnu>;  //!< float8 e8m0fnu bits (torch.float8_e8m0fnu)
/*! \brief Two float4 e2m1fn values in one byte (torch.float4_e2m1fn_x2; DLPack code 17, bits 4, lanes 2). */
struct float4_e2m1fn_x2 {
  uint8_t bits;  //!< two packed 4-bit values
};

/*! \cond INTERNAL */
#define TDB_TAG_DTYPE(T, CODE, BITS, LANES)          \
  template <>                                         \
  struct dtype_traits<T> {                            \
    static constexpr DLDataType value{CODE, BITS, LANES}; \
  };
TDB_TAG_DTYPE(float16, kDLFloat, 16, 1)
TDB_TAG_DTYPE(bfloat16, kDLBfloat, 16, 1)
TDB_TAG_DTYPE(complex32, kDLComplex, 32, 1)
TDB_TAG_DTYPE(float4_e2m1fn_x2, kDLFloat4_e2m1fn, 4, 2)
#undef TDB_TAG_DTYPE
template <DLDataTypeCode Code>
struct dtype_traits<float8<Code>> {
  static constexpr DLDataType value{Code, 8, 1};
};
/*! \endcond */

// ---------------------------------------------------------------------------------------------
// Annotations
// ---------------------------------------------------------------------------------------------

/*! \brief The rank and sizes a parameter accepts: `shape<-1, 3>` is any number of rows of 3; -1 is any size. */
template <int64_t... Sizes>
struct shape {
  static_assert(((Sizes >= -1) && ...), "tdb::shape: a size is -1 (any) or >= 0");
};
/*! \brief The rank a parameter accepts, any sizes: `ndim<2>` (same as shape<-1, -1>). */
template <int32_t N>
struct ndim {
  static_assert(N >= 0, "tdb::ndim: the rank is >= 0");
};
/*! \brief Row-major dense (C order; size-1 and empty dimensions' strides are ignored); view() skips strides. */
struct c_contig {};
/*! \brief Column-major dense (Fortran order; size-1 and empty dimensions' strides are ignored). */
struct f_contig {};
/*! \brief Any strides (the default): view() multiplies each index by its stride. */
struct any_contig {};
/*! \brief Read-only: accepts tensors flagged read-only; view() gives const elements. Same as a `const T`. */
struct ro {};
/*!
 * \brief The argument's name in the errors tdb raises itself (checks in a function's body, the raw flavour): a
 * binding library's caster is never told the parameter's name, whose own error names it from `py::arg` /
 * `nb::arg`. `static constexpr char kX[] = "x";` then `tdb::named<kX>`. Default: "tensor".
 */
template <const char* Name>
struct named {};

/*! \brief Device type annotations: `device::cuda` accepts a tensor on any CUDA device. */
namespace device {
/*! \brief A device type annotation for any DLDeviceType. */
template <DLDeviceType T>
struct type {
  static constexpr DLDeviceType value = T;  //!< the required device type
};
using cpu = type<kDLCPU>;                   //!< kDLCPU
using cuda = type<kDLCUDA>;                 //!< kDLCUDA
using cuda_host = type<kDLCUDAHost>;        //!< kDLCUDAHost (pinned memory exported as such)
using cuda_managed = type<kDLCUDAManaged>;  //!< kDLCUDAManaged
using rocm = type<kDLROCM>;                 //!< kDLROCM
using rocm_host = type<kDLROCMHost>;        //!< kDLROCMHost
using metal = type<kDLMetal>;               //!< kDLMetal (data is an MTLBuffer handle: no pointer arithmetic)
using oneapi = type<kDLOneAPI>;             //!< kDLOneAPI (torch's XPU)
using vulkan = type<kDLVulkan>;             //!< kDLVulkan
using opencl = type<kDLOpenCL>;             //!< kDLOpenCL
using ext_dev = type<kDLExtDev>;            //!< kDLExtDev (torch's PrivateUse1 backends)
using maia = type<kDLMAIA>;                 //!< kDLMAIA
}  // namespace device

// ---------------------------------------------------------------------------------------------
// Accessors
// ---------------------------------------------------------------------------------------------

/*!
 * \brief An indexable view of N dimensions with strides in elements: `a(i, j)` is
 * `data[i * stride(0) + j * stride(1)]`. Holds a pointer, N sizes and N strides, nothing owned: trivially
 * copyable, so a CUDA kernel can take it by value (every member is `__host__ __device__` under nvcc). Valid as
 * long as the tensor's memory is (for a parameter: during the call, or until the kernel launched on the
 * producer's stream has run). No bounds checks.
 */
template <class T, int N>
class StridedView {
 public:
  static_assert(N >= 0, "StridedView: N is the rank");
  using value_type = T;                //!< element type (const for read-only tensors)
  static constexpr int rank = N;       //!< number of dimensions

  /*! \brief An empty view (null data); assign a real one before indexing. */
  StridedView() = default;
  /*! \brief A view of `data` with `sizes` and `strides` (N each, copied; strides in elements). */
  TDB_HOST_DEVICE StridedView(T* data, const int64_t* sizes, const int64_t* strides) : data_(data) {
    for (int d = 0; d < N; ++d) {
      sizes_[d] = sizes[d];
      strides_[d] = strides[d];
    }
  }
  /*! \brief The element at index (i0, ..., iN-1): exactly N integer indices. */
  template <class... I>
  TDB_HOST_DEVICE T& operator()(I... i) const {
    static_assert(sizeof...(I) == N, "StridedView: give exactly one index per dimension");
    int64_t offset = 0;
    int d = 0;
    (void)d;
    ((offset += static_cast<int64_t>(i) * strides_[d++]), ...);
    return data_[offset];
  }
  /*! \brief `a[i]` for a one-dimensional view. */
  TDB_HOST_DEVICE T& operator[](int64_t i) const {
    static_assert(N == 1, "StridedView: operator[] is for one-dimensional views; use a(i, j, ...)");
    return data_[i * strides_[0]];
  }
  /*! \brief Size of dimension `d`. */
  TDB_HOST_DEVICE int64_t size(int d) const { return sizes_[d]; }
  /*! \brief Stride of dimension `d`, in elements. */
  TDB_HOST_DEVICE int64_t stride(int d) const { return strides_[d]; }
  /*! \brief Pointer to element (0, ..., 0). */
  TDB_HOST_DEVICE T* data() const { return data_; }
  /*! \brief Number of elements. */
  TDB_HOST_DEVICE int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < N; ++d) n *= sizes_[d];
    return n;
  }

 private:
  T* data_ = nullptr;
  int64_t sizes_[N > 0 ? N : 1] = {};
  int64_t strides_[N > 0 ? N : 1] = {};
};

/*!
 * \brief An indexable view of a row-major dense tensor: `a(i, j)` is `data[i * size(1) + j]`, the last index
 * taken as is (no stride multiply; one-dimensional views are plain pointer indexing). Row strides are computed
 * from the sizes once, when the view is made. Trivially copyable and `__host__ __device__` under nvcc, like
 * StridedView. Made by `Tensor::view()` for `c_contig` parameters; no bounds checks.
 */
template <class T, int N>
class ContiguousView {
 public:
  static_assert(N >= 0, "ContiguousView: N is the rank");
  using value_type = T;           //!< element type (const for read-only tensors)
  static constexpr int rank = N;  //!< number of dimensions

  /*! \brief An empty view (null data); assign a real one before indexing. */
  ContiguousView() = default;
  /*! \brief A view of the dense row-major array at `data` with `sizes` (N, copied). */
  TDB_HOST_DEVICE ContiguousView(T* data, const int64_t* sizes) : data_(data) {
    int64_t step = 1;
    for (int d = N - 1; d >= 0; --d) {
      sizes_[d] = sizes[d];
      strides_[d] = step;
      step *= sizes[d];
    }
  }
  /*! \brief The element at index (i0, ..., iN-1): exactly N integer indices. */
  template <class... I>
  TDB_HOST_DEVICE T& operator()(I... i) const {
    static_assert(sizeof...(I) == N, "ContiguousView: give exactly one index per dimension");
    if constexpr (N == 0) {
      return *data_;
    } else {
      const int64_t index[N] = {static_cast<int64_t>(i)...};
      int64_t offset = index[N - 1];  // the last dimension's stride is 1
      for (int d = 0; d < N - 1; ++d) offset += index[d] * strides_[d];
      return data_[offset];
    }
  }
  /*! \brief `a[i]` for a one-dimensional view. */
  TDB_HOST_DEVICE T& operator[](int64_t i) const {
    static_assert(N == 1, "ContiguousView: operator[] is for one-dimensional views; use a(i, j, ...)");
    return data_[i];
  }
  /*! \brief Size of dimension `d`. */
  TDB_HOST_DEVICE int64_t size(int d) const { return sizes_[d]; }
  /*! \brief Row-major stride of dimension `d`, in elements (the product of the later sizes). */
  TDB_HOST_DEVICE int64_t stride(int d) const { return strides_[d]; }
  /*! \brief Pointer to element (0, ..., 0); the elements follow densely. */
  TDB_HOST_DEVICE T* data() const { return data_; }
  /*! \brief Number of elements. */
  TDB_HOST_DEVICE int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < N; ++d) n *= sizes_[d];
    return n;
  }

 private:
  T* data_ = nullptr;
  int64_t sizes_[N > 0 ? N : 1] = {};
  int64_t strides_[N > 0 ? N : 1] = {};
};

// ---------------------------------------------------------------------------------------------
// The typed parameter
// ---------------------------------------------------------------------------------------------

namespace detail {

template <class T, class = void>
struct is_element : std::false_type {};
template <class T>
struct is_element<T, std::void_t<decltype(dtype_traits<std::remove_const_t<T>>::value)>> : std::true_type {};
template <class T>
struct is_shape : std::false_type {};
template <int64_t... S>
struct is_shape<shape<S...>> : std::true_type {};
template <class T>
struct is_ndim : std::false_type {};
template <int32_t N>
struct is_ndim<ndim<N>> : std::true_type {};
template <class T>
struct is_order : std::bool_constant<std::is_same<T, c_contig>::value || std::is_same<T, f_contig>::value ||
                                     std::is_same<T, any_contig>::value> {};
template <class T>
struct is_device : std::false_type {};
template <DLDeviceType D>
struct is_device<device::type<D>> : std::true_type {};
template <class T>
struct is_ro : std::is_same<T, ro> {};
template <class T>
struct is_named : std::false_type {};
template <const char* Name>
struct is_named<named<Name>> : std::true_type {};

/*! \brief The first of Ts satisfying Pred, or Default. */
template <template <class> class Pred, class Default, class... Ts>
struct first_of {
  using type = Default;
};
template <template <class> class Pred, class Default, class T, class... Ts>
struct first_of<Pred, Default, T, Ts...> {
  using type = std::conditional_t<Pred<T>::value, T, typename first_of<Pred, Default, Ts...>::type>;
};
template <template <class> class Pred, class... Ts>
constexpr int count_of = (0 + ... + (Pred<Ts>::value ? 1 : 0));

template <class T>
struct rank_of {
  static constexpr int32_t value = -1;
};
template <int64_t... S>
struct rank_of<shape<S...>> {
  static constexpr int32_t value = static_cast<int32_t>(sizeof...(S));
};
template <int32_t N>
struct rank_of<ndim<N>> {
  static constexpr int32_t value = N;
};
template <class T>
struct name_of {
  static constexpr const char* value = "tensor";
};
template <const char* Name>
struct name_of<named<Name>> {
  static constexpr const char* value = Name;
};
template <class T>
struct device_of {
  static constexpr int32_t value = -1;  // any
};
template <DLDeviceType D>
struct device_of<device::type<D>> {
  static constexpr int32_t value = static_cast<int32_t>(D);
};

/*! \brief The fixed sizes of a shape<...> annotation (void: none). */
template <class Shape>
struct fixed_sizes {
  static bool ok(const int64_t*) { return true; }
  static void check(const DLTensor&, const char*) {}
  static constexpr int64_t size_at(int) { return -1; }  // ndim<N>: every size is free
};
template <int64_t... S>
struct fixed_sizes<shape<S...>> {
  template <size_t... I>
  static bool ok(const int64_t* sizes, std::index_sequence<I...>) {
    return ((S == -1 || sizes[I] == S) && ...);  // the -1 terms fold away at compile time
  }
  static bool ok(const int64_t* sizes) { return ok(sizes, std::make_index_sequence<sizeof...(S)>{}); }
  static void check(const DLTensor& t, const char* name) { check_shape(t, name, std::initializer_list<int64_t>{S...}); }
  static std::string text() {
    const int64_t sizes[] = {S..., 0};
    return shape_str(static_cast<int32_t>(sizeof...(S)), sizes);
  }
  static constexpr int64_t size_at(int i) {
    const int64_t sizes[] = {S..., 0};
    return sizes[i];
  }
};

/*! \brief One 32-bit compare for a whole DLDataType (code, bits, lanes). */
constexpr uint32_t dtype_key(DLDataType t) {
  return static_cast<uint32_t>(t.code) | (static_cast<uint32_t>(t.bits) << 8) | (static_cast<uint32_t>(t.lanes) << 16);
}

/*! \brief Row-major density, exactly as tdb::is_contiguous says it (size-1 and empty dimensions). */
inline bool c_dense_exact(int32_t n, const int64_t* sizes, const int64_t* strides) {
  int64_t expected = 1;
  for (int32_t d = n - 1; d >= 0; --d) {
    if (sizes[d] == 0) return true;
    if (sizes[d] != 1 && strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}
/*!
 * \brief Row-major density over `n` dimensions (n is a constant for a declared rank: the loop unrolls). The
 * common case, every stride the row-major one, costs one compare per dimension; anything else (size-1 or empty
 * dimensions with other strides) gets the exact test.
 */
inline bool c_dense(int32_t n, const int64_t* sizes, const int64_t* strides) {
  int64_t expected = 1;
  for (int32_t d = n - 1; d >= 0; --d) {
    if (strides[d] != expected) return c_dense_exact(n, sizes, strides);
    expected *= sizes[d];
  }
  return true;
}
/*! \brief Column-major density over `n` dimensions. */
inline bool f_dense(int32_t n, const int64_t* sizes, const int64_t* strides) {
  int64_t expected = 1;
  for (int32_t d = 0; d < n; ++d) {
    if (sizes[d] == 0) return true;
    if (sizes[d] != 1 && strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

/*!
 * \brief True when a dimension of size > 1 has stride 0 (an expanded tensor: several indices reach one element)
 * and the tensor has elements. `n` is a constant for a declared rank: the loop unrolls. The overlap that is cheap
 * to see, as torch's own in-place operations see it; other overlaps (e.g. strides (1, 1) for shape (2, 2)) pass.
 */
inline bool expanded(int32_t n, const int64_t* sizes, const int64_t* strides) {
  bool zero_stride = false;
  for (int32_t d = 0; d < n; ++d) zero_stride |= (sizes[d] > 1) & (strides[d] == 0);
  if (!zero_stride) return false;
  for (int32_t d = 0; d < n; ++d)
    if (sizes[d] == 0) return false;  // no element: nothing written twice
  return true;
}

/*!
 * \brief For the binding casters: runs `fill` (which makes the caster's value); a refusal (any exception: the
 * producer's, a non-tensor's) is dropped with its Python exception, and false lets the binding library try the
 * next overload or raise its own TypeError. Never throws: the casters' load runs inside the binding library.
 */
template <class F>
bool fill_or_refuse(F&& fill) noexcept {
  if (guard([&fill]() -> PyObject* {
        fill();
        return Py_None;  // borrowed: only a success marker
      }))
    return true;
  PyErr_Clear();
  return false;
}

/*! \brief What a Tensor<Ts...> declares, read from its annotations at compile time. */
template <class... Ts>
struct TensorSpec {
  static_assert(((is_element<Ts>::value || is_shape<Ts>::value || is_ndim<Ts>::value || is_order<Ts>::value ||
                  is_device<Ts>::value || is_ro<Ts>::value || is_named<Ts>::value) && ...),
                "tdb::Tensor: every parameter is an element type (with a tdb::dtype_traits), tdb::shape<...>, "
                "tdb::ndim<N>, tdb::c_contig/f_contig/any_contig, tdb::device::..., tdb::ro or tdb::named<...>");
  static_assert(count_of<is_element, Ts...> <= 1, "tdb::Tensor: at most one element type");
  static_assert(count_of<is_shape, Ts...> + count_of<is_ndim, Ts...> <= 1,
                "tdb::Tensor: give the rank once, with tdb::shape<...> or tdb::ndim<N>");
  static_assert(count_of<is_order, Ts...> <= 1, "tdb::Tensor: at most one of c_contig, f_contig, any_contig");
  static_assert(count_of<is_device, Ts...> <= 1, "tdb::Tensor: at most one device annotation");
  static_assert(count_of<is_named, Ts...> <= 1, "tdb::Tensor: at most one tdb::named<...>");

  using Element = typename first_of<is_element, void, Ts...>::type;  // as declared (maybe const); void: any
  using Shape = typename first_of<is_shape, void, Ts...>::type;
  using Order = typename first_of<is_order, any_contig, Ts...>::type;
  static constexpr bool kHasDtype = !std::is_void<Element>::value;
  static constexpr bool kReadOnly = std::is_const<Element>::value || count_of<is_ro, Ts...> > 0;
  static constexpr int32_t kRank = rank_of<typename first_of<is_shape, typename first_of<is_ndim, void, Ts...>::type,
                                                             Ts...>::type>::value;  // -1: any
  static constexpr int32_t kDevice = device_of<typename first_of<is_device, void, Ts...>::type>::value;  // -1: any
  static constexpr const char* kName = name_of<typename first_of<is_named, void, Ts...>::type>::value;
  /*! \brief The element type a view gives (const for a read-only parameter); void when there is none. */
  using Scalar = std::conditional_t<kReadOnly && kHasDtype, const std::remove_const_t<Element>, Element>;
};

template <class Spec, bool HasDtype = Spec::kHasDtype>
struct spec_dtype {
  static constexpr uint32_t key = 0;
};
template <class Spec>
struct spec_dtype<Spec, true> {
  static constexpr DLDataType value = dtype_traits<std::remove_const_t<typename Spec::Element>>::value;
  static constexpr uint32_t key = dtype_key(value);
};

/*! \brief The dtype's name in signatures (compile time): "float32", "bfloat16", "float8_e4m3fn", ... */
constexpr const char* signature_dtype(DLDataType t) {
  if (t.lanes == 2 && t.code == kDLFloat4_e2m1fn && t.bits == 4) return "float4_e2m1fn_x2";
  if (t.lanes != 1) return "dtype";
  switch (t.code) {
    case kDLInt:
      return t.bits == 8 ? "int8" : t.bits == 16 ? "int16" : t.bits == 32 ? "int32" : t.bits == 64 ? "int64" : "int";
    case kDLUInt:
      return t.bits == 8    ? "uint8"
             : t.bits == 16 ? "uint16"
             : t.bits == 32 ? "uint32"
             : t.bits == 64 ? "uint64"
                            : "uint";
    case kDLFloat: return t.bits == 16 ? "float16" : t.bits == 32 ? "float32" : t.bits == 64 ? "float64" : "float";
    case kDLBfloat: return "bfloat16";
    case kDLComplex: return t.bits == 32 ? "complex32" : t.bits == 64 ? "complex64" : t.bits == 128 ? "complex128" : "complex";
    case kDLBool: return "bool";
    case kDLFloat8_e3m4: return "float8_e3m4";
    case kDLFloat8_e4m3: return "float8_e4m3";
    case kDLFloat8_e4m3b11fnuz: return "float8_e4m3b11fnuz";
    case kDLFloat8_e4m3fn: return "float8_e4m3fn";
    case kDLFloat8_e4m3fnuz: return "float8_e4m3fnuz";
    case kDLFloat8_e5m2: return "float8_e5m2";
    case kDLFloat8_e5m2fnuz: return "float8_e5m2fnuz";
    case kDLFloat8_e8m0fnu: return "float8_e8m0fnu";
    default: return "dtype";
  }
}
/*! \brief The device type's name in signatures (compile time), as device_type_name() says it. */
constexpr const char* signature_device(int32_t d) {
  switch (d) {
    case kDLCPU: return "cpu";
    case kDLCUDA: return "cuda";
    case kDLCUDAHost: return "cuda_host";
    case kDLCUDAManaged: return "cuda_managed";
    case kDLROCM: return "rocm";
    case kDLROCMHost: return "rocm_host";
    case kDLMetal: return "metal";
    case kDLOneAPI: return "oneapi";
    case kDLVulkan: return "vulkan";
    case kDLOpenCL: return "opencl";
    case kDLExtDev: return "ext_dev";
    case kDLMAIA: return "maia";
    default: return "device";
  }
}
/*! \brief Writes (or, with out == nullptr, only counts) the characters of a signature at compile time. */
struct SignatureWriter {
  char* out;
  size_t n;
  constexpr void put(const char* s) {
    for (; *s; ++s, ++n)
      if (out) out[n] = *s;
  }
  constexpr void put_size(int64_t v) {
    if (v < 0) return put("None");
    char digits[24] = {};
    int k = 0;
    do {
      digits[k++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v > 0);
    while (k > 0) {
      const char one[2] = {digits[--k], 0};
      put(one);
    }
  }
};
/*! \brief What a tensor parameter is in a signature: a Python type a stub can use (torch_dlpack_bridge/typing.py). */
constexpr const char kSignatureTensor[] = "torch_dlpack_bridge.typing.DLPackTensor";
/*! \brief What a returned tensor is in a signature: the producer's tensor type, which no stub can name. */
constexpr const char kSignatureResult[] = "typing.Any";

/*!
 * \brief The type of a tensor parameter (or, with Output, of a returned tensor) in Python signatures, docstrings
 * and overload errors, as a valid stub annotation (pybind11-stubgen and nanobind's stubgen copy it into the
 * .pyi): "typing.Annotated[torch_dlpack_bridge.typing.DLPackTensor, dict(dtype='float32', shape=(None, 3),
 * order='C', device='cuda', writable=False)]", the constraints in the metadata as nanobind's stubgen writes
 * them for its nb::ndarray; TDB_SIGNATURE_TENSOR alone for a parameter with no constraint. A returned tensor is
 * "typing.Annotated[typing.Any, dict(dtype=..., order='C', ...)]": the producer's tensor type (a torch.Tensor,
 * a paddle.Tensor) is only known at run time.
 */
template <class Spec, bool Output = false>
constexpr void write_signature(SignatureWriter& w) {
  const bool c = Output || std::is_same<typename Spec::Order, c_contig>::value;
  const bool f = std::is_same<typename Spec::Order, f_contig>::value;
  const bool ro = !Output && Spec::kReadOnly;
  if (!Spec::kHasDtype && Spec::kRank < 0 && !c && !f && Spec::kDevice < 0 && !ro) {
    w.put(Output ? kSignatureResult : kSignatureTensor);  // no constraint: the bare type
    return;
  }
  w.put("typing.Annotated[");
  w.put(Output ? kSignatureResult : kSignatureTensor);
  w.put(", dict(");
  const char* sep = "";
  if constexpr (Spec::kHasDtype) {
    w.put("dtype='");
    w.put(signature_dtype(dtype_traits<std::remove_const_t<typename Spec::Element>>::value));
    w.put("'");
    sep = ", ";
  }
  if (Spec::kRank >= 0) {
    w.put(sep);
    w.put("shape=(");
    for (int i = 0; i < Spec::kRank; ++i) {
      if (i) w.put(", ");
      w.put_size(fixed_sizes<typename Spec::Shape>::size_at(i));
    }
    w.put(Spec::kRank == 1 ? ",)" : ")");
    sep = ", ";
  }
  if (c || f) {
    w.put(sep);
    w.put(c ? "order='C'" : "order='F'");
    sep = ", ";
  }
  if (Spec::kDevice >= 0) {
    w.put(sep);
    w.put("device='");
    w.put(signature_device(Spec::kDevice));
    w.put("'");
    sep = ", ";
  }
  if (ro) {
    w.put(sep);
    w.put("writable=False");
  }
  w.put(")]");
}
template <class Spec, bool Output>
constexpr size_t signature_length() {
  SignatureWriter w{nullptr, 0};
  write_signature<Spec, Output>(w);
  return w.n;
}
/*! \brief A NUL-terminated compile-time string of exactly N characters (for the casters' const_name). */
template <size_t N>
struct SignatureText {
  char text[N + 1];
};
template <class Spec, bool Output>
constexpr SignatureText<signature_length<Spec, Output>()> make_signature() {
  SignatureText<signature_length<Spec, Output>()> s{};
  SignatureWriter w{s.text, 0};
  write_signature<Spec, Output>(w);
  s.text[w.n] = 0;
  return s;
}
/*! \brief `Signature<Ts...>::value.text`: the type of a Tensor<Ts...> parameter in Python signatures. */
template <class... Ts>
struct Signature {
  static constexpr auto value = make_signature<TensorSpec<Ts...>, false>();
};
/*! \brief `OutputSignature<Ts...>::value.text`: the type of a returned OwnedTensor<Ts...> (output.h). */
template <class... Ts>
struct OutputSignature {
  static constexpr auto value = make_signature<TensorSpec<Ts...>, true>();
};

/*! \brief Tag for the casters' constructor that leaves the check to them (see Tensor). */
struct unchecked_t {};
constexpr unchecked_t unchecked{};

}  // namespace detail

/*!
 * \brief A tensor parameter with declared constraints: `Tensor<float, shape<-1, 3>, c_contig, device::cuda>`.
 * It is a tdb::TensorView (non-owning, valid during the call; every TensorView accessor and check_* works on
 * it) whose constructor also checks the constraints (see the file comment for the annotations, the order of
 * the checks and the messages), plus typed access: `data()` as `Scalar*`, and `view()`, an indexable
 * accessor of rank `Rank` that can be passed by value to a CUDA kernel.
 *
 * As a pybind11 / nanobind parameter (pybind11.h, nanobind.h), a tensor that violates a constraint is an
 * argument that does not match: the next overload is tried (so `f<float>` and `f<double>` bound under one name
 * dispatch by dtype, and rank- or device-typed overloads by rank or device), and when none takes the call the
 * binding library raises its TypeError listing every overload with its constraints.
 */
template <class... Ts>
class Tensor : public TensorView {
  using Spec = detail::TensorSpec<Ts...>;

 public:
  /*! \brief The element type (const when read-only); void when the parameter accepts any dtype. */
  using Scalar = typename Spec::Scalar;
  /*! \brief The declared rank, or -1 when any rank is accepted. */
  static constexpr int32_t Rank = Spec::kRank;
  /*! \brief True when read-only tensors are accepted (const element type or tdb::ro). */
  static constexpr bool ReadOnly = Spec::kReadOnly;
  /*! \brief True for c_contig parameters: view() is a ContiguousView. */
  static constexpr bool CContig = std::is_same<typename Spec::Order, c_contig>::value;
  /*! \brief True for f_contig parameters. */
  static constexpr bool FContig = std::is_same<typename Spec::Order, f_contig>::value;
  /*! \brief The required device type as an int (a DLDeviceType), or -1 for any device. */
  static constexpr int32_t DeviceType = Spec::kDevice;
  /*! \brief The name errors use unless the constructor is given one: tdb::named<...>, else "tensor". */
  static constexpr const char* DefaultName = Spec::kName;

  /*!
   * \brief Takes `obj` (borrowed) as a TensorView named `name` and checks the constraints. Throws tdb::Error:
   * TypeError for a non-tensor or a wrong dtype, ValueError for another violated constraint, or the
   * producer's own error. For extension functions written against CPython directly (METH_FASTCALL).
   */
  TDB_ALWAYS_INLINE explicit Tensor(PyObject* obj, const char* name = Spec::kName) : TensorView(obj, name) {
    check(*this);
  }
  /*! \brief As above with type(obj)'s table already looked up (nullptr: through `obj.__dlpack__()`). */
  TDB_ALWAYS_INLINE Tensor(PyObject* obj, const DLPackExchangeAPI* api, const char* name) : TensorView(obj, api, name) {
    check(*this);
  }
  /*! \brief Adopts a view and checks the constraints against it (throws tdb::Error naming the view). */
  explicit Tensor(TensorView&& view) : TensorView(std::move(view)) { check(*this); }
  /*! \brief For the binding casters: takes `obj` without checking; they call satisfied_by() / check(). */
  TDB_ALWAYS_INLINE Tensor(detail::unchecked_t, PyObject* obj, const DLPackExchangeAPI* api, const char* name)
      : TensorView(obj, api, name) {}
  /*! \brief Moves the view (and any owning export it holds), as TensorView does. */
  Tensor(Tensor&&) noexcept = default;
  /*! \brief Move assignment, as TensorView's. */
  Tensor& operator=(Tensor&&) noexcept = default;

  /*! \brief True when `v` satisfies every constraint: one compare per constraint, never throws. */
  static TDB_ALWAYS_INLINE bool satisfied_by(const TensorView& v) noexcept {
    const DLTensor& t = v.dl();
    if constexpr (Spec::kHasDtype) {
      if (detail::dtype_key(t.dtype) != detail::spec_dtype<Spec>::key) return false;
    }
    if constexpr (Rank >= 0) {
      if (t.ndim != Rank) return false;
      if (!detail::fixed_sizes<typename Spec::Shape>::ok(t.shape)) return false;
    }
    if constexpr (Spec::kDevice >= 0) {
      if (static_cast<int32_t>(t.device.device_type) != Spec::kDevice) return false;
    }
    if constexpr (CContig) {
      if (!detail::c_dense(Rank >= 0 ? Rank : t.ndim, t.shape, t.strides)) return false;
    }
    if constexpr (FContig) {
      if (!detail::f_dense(Rank >= 0 ? Rank : t.ndim, t.shape, t.strides)) return false;
    }
    if constexpr (!ReadOnly) {
      if (v.read_only()) return false;
      // A dense order has no stride 0 on a dimension of size > 1: known without a look.
      if constexpr (!CContig && !FContig) {
        if (detail::expanded(Rank >= 0 ? Rank : t.ndim, t.shape, t.strides)) return false;
      }
    }
    return true;
  }
  /*! \brief Throws tdb::Error for the first constraint `v` violates (named with v.name()); returns otherwise. */
  static TDB_ALWAYS_INLINE void check(const TensorView& v) {
    if (!satisfied_by(v)) fail(v);
  }
  /*! \brief A readable form of the constraints, e.g. "float32, shape [-1, 3], c_contig, device cuda, writable". */
  static std::string describe() {
    std::string s = Spec::kHasDtype ? dtype_name(spec_dtype()) : std::string("any dtype");
    if constexpr (Rank >= 0) s += rank_text();
    if constexpr (CContig) s += ", c_contig";
    if constexpr (FContig) s += ", f_contig";
    if constexpr (Spec::kDevice >= 0) s += ", device " + device_type_name(static_cast<DLDeviceType>(Spec::kDevice));
    s += ReadOnly ? ", read-only" : ", writable";
    return s;
  }

  using TensorView::data;
  /*! \brief Pointer to the first element (data + byte_offset), typed with the element type. */
  Scalar* data() const { return TensorView::data<Scalar>(); }

  /*!
   * \brief The indexable accessor: a ContiguousView<Scalar, Rank> for a c_contig parameter (no stride multiply
   * on the last index), else a StridedView<Scalar, Rank>. `U` reinterprets the elements as another type of the
   * same size (e.g. `view<__half>()` for a tdb::float16 tensor); const is kept for read-only parameters.
   */
  template <class U = Scalar>
  auto view() const {
    using E = element_as<U>;
    if constexpr (CContig) {
      return ContiguousView<E, Rank>(reinterpret_cast<E*>(TensorView::data<char>()), shape());
    } else {
      return StridedView<E, Rank>(reinterpret_cast<E*>(TensorView::data<char>()), shape(), strides());
    }
  }
  /*! \brief A StridedView whatever the memory order (strides from the tensor). */
  template <class U = Scalar>
  auto strided_view() const {
    using E = element_as<U>;
    return StridedView<E, Rank>(reinterpret_cast<E*>(TensorView::data<char>()), shape(), strides());
  }

 private:
  template <class U>
  struct element_as_impl {
    static_assert(Spec::kHasDtype, "tdb::Tensor::view: declare an element type (e.g. Tensor<float, ...>)");
    static_assert(Rank >= 0, "tdb::Tensor::view: declare the rank (tdb::shape<...> or tdb::ndim<N>)");
    static_assert(!std::is_void<U>::value && sizeof(std::remove_const_t<U>) ==
                                                 sizeof(std::conditional_t<std::is_void<Scalar>::value, char,
                                                                           std::remove_const_t<Scalar>>),
                  "tdb::Tensor::view<U>: U must have the size of the element type");
    using type = std::conditional_t<ReadOnly, const std::remove_const_t<U>, U>;
  };
  template <class U>
  using element_as = typename element_as_impl<U>::type;

  static constexpr DLDataType spec_dtype() {
    if constexpr (Spec::kHasDtype) return detail::spec_dtype<Spec>::value;
    else return DLDataType{0, 0, 0};
  }
  static std::string rank_text() {
    if constexpr (std::is_void<typename Spec::Shape>::value) {
      return ", " + std::to_string(Rank) + " dimension(s)";
    } else {
      return ", shape " + detail::fixed_sizes<typename Spec::Shape>::text();
    }
  }
  /*! \brief Raises the first violated constraint (the slow path, out of line). */
  [[noreturn]] static TDB_NOINLINE void fail(const TensorView& v) {
    const DLTensor& t = v.dl();
    const char* name = v.name();
    if constexpr (Spec::kHasDtype) check_dtype(t, name, spec_dtype());
    if constexpr (Rank >= 0) {
      check_ndim(t, name, Rank);
      detail::fixed_sizes<typename Spec::Shape>::check(t, name);
    }
    if constexpr (Spec::kDevice >= 0) check_device(t, name, static_cast<DLDeviceType>(Spec::kDevice));
    if constexpr (CContig) check_contiguous(t, name);
    if constexpr (FContig) {
      if (!detail::f_dense(t.ndim, t.shape, t.strides))
        throw Error(PyExc_ValueError, detail::arg(name) + "expected a column-major (f_contig) tensor, got strides " +
                                          shape_str(t.ndim, t.strides) + " for shape " + shape_str(t.ndim, t.shape));
    }
    if constexpr (!ReadOnly) {
      // As check_writable() says it; a parameter that only reads declares a const element type (or tdb::ro).
      if (v.read_only()) throw Error(PyExc_ValueError, detail::arg(name) + "is read-only");
      if (detail::expanded(t.ndim, t.shape, t.strides))
        throw Error(PyExc_ValueError, detail::arg(name) + "is written, and more than one index reaches one element "
                                      "(strides " + shape_str(t.ndim, t.strides) + " for shape " +
                                      shape_str(t.ndim, t.shape) + "; an expanded tensor): pass a copy, "
                                      "or declare the parameter read-only (const T or tdb::ro)");
    }
    throw Error(PyExc_RuntimeError, detail::arg(name) + "violates " + describe());  // not reached
  }
};

}  // namespace tdb

#endif  // TORCH_DLPACK_BRIDGE_TENSOR_H_
