// The current work stream of a device, through torch's device-generic guard interface.
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <dlfcn.h>

#include "bridge.h"
#include "errors.h"
#include "mapping.h"

namespace tdb {
namespace {

void* native_handle(const c10::Stream& stream) {
  // torch's MPS backend runs everything on one command queue of its own and offers no raw handle:
  // NULL tells the consumer there is no stream to launch on.
  if (stream.device_type() == c10::DeviceType::MPS) return nullptr;
// TDB_TEST_LEGACY_STREAM_PATH: tests/mock_devices builds this file with the pre-2.11 path on a newer torch.
#if TDB_TORCH_AT_LEAST(2, 11) && !defined(TDB_TEST_LEGACY_STREAM_PATH)
  return stream.native_handle();  // cudaStream_t, hipStream_t, sycl::queue*, or a PrivateUse1 handle
#else
  // Before 2.11 torch has no device-generic raw handle. CUDA's current stream comes from torch's C shim,
  // found at run time (RTLD_NOLOAD: only if torch already loaded it), so one build of this extension
  // serves CPU-only, CUDA and ROCm builds of torch alike. The shim lives in the build's GPU library:
  // libtorch_cuda, or libtorch_hip on ROCm (same function name; it returns the hipStream_t there).
  if (stream.device_type() == c10::DeviceType::CUDA) {
    using GetStream = int32_t (*)(int32_t, void**);
    static const GetStream get_stream = [] {
      void* lib = dlopen(g_cuda_is_rocm ? "libtorch_hip.so" : "libtorch_cuda.so", RTLD_NOLOAD | RTLD_LAZY);
      return lib ? reinterpret_cast<GetStream>(dlsym(lib, "aoti_torch_get_current_cuda_stream")) : nullptr;
    }();
    void* handle = nullptr;
    if (get_stream != nullptr && get_stream(stream.device_index(), &handle) == 0) return handle;
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
