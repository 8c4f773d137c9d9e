/*!
 * \file torch_dlpack_bridge/signature.h
 * \brief The type of a typed parameter (or returned tensor) in Python signatures, docstrings and stubs,
 *        written at compile time from its annotations: ``typing.Annotated[torch_dlpack_bridge.typing.DLPackTensor,
 *        dict(dtype='float32', shape=(None, 3), ...)]``.
 *
 * Included by tensor.h; the binding headers' casters use `detail::Signature` and `detail::OutputSignature`.
 */
#ifndef TORCH_DLPACK_BRIDGE_SIGNATURE_H_
#define TORCH_DLPACK_BRIDGE_SIGNATURE_H_

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "torch_dlpack_bridge/annotations.h"
#include "torch_dlpack_bridge/dlpack.h"
#include "torch_dlpack_bridge/dtypes.h"

namespace tdb {

namespace detail {

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
/*! \brief A parameter of one dtype: DLPackTensorOf[typing.Literal['float32']], a type of its own per dtype, so that
 *  overloads on dtype (Tensor<float> / Tensor<double>) differ in type, not only in metadata, which type checkers
 *  ignore (mypy: "signature 2 will never be matched"). */
constexpr const char kSignatureTensorOf[] = "torch_dlpack_bridge.typing.DLPackTensorOf[typing.Literal['";
/*! \brief What a returned tensor is in a signature: the producer's tensor type, which no stub can name. */
constexpr const char kSignatureResult[] = "typing.Any";

/*!
 * \brief The type of a tensor parameter (or, with Output, of a returned tensor) in Python signatures, docstrings
 * and overload errors, as a valid stub annotation (pybind11-stubgen and nanobind's stubgen copy it into the
 * .pyi): "typing.Annotated[torch_dlpack_bridge.typing.DLPackTensorOf[typing.Literal['float32']],
 * dict(dtype='float32', shape=(None, 3), order='C', device='cuda', writable=False)]", the constraints in the
 * metadata as nanobind's stubgen writes them for its nb::ndarray (the dtype in the type too: kSignatureTensorOf).
 * A parameter always says whether it is written (writable=True: it refuses read-only and expanded tensors;
 * writable=False: it takes them), so even Tensor<> is annotated. A returned tensor is
 * "typing.Annotated[typing.Any, dict(dtype=..., order='C', ...)]": the producer's tensor type (a torch.Tensor,
 * a paddle.Tensor) is only known at run time.
 */
template <class Spec, bool Output = false>
constexpr void write_signature(SignatureWriter& w) {
  const bool c = Output || std::is_same<typename Spec::Order, c_contig>::value;
  const bool f = std::is_same<typename Spec::Order, f_contig>::value;
  w.put("typing.Annotated[");
  if constexpr (!Output && Spec::kHasDtype) {
    w.put(kSignatureTensorOf);
    w.put(signature_dtype(dtype_traits<std::remove_const_t<typename Spec::Element>>::value));
    w.put("']]");
  } else {
    w.put(Output ? kSignatureResult : kSignatureTensor);
  }
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
  if (!Output) {  // an output is always written, by the kernel that made it: nothing for a caller to know
    w.put(sep);
    w.put(Spec::kReadOnly ? "writable=False" : "writable=True");
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

}  // namespace detail

}  // namespace tdb

#endif  // TORCH_DLPACK_BRIDGE_SIGNATURE_H_
