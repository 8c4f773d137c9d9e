// Device code over the accessors of torch_dlpack_bridge/tensor.h, for tests/test_typed_tensor.py: compiled with
// nvcc (-c, sm of nvcc's default), never run here. Every accessor kind and rank used by a __global__ kernel taking
// the views by value, and the host side making them from typed parameters.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "torch_dlpack_bridge/tensor.h"

// CUDA's own bfloat16 as an element type, through the customization point.
template <>
struct tdb::dtype_traits<__nv_bfloat16> {
  static constexpr DLDataType value{kDLBfloat, 16, 1};
};

static_assert(std::is_trivially_copyable<tdb::StridedView<const float, 3>>::value, "passed by value to a kernel");
static_assert(std::is_trivially_copyable<tdb::ContiguousView<tdb::bfloat16, 2>>::value, "passed by value to a kernel");

// out(i, j) = sum_k x(i, j, k) * w(k), with x any strides (3-D), w dense (1-D), out dense (2-D).
__global__ void contract(tdb::StridedView<const float, 3> x, tdb::ContiguousView<const float, 1> w,
                         tdb::ContiguousView<float, 2> out) {
  const int64_t i = blockIdx.x, j = threadIdx.x;
  if (i >= out.size(0) || j >= out.size(1)) return;
  float acc = 0;
  for (int64_t k = 0; k < x.size(2); ++k) acc += x(i, j, k) * w[k];
  out(i, j) = acc;
}

// Copies raw bfloat16 bits between a strided 2-D view and a dense one; reads a 0-d scalar.
__global__ void copy_bits(tdb::StridedView<const tdb::bfloat16, 2> src, tdb::ContiguousView<tdb::bfloat16, 2> dst,
                          tdb::StridedView<const float, 0> scale, tdb::StridedView<float, 1> sink) {
  for (int64_t i = 0; i < src.size(0); ++i)
    for (int64_t j = 0; j < src.size(1); ++j) dst(i, j).bits = src(i, j).bits;
  sink[0] = scale() + static_cast<float>(dst.numel() + src.stride(1) + dst.stride(0));
}

// Arithmetic on CUDA's bfloat16: y(i) = x(i) * 2, with x typed by the tag type and viewed as __nv_bfloat16,
// y typed with __nv_bfloat16 directly.
__global__ void twice(tdb::StridedView<const __nv_bfloat16, 1> x, tdb::ContiguousView<__nv_bfloat16, 1> y) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < y.size(0)) y(i) = __float2bfloat16(__bfloat162float(x(i)) * 2.0f);
}

using X = tdb::Tensor<const float, tdb::ndim<3>, tdb::device::cuda>;
using W = tdb::Tensor<const float, tdb::ndim<1>, tdb::c_contig, tdb::device::cuda>;
using Out = tdb::Tensor<float, tdb::ndim<2>, tdb::c_contig, tdb::device::cuda>;
using Src = tdb::Tensor<const tdb::bfloat16, tdb::ndim<2>, tdb::device::cuda>;
using Dst = tdb::Tensor<tdb::bfloat16, tdb::ndim<2>, tdb::c_contig, tdb::device::cuda>;
using Scale = tdb::Tensor<const float, tdb::shape<>, tdb::device::cuda>;
using Sink = tdb::Tensor<float, tdb::ndim<1>, tdb::device::cuda>;
using HalfIn = tdb::Tensor<const tdb::bfloat16, tdb::ndim<1>, tdb::device::cuda>;
using HalfOut = tdb::Tensor<__nv_bfloat16, tdb::ndim<1>, tdb::c_contig, tdb::device::cuda>;

// The host side (never called here): views made from typed parameters, launched by value.
void launch(const X& x, const W& w, const Out& out, const Src& src, const Dst& dst, const Scale& scale,
            const Sink& sink, const HalfIn& hx, const HalfOut& hy, cudaStream_t stream) {
  contract<<<static_cast<unsigned>(out.size(0)), static_cast<unsigned>(out.size(1)), 0, stream>>>(x.view(), w.view(),
                                                                                                   out.view());
  copy_bits<<<1, 1, 0, stream>>>(src.view(), dst.view(), scale.view(), sink.view());
  twice<<<static_cast<unsigned>((hy.size(0) + 255) / 256), 256, 0, stream>>>(hx.view<__nv_bfloat16>(), hy.view());
}
