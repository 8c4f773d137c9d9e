#include "mapping.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <string>

#include "errors.h"

namespace tdb {

bool g_cuda_is_rocm = false;

c10::ScalarType torch_dtype_of(DLDataType d, ErrorKind kind) {
  c10::ScalarType t;
  if (!scalar_type_of(d, t)) {
    fail(kind, "DLPack dtype (code " + std::to_string(d.code) + ", bits " +
                                           std::to_string(d.bits) + ", lanes " + std::to_string(d.lanes) +
                                           ") has no torch equivalent");
  }
  return t;
}

int64_t checked_numel(int32_t ndim, const int64_t* shape) {
  if (ndim < 0 || ndim > kMaxDims) {
    fail(ErrorKind::Value, "DLPack ndim " + std::to_string(ndim) + " is outside 0.." + std::to_string(kMaxDims));
  }
  if (ndim > 0 && shape == nullptr) fail(ErrorKind::Value, "DLPack tensor has ndim > 0 and NULL shape");
  int64_t numel = 1;
  for (int32_t i = 0; i < ndim; ++i) {
    if (shape[i] < 0) fail(ErrorKind::Value, "DLPack shape has a negative size in dim " + std::to_string(i));
    if (__builtin_mul_overflow(numel, shape[i], &numel)) fail(ErrorKind::Value, "DLPack tensor size overflows");
  }
  return numel;
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

c10::Device device_of(DLDevice d) {
  c10::DeviceType type;
  if (!device_type_of(d.device_type, type)) {
    fail(ErrorKind::Buffer, "DLPack device type " + std::to_string(d.device_type) + " has no torch equivalent");
  }
  if (type == c10::DeviceType::CPU) return c10::Device(type);
  if (!c10::impl::hasDeviceGuardImpl(type)) {
    fail(ErrorKind::Buffer, "this torch has no " + c10::DeviceTypeName(type, true) +
                                " backend (not built in, and no extension registered one)");
  }
  const int count = c10::impl::getDeviceGuardImpl(type)->deviceCount();
  if (d.device_id < 0 || d.device_id >= count) {
    fail(ErrorKind::Value, "no " + c10::DeviceTypeName(type, true) + " device " + std::to_string(d.device_id) +
                               " (torch sees " + std::to_string(count) + ")");
  }
  return c10::Device(type, static_cast<c10::DeviceIndex>(d.device_id));
}

}  // namespace tdb
