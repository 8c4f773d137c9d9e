// The current work stream of a device, through torch's device-generic guard interface.
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "bridge.h"
#include "errors.h"
#include "mapping.h"

#if !TDB_TORCH_AT_LEAST(2, 11)
// torch's C shim for CUDA's current stream (libtorch_cuda; on ROCm builds libtorch_hip, same name). A weak
// reference: it resolves when the library is in this process (libtorch_python, which this library links,
// depends on it in GPU builds of torch) and is NULL in CPU-only builds, so one build serves both. dlsym would
// do the same, at the price of glibc 2.34 symbol versions.
extern "C" __attribute__((weak)) int32_t aoti_torch_get_current_cuda_stream(int32_t device_index, void** ret_stream);
#endif

namespace tdb {
namespace {

void* native_handle(const c10::Stream& stream) {
  // torch's MPS backend runs everything on one command queue of its own and offers no raw handle:
  // NULL tells the consumer there is no stream to launch on.
  if (stream.device_type() == c10::DeviceType::MPS) return nullptr;
#if TDB_TORCH_AT_LEAST(2, 11)
  return stream.native_handle();  // cudaStream_t, hipStream_t, sycl::queue*, or a PrivateUse1 handle
#else
  // Before 2.11 torch has no device-generic raw handle: CUDA's (and HIP's) comes from torch's C shim.
  if (stream.device_type() == c10::DeviceType::CUDA && aoti_torch_get_current_cuda_stream != nullptr) {
    void* handle = nullptr;
    if (aoti_torch_get_current_cuda_stream(stream.device_index(), &handle) == 0) return handle;
  }
  fail(ErrorKind::Runtime, "this torch (< 2.11) offers no raw stream handle for " +
                               c10::DeviceTypeName(stream.device_type(), true) + " devices");
#endif
}

}  // namespace

int current_work_stream(DLDeviceType device_type, int32_t device_id, void** out_stream) noexcept {
  if (C10_UNLIKELY(out_stream == nullptr)) return raise_python(ErrorKind::Value, "out_current_stream must not be NULL");
  *out_stream = nullptr;
  if (device_type == kDLCPU || device_type == kDLCUDAHost || device_type == kDLROCMHost) return 0;
  return guarded([&] {
    // device_of checks the id against deviceCount() first: on older torch getStream is noexcept and an
    // unknown device would terminate the process instead of throwing.
    const c10::Device device = device_of({device_type, device_id});
    if (device.is_cpu()) return;
    *out_stream = native_handle(c10::impl::getDeviceGuardImpl(device.type())->getStream(device));
  });
}

}  // namespace tdb
