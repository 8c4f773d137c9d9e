// Allocation through torch's allocator for the prototype's device (the caching allocator on CUDA).
#include <ATen/EmptyTensor.h>
#include <ATen/ops/empty.h>

#include "bridge.h"
#include "errors.h"
#include "mapping.h"

namespace tdb {
namespace {

at::Tensor allocate_like(const DLTensor& prototype) {
  const int64_t numel = checked_numel(prototype.ndim, prototype.shape);
  const c10::ScalarType scalar_type = torch_dtype_of(prototype.dtype, ErrorKind::Value);
  int64_t bytes;
  if (__builtin_mul_overflow(numel, static_cast<int64_t>(c10::elementSize(scalar_type)), &bytes)) {
    fail(ErrorKind::Value, "prototype byte size overflows");
  }
  const c10::IntArrayRef shape(prototype.shape, static_cast<size_t>(prototype.ndim));
  const c10::Device device = device_of(prototype.device);
  // CPU skips the dispatcher (about a third of the call); other devices need it for their device guard.
  if (device.is_cpu()) return at::detail::empty_cpu(shape, scalar_type);
  return at::empty(shape, at::TensorOptions().dtype(scalar_type).device(device));
}

}  // namespace

// Never touches Python, so a consumer may call it without the GIL (SetError is the consumer's business).
int managed_tensor_allocator(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
                             void (*set_error)(void*, const char*, const char*)) noexcept {
  try {
    if (out == nullptr) fail(ErrorKind::Value, "out must not be NULL");
    *out = nullptr;
    if (prototype == nullptr) fail(ErrorKind::Value, "prototype must not be NULL");
    *out = export_owning(allocate_like(*prototype));
    return 0;
  } catch (...) {
    std::string message;
    const ErrorKind kind = classify_current_exception(message);
    if (set_error != nullptr) set_error(error_ctx, error_kind_name(kind), message.c_str());
    return -1;
  }
}

}  // namespace tdb
