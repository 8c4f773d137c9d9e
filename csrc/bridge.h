// The table's five functions and the helpers they share. Every entry point is noexcept.
#pragma once

#include <ATen/core/Tensor.h>

#include "torch_dlpack_bridge/dlpack.h"

typedef struct _object PyObject;  // as Python.h declares it, without including Python.h here

namespace tdb {

// The process-wide table (lives as long as the process).
extern DLPackExchangeAPI g_exchange_api;

int dltensor_from_py_object_no_sync(void* py_object, DLTensor* out) noexcept;
int managed_tensor_from_py_object_no_sync(void* py_object, DLManagedTensorVersioned** out) noexcept;
int managed_tensor_to_py_object_no_sync(DLManagedTensorVersioned* tensor, void** out_py_object) noexcept;
int managed_tensor_allocator(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
                             void (*set_error)(void*, const char*, const char*)) noexcept;
int current_work_stream(DLDeviceType device_type, int32_t device_id, void** out_stream) noexcept;

// requires_grad of a torch.Tensor or nn.Parameter exactly (1 or 0), as torch's in-place operations read it;
// -1 otherwise (a subclass, not a tensor): the consumer header's fast path for written parameters
// (include/torch_dlpack_bridge/autograd.h). Never raises.
int requires_grad_or_unknown(PyObject* obj) noexcept;

// Bumps the version counter of a torch.Tensor or nn.Parameter exactly as torch's in-place ops do (0); -1 for
// anything else (the consumer header's Python fallback). Needs no GIL: a written parameter's commit, made for
// the chosen overload only (autograd.h). Never raises.
int bump_version_or_unknown(PyObject* obj) noexcept;

// Where requires_grad's common answer and the version counter lie in a torch.Tensor or nn.Parameter object
// (dlpack.h), checked on tensors of this library's own, or nullptr where that failed. Needs the GIL (first call).
const TDBAutogradLayout* autograd_layout() noexcept;

// Owning export of a tensor (throws tdb::Error or c10::Error); shared by the exporter and the allocator.
DLManagedTensorVersioned* export_owning(const at::Tensor& tensor);

// Owning export of `view` (already validated), holding `storage` and its own copy of shape and strides.
DLManagedTensorVersioned* export_owning(c10::Storage storage, const DLTensor& view);

// For the import of a tensor our allocator made (a kernel's new output coming back to Python): when `m` is
// our owning export of a storage that nothing else shares and cannot grow (the allocator's: one reference,
// not resizable) and its data starts at the storage's, that storage, which the import may move into the new
// tensor (no second storage, no deleter chain; m's deleter then frees only m). Otherwise nullptr.
c10::Storage* unshared_allocation(DLManagedTensorVersioned* m) noexcept;

}  // namespace tdb
