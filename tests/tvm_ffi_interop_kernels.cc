// tvm-ffi kernels for tests/test_tvm_ffi_interop.py (compiled there with tvm_ffi.cpp.load_inline).
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>
namespace ffi = tvm::ffi;

// Fills a contiguous float32 tensor in place: writes made by a foreign kernel through the exported pointer.
void fill(ffi::TensorView x, double value) {
  float* p = static_cast<float*>(x.data_ptr());
  for (int64_t i = 0; i < x.numel(); ++i) p[i] = static_cast<float>(value);
}

// Allocates a float32 tensor shaped like `like` through the environment allocator, i.e. the
// managed_tensor_allocator of the caller's table, fills it and returns it.
ffi::Tensor alloc_filled(ffi::TensorView like, double value) {
  ffi::Tensor out = ffi::Tensor::FromEnvAlloc(TVMFFIEnvTensorAlloc, like.shape(), like.dtype(), like.device());
  float* p = static_cast<float*>(out.data_ptr());
  for (int64_t i = 0; i < out.numel(); ++i) p[i] = static_cast<float>(value);
  return out;
}
