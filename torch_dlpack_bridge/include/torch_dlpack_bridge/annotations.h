/*!
 * \file torch_dlpack_bridge/annotations.h
 * \brief The annotations of a typed parameter (`tdb::shape`, `tdb::ndim`, `tdb::c_contig`, `tdb::f_contig`,
 *        `tdb::any_contig`, `tdb::device::*`, `tdb::ro`, `tdb::named`) and `detail::TensorSpec`, which reads what
 *        a `Tensor<Ts...>` declares from them at compile time.
 *
 * Included by signature.h and tensor.h (the annotations are documented in tensor.h's overview).
 */
#ifndef TORCH_DLPACK_BRIDGE_ANNOTATIONS_H_
#define TORCH_DLPACK_BRIDGE_ANNOTATIONS_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>

#include "torch_dlpack_bridge/checks.h"
#include "torch_dlpack_bridge/dlpack.h"
#include "torch_dlpack_bridge/dtypes.h"

namespace tdb {

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

}  // namespace detail

}  // namespace tdb

#endif  // TORCH_DLPACK_BRIDGE_ANNOTATIONS_H_
