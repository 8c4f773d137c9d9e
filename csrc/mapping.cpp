#include "mapping.h"

#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/detail/XPUHooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/FakeGuardImpl.h>

#include <string>
#include <typeinfo>

#include "errors.h"
#include "torch_dlpack_bridge/names.h"

namespace tdb {
namespace {

// torch's own answer (its CUDA hooks are compiled for HIP on ROCm). The hooks come from libtorch_cuda or
// libtorch_hip, which torch loads before any extension, so asking while this library loads is safe.
bool detect_rocm() noexcept {
  try {
    return at::detail::getCUDAHooks().hasROCM();
  } catch (...) {
    return false;
  }
}

// The local XPU index whose global SYCL index is `global_id`, or -1.
int local_xpu_index(int32_t global_id, int count) {
  const auto& hooks = at::detail::getXPUHooks();
  for (int i = 0; i < count; ++i) {
    const c10::Device device(c10::DeviceType::XPU, static_cast<c10::DeviceIndex>(i));
    if (hooks.getGlobalIdxFromDevice(device) == global_id) return i;
  }
  return -1;
}

// The devices torch can reach. Once FakeTensorMode has been entered (torch.compile, torch.export), torch >= 2.10
// swaps the CUDA guard of a CUDA build that sees no GPU for a FakeGuardImpl that reports 8 made-up devices:
// those do not exist. (typeid, not dynamic_cast: the current stream asks on every call.)
int device_count(c10::DeviceType type) {
  const c10::impl::DeviceGuardImplInterface* guard = c10::impl::getDeviceGuardImpl(type);
  if (type == c10::DeviceType::CUDA && typeid(*guard) == typeid(c10::impl::FakeGuardImpl<c10::DeviceType::CUDA>)) {
    return 0;
  }
  return guard->deviceCount();
}

}  // namespace

bool g_cuda_is_rocm = detect_rocm();

int32_t dl_device_id_of(c10::Device device) {
  if (device.type() == c10::DeviceType::XPU) return at::detail::getXPUHooks().getGlobalIdxFromDevice(device);
  return device.index();
}

void refuse_dtype(DLDataType d, ErrorKind kind) {
  // Vector types (lanes != 1) are named apart: torch has none, and a consumer that ignored lanes would
  // read every lane as its own element. (torch's float4_e2m1fn_x2, two 4-bit lanes, is the one exception.)
  const std::string why = d.lanes != 1 && d.code != kDLFloat4_e2m1fn
                              ? " is a vector type; torch has no vector dtypes (only lanes == 1 is imported)"
                              : " has no torch dtype";
  fail(kind, "DLPack dtype (code " + std::to_string(d.code) + ", bits " + std::to_string(d.bits) + ", lanes " +
                 std::to_string(d.lanes) + ") has no torch equivalent: " + dtype_name(d) + why);
}

void refuse_shape(int32_t ndim, const int64_t* shape) {
  if (ndim < 0 || ndim > kMaxDims) {
    fail(ErrorKind::Value, "DLPack ndim " + std::to_string(ndim) + " is outside 0.." + std::to_string(kMaxDims));
  }
  if (ndim > 0 && shape == nullptr) fail(ErrorKind::Value, "DLPack tensor has ndim > 0 and NULL shape");
  int64_t numel = 1;
  for (int32_t i = 0; i < ndim; ++i) {  // the first problem, in order, as checked_numel meets them
    if (shape[i] < 0) fail(ErrorKind::Value, "DLPack shape has a negative size in dim " + std::to_string(i));
    if (__builtin_mul_overflow(numel, shape[i], &numel)) {
      std::string sizes;
      for (int32_t j = 0; j < ndim; ++j) sizes += (j ? ", " : "") + std::to_string(shape[j]);
      fail(ErrorKind::Value, "shape (" + sizes + ") overflows: more elements than torch can address (2**63 - 1 at "
                                                "most)");
    }
  }
  fail(ErrorKind::Value, "DLPack shape refused");  // not reached: called only for a shape with a problem
}

void row_major_strides(int32_t ndim, const int64_t* shape, int64_t* strides) {
  int64_t step = 1;
  for (int32_t i = ndim - 1; i >= 0; --i) {
    strides[i] = step;
    if (shape[i] > 1 && __builtin_mul_overflow(step, shape[i], &step)) {
      fail(ErrorKind::Value, "DLPack tensor extent overflows");
    }
  }
}

c10::Device checked_device(DLDevice d) {
  c10::DeviceType type;
  if (!device_type_of(d.device_type, type)) {
    fail(ErrorKind::Buffer, "DLPack device type " + std::to_string(d.device_type) + " (" +
                                device_type_name(d.device_type) + ") has no torch equivalent");
  }
  if (type == c10::DeviceType::CPU) return c10::Device(type);
  if (!c10::impl::hasDeviceGuardImpl(type)) {
    fail(ErrorKind::Buffer, "this torch has no " + c10::DeviceTypeName(type, true) +
                                " backend (not built in, and no extension registered one)");
  }
  const int count = device_count(type);
  if (type == c10::DeviceType::XPU) {
    const int local = d.device_id < 0 ? -1 : local_xpu_index(d.device_id, count);
    if (local < 0) {
      fail(ErrorKind::Value, "no xpu device has SYCL device index " + std::to_string(d.device_id) +
                                 " (DLPack's oneAPI device_id; torch sees " + std::to_string(count) + " xpu devices)");
    }
    return c10::Device(type, static_cast<c10::DeviceIndex>(local));
  }
  if (d.device_id < 0 || d.device_id >= count) {
    fail(ErrorKind::Value, "no " + c10::DeviceTypeName(type, true) + " device " + std::to_string(d.device_id) +
                               " (torch sees " + std::to_string(count) + ")");
  }
  return c10::Device(type, static_cast<c10::DeviceIndex>(d.device_id));
}

}  // namespace tdb
