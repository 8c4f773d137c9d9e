// A minimal PrivateUse1 backend used only by the tests of torch_dlpack_bridge.
//
// Two "devices" whose memory is ordinary host memory. What it provides:
//   * a device guard with a thread-local current device and, per device, a
//     thread-local current stream; streams are real objects living in a static
//     table, and the native handle of a stream is the address of its entry;
//   * an allocator (aligned host memory) that counts live and total allocations;
//   * hooks (so torch.accelerator and lazy-init paths work);
//   * aten kernels for factories, copies, fill/zero, views, resize_ and set_,
//     plus a boxed CPU fallback for every other operator.
//
// Built at test time by tests/privateuse1_backend/__init__.py.

#include <ATen/EmptyTensor.h>
#include <ATen/InferSize.h>
#include <ATen/TensorUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/from_blob.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#if __has_include(<torch/headeronly/version.h>)
#include <torch/headeronly/version.h>
#else
#include <torch/version.h>
#endif

#include <pybind11/pybind11.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <utility>

// The torch we compile against, major.minor compared as a pair (as in csrc/mapping.h).
#define TDB_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace tdb {

constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;
constexpr c10::DeviceIndex kNumDevices = 2;
constexpr std::int64_t kMaxStreamsPerDevice = 1 << 20;
constexpr std::size_t kAlignment = 64;

// ---------------------------------------------------------------------------
// Device state
// ---------------------------------------------------------------------------

thread_local c10::DeviceIndex tl_current_device = 0;
// Current stream id per device for this thread; 0 is the default stream.
thread_local std::array<c10::StreamId, kNumDevices> tl_current_stream{};

void check_index(c10::DeviceIndex index) {
  TORCH_CHECK_INDEX(
      index >= 0 && index < kNumDevices,
      "tdbdev: device index ", static_cast<int>(index),
      " out of range (device count is ", static_cast<int>(kNumDevices), ")");
}

// Resolve an index of -1 ("current") and validate.
c10::DeviceIndex resolve_index(c10::DeviceIndex index) {
  if (index < 0) {
    index = tl_current_device;
  }
  check_index(index);
  return index;
}

c10::Device resolve_device(c10::Device device) {
  TORCH_CHECK(device.type() == kType, "tdbdev: expected a PrivateUse1 device, got ", device);
  return c10::Device(kType, resolve_index(device.index()));
}

// ---------------------------------------------------------------------------
// Streams: one entry per (device, stream id) in a table that never shrinks.
// ---------------------------------------------------------------------------

struct StreamEntry {
  std::uint64_t magic;
  c10::DeviceIndex device;
  c10::StreamId id;
};
constexpr std::uint64_t kStreamMagic = 0x7464627374726d00ULL;  // "tdbstrm"

class StreamTable {
 public:
  StreamTable() {
    for (c10::DeviceIndex d = 0; d < kNumDevices; ++d) {
      entries_[d].push_back(StreamEntry{kStreamMagic, d, 0});
    }
  }

  c10::StreamId create(c10::DeviceIndex d) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& list = entries_[d];
    auto id = static_cast<c10::StreamId>(list.size());
    TORCH_CHECK(id < kMaxStreamsPerDevice, "tdbdev: too many streams on device ", static_cast<int>(d));
    list.push_back(StreamEntry{kStreamMagic, d, id});
    return id;
  }

  // std::deque never moves existing elements on push_back, so entry addresses
  // are stable for the life of the process.
  StreamEntry* find(c10::DeviceIndex d, c10::StreamId id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& list = entries_[d];
    TORCH_CHECK(
        id >= 0 && id < static_cast<c10::StreamId>(list.size()),
        "tdbdev: unknown stream id ", id, " on device ", static_cast<int>(d));
    return &list[static_cast<std::size_t>(id)];
  }

  std::int64_t count(c10::DeviceIndex d) {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<std::int64_t>(entries_[d].size());
  }

 private:
  std::mutex mu_;
  std::array<std::deque<StreamEntry>, kNumDevices> entries_;
};

StreamTable& streams() {
  static auto* table = new StreamTable();  // intentionally leaked
  return *table;
}

// The native handle of a stream: the address of its table entry. The Python helpers use this directly, so
// they work on every torch; the guard also reports it through getStreamNativeHandle where torch has that.
void* stream_native_handle(const c10::Stream& s) {
  auto dev = resolve_device(s.device());
  return static_cast<void*>(streams().find(dev.index(), s.id()));
}

// ---------------------------------------------------------------------------
// Events (work is synchronous, so an event only remembers when it was recorded)
// ---------------------------------------------------------------------------

struct Event {
  c10::DeviceIndex device;
  c10::StreamId stream;
  bool recorded;
  std::chrono::steady_clock::time_point when;
};

// ---------------------------------------------------------------------------
// Device guard
// ---------------------------------------------------------------------------

// Older torch (2.4 among them) declares getStream and exchangeStream noexcept; newer torch lets them throw.
// An override may not be looser than the function it overrides, so ours copies the base's specification.
// (With noexcept, an invalid device or stream id terminates the process: the bridge checks the device id
// against deviceCount() before it asks, and the Python helpers below validate ids first.)
constexpr bool kGetStreamNoexcept = noexcept(
    std::declval<const c10::impl::DeviceGuardImplInterface&>().getStream(std::declval<c10::Device>()));
constexpr bool kExchangeStreamNoexcept = noexcept(
    std::declval<const c10::impl::DeviceGuardImplInterface&>().exchangeStream(std::declval<c10::Stream>()));

struct GuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType static_type = kType;

  GuardImpl() = default;
  explicit GuardImpl(c10::DeviceType t) {
    TORCH_INTERNAL_ASSERT(t == kType);
  }

  c10::DeviceType type() const override {
    return kType;
  }

  c10::Device exchangeDevice(c10::Device d) const override {
    auto target = resolve_device(d);
    c10::Device old(kType, tl_current_device);
    tl_current_device = target.index();
    return old;
  }

  c10::Device getDevice() const override {
    return c10::Device(kType, tl_current_device);
  }

  void setDevice(c10::Device d) const override {
    tl_current_device = resolve_device(d).index();
  }

  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.type() == kType && d.index() >= 0 && d.index() < kNumDevices) {
      tl_current_device = d.index();
    }
  }

  c10::Stream getStream(c10::Device d) const noexcept(kGetStreamNoexcept) override {
    auto dev = resolve_device(d);
    return c10::Stream(c10::Stream::UNSAFE, dev, tl_current_stream[dev.index()]);
  }

  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::UNSAFE, resolve_device(d), 0);
  }

  c10::Stream getStreamFromGlobalPool(c10::Device d, bool /*isHighPriority*/ = false) const override {
    auto dev = resolve_device(d);
    return c10::Stream(c10::Stream::UNSAFE, dev, streams().create(dev.index()));
  }

  c10::Stream getNewStream(c10::Device d, int /*priority*/ = 0) const override {
    auto dev = resolve_device(d);
    return c10::Stream(c10::Stream::UNSAFE, dev, streams().create(dev.index()));
  }

  c10::Stream exchangeStream(c10::Stream s) const noexcept(kExchangeStreamNoexcept) override {
    auto dev = resolve_device(s.device());
    streams().find(dev.index(), s.id());  // validates the id
    c10::Stream old(c10::Stream::UNSAFE, dev, tl_current_stream[dev.index()]);
    tl_current_stream[dev.index()] = s.id();
    return old;
  }

#if TDB_TORCH_AT_LEAST(2, 11)
  // torch >= 2.11 asks the guard for a stream's raw handle (c10::Stream::native_handle, torch.Stream.native_handle);
  // the bridge's current_work_stream uses exactly that from 2.11 on (csrc/stream.cpp).
  void* getStreamNativeHandle(const c10::Stream s) const override {
    return stream_native_handle(s);
  }
#endif

  c10::DeviceIndex deviceCount() const noexcept override {
    return kNumDevices;
  }

  bool queryStream(const c10::Stream& s) const override {
    resolve_device(s.device());
    return true;
  }

  void synchronizeStream(const c10::Stream& s) const override {
    resolve_device(s.device());
  }

  // Not `override`: DeviceGuardImplInterface gained synchronizeDevice after torch 2.4; where it exists,
  // this overrides it all the same.
  void synchronizeDevice(const c10::DeviceIndex index) const {
    resolve_index(index);
  }

  void record(
      void** event,
      const c10::Stream& stream,
      const c10::DeviceIndex device_index,
      const c10::EventFlag /*flag*/) const override {
    TORCH_CHECK(
        device_index == -1 || device_index == stream.device_index(),
        "tdbdev: event device ", static_cast<int>(device_index),
        " does not match stream device ", static_cast<int>(stream.device_index()));
    auto dev = resolve_device(stream.device());
    auto* e = static_cast<Event*>(*event);
    if (e == nullptr) {
      e = new Event{dev.index(), stream.id(), false, {}};
      *event = e;
    }
    e->device = dev.index();
    e->stream = stream.id();
    e->recorded = true;
    e->when = std::chrono::steady_clock::now();
  }

  void block(void* /*event*/, const c10::Stream& stream) const override {
    resolve_device(stream.device());
  }

  bool queryEvent(void* /*event*/) const override {
    return true;
  }

  void synchronizeEvent(void* /*event*/) const override {}

  void destroyEvent(void* event, const c10::DeviceIndex /*device_index*/) const noexcept override {
    delete static_cast<Event*>(event);
  }

  double elapsedTime(void* a, void* b, const c10::DeviceIndex /*device_index*/) const override {
    auto* ea = static_cast<Event*>(a);
    auto* eb = static_cast<Event*>(b);
    TORCH_CHECK(ea && eb && ea->recorded && eb->recorded, "tdbdev: both events must be recorded");
    return std::chrono::duration<double, std::milli>(eb->when - ea->when).count();
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, GuardImpl);

const c10::impl::DeviceGuardImplInterface* guard() {
  return c10::impl::getDeviceGuardImpl(kType);
}

// ---------------------------------------------------------------------------
// Allocator
// ---------------------------------------------------------------------------

std::atomic<std::int64_t> g_live{0};
std::atomic<std::int64_t> g_total{0};
std::atomic<std::int64_t> g_live_bytes{0};

struct AllocRecord {
  c10::DeviceIndex device;
  std::size_t nbytes;
};

std::mutex& records_mutex() {
  static auto* m = new std::mutex();
  return *m;
}
std::unordered_map<void*, AllocRecord>& records() {
  static auto* r = new std::unordered_map<void*, AllocRecord>();
  return *r;
}

void free_block(void* ptr) {
  if (ptr == nullptr) {
    return;
  }
  std::size_t nbytes = 0;
  {
    std::lock_guard<std::mutex> lock(records_mutex());
    auto it = records().find(ptr);
    if (it != records().end()) {
      nbytes = it->second.nbytes;
      records().erase(it);
    }
  }
  g_live.fetch_sub(1);
  g_live_bytes.fetch_sub(static_cast<std::int64_t>(nbytes));
  std::free(ptr);
}

struct Allocator final : public c10::Allocator {
  c10::DataPtr allocate(std::size_t nbytes) override {
    const c10::Device device(kType, tl_current_device);
    if (nbytes == 0) {
      return c10::DataPtr(nullptr, nullptr, &free_block, device);
    }
    const std::size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
    void* ptr = std::aligned_alloc(kAlignment, rounded);
    TORCH_CHECK(ptr != nullptr, "tdbdev: out of memory allocating ", nbytes, " bytes");
    {
      std::lock_guard<std::mutex> lock(records_mutex());
      records()[ptr] = AllocRecord{device.index(), nbytes};
    }
    g_live.fetch_add(1);
    g_total.fetch_add(1);
    g_live_bytes.fetch_add(static_cast<std::int64_t>(nbytes));
    return c10::DataPtr(ptr, ptr, &free_block, device);
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &free_block;
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    if (count != 0) {
      std::memcpy(dest, src, count);
    }
  }
};

Allocator g_allocator;
const bool g_allocator_registered [[maybe_unused]] = [] {
  c10::SetAllocator(kType, &g_allocator);
  return true;
}();

// Device index of a pointer returned by the allocator (interior pointers
// included), or -1.
c10::DeviceIndex device_of_ptr(const void* p) {
  auto addr = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard<std::mutex> lock(records_mutex());
  for (const auto& kv : records()) {
    auto base = reinterpret_cast<std::uintptr_t>(kv.first);
    if (addr >= base && addr < base + kv.second.nbytes) {
      return kv.second.device;
    }
  }
  return -1;
}

// Grow (never shrink) a storage to at least `nbytes`, keeping its contents.
void grow_storage(const c10::Storage& storage, std::size_t nbytes) {
  auto* impl = storage.unsafeGetStorageImpl();
  if (nbytes <= impl->nbytes()) {
    return;
  }
  TORCH_CHECK(impl->resizable(), "tdbdev: trying to resize storage that is not resizable");
  TORCH_CHECK(impl->allocator() != nullptr, "tdbdev: storage has no allocator");
  c10::DataPtr fresh;
  {
    c10::DeviceGuard g(c10::Device(kType, storage.device().has_index() ? storage.device().index() : tl_current_device));
    fresh = impl->allocator()->allocate(nbytes);
  }
  if (impl->nbytes() != 0 && impl->data() != nullptr) {
    std::memcpy(fresh.get(), impl->data(), impl->nbytes());
  }
  impl->set_data_ptr_noswap(std::move(fresh));
  impl->set_nbytes(nbytes);
}

// ---------------------------------------------------------------------------
// Hooks
// ---------------------------------------------------------------------------

struct Hooks final : public at::PrivateUse1HooksInterface {
  // isBuilt, isAvailable and init are not `override`: AcceleratorHooksInterface gained them after torch 2.4;
  // where they exist, these override them all the same.
  bool isBuilt() const {
    return true;
  }
  bool isAvailable() const {
    return true;
  }
  bool hasPrimaryContext(c10::DeviceIndex index) const override {
    return index >= 0 && index < kNumDevices;
  }
  void init() const {}
  c10::DeviceIndex deviceCount() const override {
    return kNumDevices;
  }
  void setCurrentDevice(c10::DeviceIndex index) const override {
    check_index(index);
    tl_current_device = index;
  }
  c10::DeviceIndex getCurrentDevice() const override {
    return tl_current_device;
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    auto old = tl_current_device;
    if (index >= 0) {
      check_index(index);
      tl_current_device = index;
    }
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override {
    return exchangeDevice(index);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    auto d = device_of_ptr(data);
    TORCH_CHECK(d >= 0, "tdbdev: pointer was not allocated by this backend");
    return c10::Device(kType, d);
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, std::size_t newsize) const override {
    auto* impl = storage.unsafeGetStorageImpl();
    if (newsize <= impl->nbytes()) {
      impl->set_nbytes(newsize);
      return;
    }
    grow_storage(storage, newsize);
  }
};

const bool g_hooks_registered [[maybe_unused]] = [] {
  at::RegisterPrivateUse1HooksInterface(new Hooks());
  return true;
}();

// ---------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------

constexpr c10::DispatchKeySet kKeys(c10::DispatchKey::PrivateUse1);

c10::Device device_from_options(std::optional<c10::Device> device) {
  return resolve_device(device.value_or(c10::Device(kType, -1)));
}

void check_layout(std::optional<c10::Layout> layout) {
  TORCH_CHECK(
      !layout.has_value() || *layout == c10::Layout::Strided,
      "tdbdev: only strided tensors are supported");
}

at::Tensor empty_memory_format(
    c10::IntArrayRef size,
    std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout,
    std::optional<c10::Device> device,
    std::optional<bool> /*pin_memory*/,
    std::optional<c10::MemoryFormat> memory_format) {
  check_layout(layout);
  const auto dev = device_from_options(device);
  c10::DeviceGuard g(dev);
  return at::detail::empty_generic(size, &g_allocator, kKeys, c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(
    c10::IntArrayRef size,
    c10::IntArrayRef stride,
    std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout,
    std::optional<c10::Device> device,
    std::optional<bool> /*pin_memory*/) {
  check_layout(layout);
  const auto dev = device_from_options(device);
  c10::DeviceGuard g(dev);
  return at::detail::empty_strided_generic(size, stride, &g_allocator, kKeys, c10::dtype_or_default(dtype));
}

// A CPU tensor that aliases the memory of `t` (which is host memory whether
// `t` is a CPU or a tdbdev tensor).
at::Tensor host_alias(const at::Tensor& t) {
  if (t.device().is_cpu()) {
    return t;
  }
  TORCH_CHECK(t.device().type() == kType, "tdbdev: cannot copy to/from device ", t.device());
  TORCH_CHECK(t.layout() == c10::Layout::Strided, "tdbdev: only strided tensors are supported");
  const auto cpu_options = t.options().device(c10::kCPU);
  at::Tensor alias;
  if (t.numel() == 0) {
    alias = at::detail::empty_generic(
        t.sizes(), c10::GetCPUAllocator(), c10::DispatchKeySet(c10::DispatchKey::CPU), t.scalar_type(),
        std::nullopt);
  } else {
    alias = at::from_blob(t.data_ptr(), t.sizes(), t.strides(), cpu_options);
  }
  alias.unsafeGetTensorImpl()->_set_conj(t.is_conj());
  alias.unsafeGetTensorImpl()->_set_neg(t.is_neg());
  return alias;
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool /*non_blocking*/) {
  if (dst.numel() == 0) {
    return dst;
  }
  auto d = host_alias(dst);
  d.copy_(host_alias(self));
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) {
    TORCH_CHECK(dst.numel() == 0, "tdbdev: _copy_from_and_resize into a non-empty tensor of another shape");
    const_cast<at::Tensor&>(dst).resize_(self.sizes());
  }
  return copy_from(self, dst, false);
}

at::Tensor& fill_scalar(at::Tensor& self, const c10::Scalar& value) {
  if (self.numel() != 0) {
    host_alias(self).fill_(value);
  }
  return self;
}

at::Tensor& zero(at::Tensor& self) {
  if (self.numel() != 0) {
    host_alias(self).zero_();
  }
  return self;
}

at::Tensor make_view(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride, int64_t offset) {
  TORCH_CHECK(offset >= 0, "tdbdev: negative storage offset ", offset);
  auto result = at::detail::make_tensor<c10::TensorImpl>(
      c10::TensorImpl::VIEW, c10::Storage(self.storage()), self.key_set(), self.dtype());
  result.unsafeGetTensorImpl()->set_sizes_and_strides(size, stride, offset);
  return result;
}

at::Tensor as_strided(
    const at::Tensor& self,
    c10::IntArrayRef size,
    c10::IntArrayRef stride,
    std::optional<int64_t> storage_offset) {
  TORCH_CHECK(size.size() == stride.size(), "tdbdev: as_strided: sizes and strides differ in length");
  for (auto s : stride) {
    TORCH_CHECK(s >= 0, "tdbdev: as_strided: negative strides are not supported");
  }
  const int64_t offset = storage_offset.value_or(self.storage_offset());
  const auto needed = at::detail::computeStorageNbytes(size, stride, self.dtype().itemsize(),
                                                       static_cast<std::size_t>(offset));
  TORCH_CHECK(
      needed <= self.storage().nbytes(),
      "tdbdev: as_strided out of bounds for storage of ", self.storage().nbytes(), " bytes");
  return make_view(self, size, stride, offset);
}

at::Tensor view(const at::Tensor& self, c10::IntArrayRef size) {
  auto shape = at::infer_size_dv(size, self.numel());
  auto stride = at::detail::computeStride(self.sizes(), self.strides(), shape);
  TORCH_CHECK(
      stride.has_value(),
      "view size is not compatible with input tensor's size and stride (at least one dimension spans "
      "across two contiguous subspaces). Use .reshape(...) instead.");
  return make_view(self, shape, *stride, self.storage_offset());
}

at::Tensor reshape_alias(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride) {
  return make_view(self, size, stride, self.storage_offset());
}

void ensure_storage_fits(const at::Tensor& self) {
  auto* impl = self.unsafeGetTensorImpl();
  const auto needed = at::detail::computeStorageNbytes(
      impl->sizes(), impl->strides(), impl->dtype().itemsize(),
      static_cast<std::size_t>(impl->storage_offset()));
  if (self.numel() != 0) {
    grow_storage(impl->storage(), needed);
  }
}

const at::Tensor& resize_(
    const at::Tensor& self,
    c10::IntArrayRef size,
    std::optional<c10::MemoryFormat> memory_format) {
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_sizes_contiguous(size);
  if (memory_format.has_value() && *memory_format != c10::MemoryFormat::Preserve) {
    impl->empty_tensor_restride(*memory_format);
  }
  ensure_storage_fits(self);
  return self;
}

at::Tensor& set_storage_offset(
    at::Tensor& self,
    c10::Storage source,
    int64_t storage_offset,
    c10::IntArrayRef size,
    c10::IntArrayRef stride) {
  TORCH_CHECK(storage_offset >= 0, "tdbdev: set_: negative storage offset");
  TORCH_CHECK(source.device().type() == kType, "tdbdev: set_: storage is on ", source.device());
  auto* impl = self.unsafeGetTensorImpl();
  if (!impl->storage().is_alias_of(source)) {
    impl->set_storage_keep_dtype(std::move(source));
  }
  if (stride.empty()) {
    impl->set_sizes_contiguous(size);
    impl->set_storage_offset(storage_offset);
  } else {
    TORCH_CHECK(size.size() == stride.size(), "tdbdev: set_: sizes and strides differ in length");
    impl->set_sizes_and_strides(size, stride, storage_offset);
  }
  ensure_storage_fits(self);
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source) {
  const auto n = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage_offset(self, std::move(source), 0, {n}, {});
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) {
  if (self.is_same(source)) {
    return self;
  }
  return set_storage_offset(self, source.storage(), source.storage_offset(), source.sizes(), source.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::DeviceGuard g(resolve_device(self.device()));
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, &g_allocator, /*resizable=*/true);
  return set_storage_offset(self, std::move(storage), 0, {0}, {});
}

void fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  at::native::cpu_fallback(op, stack, /*error_on_views=*/true);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("fill_.Scalar", TORCH_FN(fill_scalar));
  m.impl("zero_", TORCH_FN(zero));
  m.impl("as_strided", TORCH_FN(as_strided));
  m.impl("view", TORCH_FN(view));
  m.impl("_reshape_alias", TORCH_FN(reshape_alias));
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage_offset));
  m.impl("set_.source_Storage", TORCH_FN(set_storage));
  m.impl("set_.source_Tensor", TORCH_FN(set_tensor));
  m.impl("set_", TORCH_FN(set_empty));
}

// The Conjugate/Negative fallbacks materialize their inputs with clone(),
// which for a tdbdev tensor calls copy_ -> _copy_from again: endless
// recursion. Our _copy_from honours the conj/neg bits itself (host_alias), so
// let these two operators fall through those keys. This registration is
// process-wide but only touches _copy_from/_copy_from_and_resize, which only
// out-of-tree backends implement.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>());
}

// ---------------------------------------------------------------------------
// Python-facing helpers (plain ints only; tensors go through torch itself)
// ---------------------------------------------------------------------------

c10::Device dev(int64_t index) {
  check_index(static_cast<c10::DeviceIndex>(index));
  return c10::Device(kType, static_cast<c10::DeviceIndex>(index));
}

std::uintptr_t handle_of(const c10::Stream& s) {
  return reinterpret_cast<std::uintptr_t>(stream_native_handle(s));
}

}  // namespace tdb

namespace py = pybind11;

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace tdb;
  m.doc() = "tdbdev: a PrivateUse1 test backend for torch_dlpack_bridge";

  m.def("device_count", [] { return static_cast<int>(guard()->deviceCount()); });
  m.def("current_device", [] { return static_cast<int>(guard()->getDevice().index()); });
  m.def("set_device", [](int64_t i) { guard()->setDevice(dev(i)); });
  m.def("exchange_device", [](int64_t i) { return static_cast<int>(guard()->exchangeDevice(dev(i)).index()); });

  m.def("new_stream", [](int64_t i) { return guard()->getNewStream(dev(i)).id(); },
        "Create a new stream on device i and return its id (does not make it current).");
  m.def("current_stream_id", [](int64_t i) { return guard()->getStream(dev(i)).id(); });
  m.def("set_current_stream",
        [](int64_t i, int64_t id) {
          streams().find(dev(i).index(), id);  // validate first: exchangeStream may be noexcept
          return guard()->exchangeStream(c10::Stream(c10::Stream::UNSAFE, dev(i), id)).id();
        },
        "Make stream `id` current on device i for this thread; returns the previous id.");
  m.def("use_new_stream",
        [](int64_t i) {
          auto s = guard()->getNewStream(dev(i));
          guard()->exchangeStream(s);
          return py::make_tuple(s.id(), handle_of(s));
        },
        "Create a new stream on device i, make it current for this thread; returns (id, handle).");
  m.def("stream_handle", [](int64_t i, int64_t id) { return handle_of(c10::Stream(c10::Stream::UNSAFE, dev(i), id)); });
  m.def("current_stream_handle", [](int64_t i) { return handle_of(guard()->getStream(dev(i))); });
  m.def("default_stream_handle", [](int64_t i) { return handle_of(guard()->getDefaultStream(dev(i))); });
  m.def("stream_count", [](int64_t i) { return streams().count(dev(i).index()); });

  m.def("live_allocations", [] { return g_live.load(); });
  m.def("total_allocations", [] { return g_total.load(); });
  m.def("live_bytes", [] { return g_live_bytes.load(); });
  m.def("device_of_ptr", [](std::uintptr_t p) { return static_cast<int>(device_of_ptr(reinterpret_cast<void*>(p))); });
}
