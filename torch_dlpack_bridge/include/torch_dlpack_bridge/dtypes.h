/*!
 * \file torch_dlpack_bridge/dtypes.h
 * \brief Element types: `tdb::dtype_traits<T>` (the DLPack data type of a C++ element type) and the
 *        storage-only tag types for the DLPack types C++ has no name for (`tdb::float16`, `tdb::bfloat16`,
 *        `tdb::float8_e4m3fn`, ...). Torch-free, Python-free.
 *
 * Included by annotations.h (tensor.h includes it for typed parameters).
 */
#ifndef TORCH_DLPACK_BRIDGE_DTYPES_H_
#define TORCH_DLPACK_BRIDGE_DTYPES_H_

#include <complex>
#include <cstdint>
#include <type_traits>

#include "torch_dlpack_bridge/dlpack.h"

namespace tdb {

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

}  // namespace tdb

#endif  // TORCH_DLPACK_BRIDGE_DTYPES_H_
