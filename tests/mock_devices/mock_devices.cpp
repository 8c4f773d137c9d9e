// Stand-ins for hardware the test machines lack, loaded only in a subprocess (it registers device guards
// that would change what the rest of the test session sees):
// - MPS: a guard for one device and tensors whose DataPtr is a made-up handle, never dereferenced, as
//   torch's MPS tensors hold an id<MTLBuffer>;
// - XPU: a guard for two devices and XPU hooks whose global SYCL index is the local index + 5, as if five
//   other SYCL devices (a CPU, other GPUs) came first in sycl::device::get_devices();
// - ROCm before torch 2.11: csrc/stream.cpp built with its pre-2.11 path, with torch's CUDA device type
//   meaning HIP, a CUDA guard for one device, and a stand-in libtorch_hip.so the test loads first.
#include <ATen/detail/XPUHooksInterface.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/extension.h>

#include <utility>

#include "bridge.h"
#include "mapping.h"

namespace {

// Older torch declares getStream/exchangeStream noexcept: an override copies the base's specification.
constexpr bool kGetStreamNoexcept = noexcept(
    std::declval<const c10::impl::DeviceGuardImplInterface&>().getStream(std::declval<c10::Device>()));
constexpr bool kExchangeStreamNoexcept = noexcept(
    std::declval<const c10::impl::DeviceGuardImplInterface&>().exchangeStream(std::declval<c10::Stream>()));

// A device type with `count` devices, each with only its default stream; no native stream handles.
struct FakeGuard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType kind;
  c10::DeviceIndex count;
  FakeGuard(c10::DeviceType k, c10::DeviceIndex n) : kind(k), count(n) {}
  c10::DeviceType type() const override { return kind; }
  c10::Device exchangeDevice(c10::Device) const override { return c10::Device(kind, 0); }
  c10::Device getDevice() const override { return c10::Device(kind, 0); }
  void setDevice(c10::Device) const override {}
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device d) const noexcept(kGetStreamNoexcept) override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream exchangeStream(c10::Stream s) const noexcept(kExchangeStreamNoexcept) override { return s; }
  c10::DeviceIndex deviceCount() const noexcept override { return count; }
};

void register_guard(c10::DeviceType kind, int count) {
  static FakeGuard* guards[static_cast<int>(c10::DeviceType::COMPILE_TIME_MAX_DEVICE_TYPES)] = {};
  auto& slot = guards[static_cast<int>(kind)];
  if (slot == nullptr) slot = new FakeGuard(kind, static_cast<c10::DeviceIndex>(count));
  c10::impl::DeviceGuardImplRegistrar(kind, slot);
}

// A float32 tensor on `device` over `nbytes` of storage at `data` (not owned, never read).
at::Tensor fake_tensor(const std::string& device, int64_t data, int64_t nbytes, std::vector<int64_t> sizes,
                       std::vector<int64_t> strides, int64_t storage_offset) {
  const c10::Device dev(device);
  c10::DataPtr ptr(reinterpret_cast<void*>(data), nullptr, [](void*) {}, dev);
  c10::Storage storage(c10::Storage::use_byte_size_t(), static_cast<size_t>(nbytes), std::move(ptr), nullptr,
                       false);
  auto keys = c10::DispatchKeySet(c10::computeDispatchKey(c10::kFloat, c10::kStrided, dev));
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), keys,
                                                          c10::scalarTypeToTypeMeta(c10::kFloat));
  t.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides);
  t.unsafeGetTensorImpl()->set_storage_offset(storage_offset);
  return t;
}

// current_work_stream of this build of csrc/stream.cpp (the pre-2.11 path); a Python exception on failure.
int64_t legacy_current_stream(int device_type, int device_id) {
  void* stream = nullptr;
  if (tdb::current_work_stream(static_cast<DLDeviceType>(device_type), device_id, &stream) != 0) {
    throw pybind11::error_already_set();
  }
  return reinterpret_cast<int64_t>(stream);
}

}  // namespace

// torch creates its XPU hooks from the registry under the key "XPUHooks" (the class name) on first use.
namespace at {
namespace {
struct XPUHooks final : XPUHooksInterface {
  template <class... Args>
  explicit XPUHooks(Args&&...) {}
  bool hasXPU() const override { return true; }
  int32_t getGlobalIdxFromDevice(const Device& device) const override { return device.index() + 5; }
};
REGISTER_XPU_HOOKS(XPUHooks);
}  // namespace
}  // namespace at

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("register_guard", [](const std::string& type, int count) {
    register_guard(c10::Device(type + ":0").type(), count);
  });
  m.def("fake_tensor", &fake_tensor);
  m.def("set_cuda_is_rocm", [](bool rocm) { tdb::g_cuda_is_rocm = rocm; });
  m.def("legacy_current_stream", &legacy_current_stream);
}
