// The current work stream of a device, through torch's device-generic guard interface.
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "bridge.h"
#include "errors.h"
#include "mapping.h"

// Before torch 2.11 there is no device-generic raw stream handle. tests/mock_devices builds this file with that
// older path on a newer torch (TDB_TEST_LEGACY_STREAM_PATH).
#if !TDB_TORCH_AT_LEAST(2, 11) || defined(TDB_TEST_LEGACY_STREAM_PATH)
#define TDB_LEGACY_STREAM_PATH 1
#else
#define TDB_LEGACY_STREAM_PATH 0
#endif

#if TDB_LEGACY_STREAM_PATH
// torch's C shim for the current stream, in the build's GPU library: libtorch_cuda, or libtorch_hip on ROCm
// (same function name; it returns the hipStream_t there). A weak reference: it resolves to whichever of them
// is in the process when this library loads (libtorch_python, which this library links, depends on it in GPU
// builds of torch) and is NULL in CPU-only builds, so one build serves all three. dlopen/dlsym would do the
// same at the price of glibc 2.34 symbol versions.
extern "C" __attribute__((weak)) int32_t aoti_torch_get_current_cuda_stream(int32_t device_index, void** ret_stream);
#endif

namespace tdb {
namespace {

void* native_handle(const c10::Stream& stream) {
  // torch's MPS backend runs everything on one command queue of its own and offers no raw handle:
  // NULL tells the consumer there is no stream to launch on.
  if (stream.device_type() == c10::DeviceType::MPS) return nullptr;
#if !TDB_LEGACY_STREAM_PATH
  return stream.native_handle();  // cudaStream_t, hipStream_t, sycl::queue*, or a PrivateUse1 handle
#else
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
