// Allocation through torch's allocator for the prototype's device (the caching allocator on CUDA).
#include <c10/core/CPUAllocator.h>
#include <ATen/ops/empty.h>

#include "bridge.h"
#include "errors.h"
#include "mapping.h"

namespace tdb {
namespace {

DLManagedTensorVersioned* allocate_like(const DLTensor& prototype) {
  const int64_t numel = checked_numel(prototype.ndim, prototype.shape);
  const c10::ScalarType scalar_type = torch_dtype_of(prototype.dtype, ErrorKind::Value);
  int64_t bytes;
  if (__builtin_mul_overflow(numel, static_cast<int64_t>(c10::elementSize(scalar_type)), &bytes)) {
    fail(ErrorKind::Value, "prototype byte size overflows");
  }
  const c10::IntArrayRef shape(prototype.shape, static_cast<size_t>(prototype.ndim));
  const c10::Device device = device_of(prototype.device);
  if (!device.is_cpu()) {
    // Other devices go through the dispatcher, which sets their device guard for their allocator.
    return export_owning(at::empty(shape, at::TensorOptions().dtype(scalar_type).device(device)));
  }
  // On CPU a storage from torch's CPU allocator is all a consumer needs: no TensorImpl is built and torn
  // down (about a third of the call).
  c10::Storage storage(c10::Storage::use_byte_size_t(), static_cast<size_t>(bytes), c10::GetCPUAllocator(),
                       /*resizable=*/false);
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
