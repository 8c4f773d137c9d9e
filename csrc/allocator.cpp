// Allocation through torch's allocator for the prototype's device (the caching allocator on CUDA).
#include <c10/core/CPUAllocator.h>
#include <ATen/ops/empty.h>

#include <string>

#include "bridge.h"
#include "errors.h"
#include "mapping.h"
#include "torch_dlpack_bridge/names.h"

namespace tdb {
namespace {

// torch's CPU allocator reports exhaustion as a plain c10::Error; to a consumer it is a MemoryError.
c10::Storage allocate_cpu_storage(size_t bytes) {
  try {
    return c10::Storage(c10::Storage::use_byte_size_t(), bytes, c10::GetCPUAllocator(), /*resizable=*/false);
  } catch (const c10::Error& e) {
    fail(ErrorKind::Memory, e.what_without_backtrace());
  }
}

// Page-locked host memory from torch's pinned allocator (the CUDA or HIP caching host allocator), labelled
// as asked. Only the kind this torch's GPU runtime provides is offered, and only where it has a device.
DLManagedTensorVersioned* allocate_pinned(const DLTensor& prototype, c10::IntArrayRef shape,
                                          c10::ScalarType scalar_type) {
  const bool rocm_host = prototype.device.device_type == kDLROCMHost;
  if (rocm_host != g_cuda_is_rocm) {
    fail(ErrorKind::Buffer, std::string("this torch cannot allocate ") +
                                (rocm_host ? "ROCm pinned host memory (kDLROCMHost): it is not a ROCm build"
                                           : "CUDA pinned host memory (kDLCUDAHost): it is a ROCm build"));
  }
  // Same checks, and errors, as for device 0 of that GPU runtime: no backend, or no device.
  device_of({rocm_host ? kDLROCM : kDLCUDA, 0});
  at::Tensor host = at::empty(shape, at::TensorOptions().dtype(scalar_type).pinned_memory(true));
  DLManagedTensorVersioned* m = export_owning(host);
  m->dl_tensor.device = {prototype.device.device_type, 0};
  return m;
}

// The sizes, not the prototype: a consumer's message puts its argument's name before this ("output: ...").
[[noreturn]] void refuse_byte_size(int64_t numel, DLDataType dtype, size_t element_size) {
  unsigned __int128 bytes = static_cast<unsigned __int128>(numel) * element_size;  // numel < 2**63: no overflow
  std::string digits;
  do {
    digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(bytes % 10)));
    bytes /= 10;
  } while (bytes != 0);
  fail(ErrorKind::Value, std::to_string(numel) + " elements of " + dtype_name(dtype) + " (" + digits +
                             " bytes) is more than torch can address (2**63 - 1 bytes at most)");
}

DLManagedTensorVersioned* allocate_like(const DLTensor& prototype) {
  const int64_t numel = checked_numel(prototype.ndim, prototype.shape);
  const c10::ScalarType scalar_type = torch_dtype_of(prototype.dtype, ErrorKind::Value);
  int64_t bytes;
  if (__builtin_mul_overflow(numel, static_cast<int64_t>(c10::elementSize(scalar_type)), &bytes)) {
    refuse_byte_size(numel, prototype.dtype, c10::elementSize(scalar_type));
  }
  const c10::IntArrayRef shape(prototype.shape, static_cast<size_t>(prototype.ndim));
  const int32_t kind = prototype.device.device_type;
  if (kind == kDLCUDAManaged) {
    fail(ErrorKind::Buffer, "torch has no allocator for CUDA managed (unified) memory (kDLCUDAManaged)");
  }
  if (kind == kDLCUDAHost || kind == kDLROCMHost) return allocate_pinned(prototype, shape, scalar_type);
  const c10::Device device = device_of(prototype.device);
  if (!device.is_cpu()) {
    // Other devices go through the dispatcher, which sets their device guard for their allocator.
    return export_owning(at::empty(shape, at::TensorOptions().dtype(scalar_type).device(device)));
  }
  // On CPU a storage from torch's CPU allocator is all a consumer needs: no TensorImpl is built and torn
  // down (about a third of the call).
  c10::Storage storage = allocate_cpu_storage(static_cast<size_t>(bytes));
  int64_t strides[kMaxDims];
  row_major_strides(prototype.ndim, prototype.shape, strides);
  DLTensor view;
  view.data = numel == 0 ? nullptr : storage.mutable_data();
  view.device = {kDLCPU, 0};
  view.ndim = prototype.ndim;
  view.dtype = dl_dtype_of(scalar_type);
  view.shape = prototype.shape;
  view.strides = strides;
  view.byte_offset = 0;
  return export_owning(std::move(storage), view);
}

}  // namespace

// Never touches Python, so a consumer may call it without the GIL (SetError is the consumer's business).
int managed_tensor_allocator(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
                             void (*set_error)(void*, const char*, const char*)) noexcept {
  try {
    if (out == nullptr) fail(ErrorKind::Value, "out must not be NULL");
    *out = nullptr;
    if (prototype == nullptr) fail(ErrorKind::Value, "prototype must not be NULL");
    *out = allocate_like(*prototype);
    return 0;
  } catch (...) {
    std::string message;
    const ErrorKind kind = classify_current_exception(message);
    if (set_error != nullptr) set_error(error_ctx, error_kind_name(kind), message.c_str());
    return -1;
  }
}

}  // namespace tdb
