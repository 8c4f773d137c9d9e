// Export: torch tensor -> DLTensor (borrowed) and DLManagedTensorVersioned (owned).
#include "torch_python.h"

#include <ATen/ops/empty.h>
#include <c10/core/InferenceMode.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "bridge.h"
#include "errors.h"
#include "mapping.h"

namespace tdb {
namespace {

// A real C-level subtype check: PyObject_IsInstance would consult __class__ and __instancecheck__, so an
// object that lies about its class could pass and be unpacked as a tensor.
inline bool is_torch_tensor(PyObject* obj) noexcept {
  PyTypeObject* type = Py_TYPE(obj);
  auto* tensor_type = reinterpret_cast<PyTypeObject*>(THPVariableClass);
  return type == tensor_type || type == reinterpret_cast<PyTypeObject*>(ParameterClass) ||
         (tensor_type != nullptr && PyType_IsSubtype(type, tensor_type));
}

inline c10::ScalarType scalar_type(const c10::TensorImpl* impl) noexcept {
  return c10::typeMetaToScalarType(impl->dtype());
}

int raise_not_a_tensor(PyObject* obj) noexcept {
  if (obj == nullptr) return raise_python(ErrorKind::Type, "expected a torch.Tensor, got NULL");
  PyErr_Format(PyExc_TypeError, "expected a torch.Tensor, got %.200s", Py_TYPE(obj)->tp_name);
  return -1;
}

// Wrapper subclasses and functional tensors describe data they do not hold. With elements, their NULL
// DataPtr gives them away; a size-zero tensor has a NULL DataPtr either way, so their dispatch keys decide
// (which also refuses a size-zero __torch_dispatch__ subclass that does have storage: README).
bool may_lack_real_storage(const c10::TensorImpl* impl) noexcept {
  const c10::DispatchKeySet keys = impl->key_set();
  return keys.has(c10::DispatchKey::Python) || keys.has(c10::DispatchKey::Functionalize);
}

// Explains why `t` cannot be exported; called only once the fast check below has failed. Out of line and
// cold: the exporters' hot path stays short.
[[noreturn]] C10_NOINLINE __attribute__((cold)) void refuse(const at::Tensor& t) {
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  const std::string prefix = "torch_dlpack_bridge: cannot export ";
  if (impl->is_nested()) fail(ErrorKind::Buffer, prefix + "a nested tensor: DLPack describes strided tensors only");
  if (impl->layout() != c10::kStrided) {
    fail(ErrorKind::Buffer, prefix + "a tensor with layout " + c10::str(impl->layout()) +
                                ": DLPack describes strided tensors only (use .to_dense())");
  }
  if (impl->is_quantized()) {
    fail(ErrorKind::Buffer, prefix + "a quantized tensor (" + std::string(c10::toString(scalar_type(impl))) +
                                "): DLPack has no quantized types (use .dequantize() or .int_repr())");
  }
  if (dl_dtype_of(scalar_type(impl)).bits == 0) {
    fail(ErrorKind::Buffer, prefix + "dtype " + std::string(c10::toString(scalar_type(impl))) +
                                ": DLPack has no equivalent");
  }
  if (impl->is_conj()) {
    fail(ErrorKind::Buffer, prefix + "a tensor with the conjugate bit set: call .resolve_conj() first");
  }
  if (impl->is_neg()) fail(ErrorKind::Buffer, prefix + "a tensor with the negative bit set: call .resolve_neg() first");
  if (impl->device_type() == c10::DeviceType::Meta) {
    // FakeTensors (torch.compile, torch.export, FakeTensorMode) are meta tensors underneath: say the way out.
    fail(ErrorKind::Buffer, prefix + "a meta tensor or FakeTensor: it has no data (torch.compile, torch.export "
                                     "and FakeTensorMode trace with such tensors: call the kernel through a "
                                     "custom op with a fake implementation, torch.library.custom_op and "
                                     "register_fake)");
  }
  if (dl_device_type_of(impl->device_type()) == 0) {
    fail(ErrorKind::Buffer,
         prefix + "a tensor on " + c10::DeviceTypeName(impl->device_type(), true) + ": DLPack has no such device");
  }
  if (impl->has_symbolic_sizes_strides()) {
    fail(ErrorKind::Buffer, prefix + "a tensor with symbolic sizes or strides (traced or fake tensor)");
  }
  fail(ErrorKind::Buffer, prefix + "a tensor without real storage on its device "
                                   "(a wrapper subclass, FakeTensor or functional tensor)");
}

// Fills `out` from `t` for any tensor, every check in full, or refuses it (throws). Shape and strides are
// borrowed from the tensor's own metadata (no allocation). Out of line: describe() below handles the common
// tensors itself and comes here for the rest (other devices, size-zero tensors, anything unusual).
C10_NOINLINE void describe_general(const at::Tensor& t, DLTensor& out) {
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  const DLDataType dtype = dl_dtype_of(scalar_type(impl));
  const int32_t device_type = dl_device_type_of(impl->device_type());
  // The storage is read directly: has_storage() is an out-of-line call, and this pointer answers it too.
  c10::StorageImpl* storage = impl->unsafe_storage().unsafeGetStorageImpl();
  // One branch for the common case; refuse() works out which rule was broken.
  if (C10_UNLIKELY(dtype.bits == 0 || device_type == 0 || impl->layout() != c10::kStrided || impl->is_nested() ||
                   impl->is_conj() || impl->is_neg() || impl->has_symbolic_sizes_strides() ||
                   storage == nullptr || storage->device_type() != impl->device_type())) {
    refuse(t);
  }
  const c10::IntArrayRef sizes = impl->sizes();
  out.ndim = static_cast<int32_t>(sizes.size());
  out.shape = const_cast<int64_t*>(sizes.data());
  out.strides = const_cast<int64_t*>(impl->strides().data());
  out.dtype = dtype;
  out.device.device_type = static_cast<DLDeviceType>(device_type);
  out.device.device_id = device_type == kDLCPU ? 0 : impl->device().index();
  if (C10_UNLIKELY(device_type == kDLOneAPI)) out.device.device_id = dl_device_id_of(impl->device());
  out.byte_offset = 0;
  if (impl->numel() == 0) {
    // A size-zero tensor's DataPtr is NULL whether or not it has storage: ask torch instead.
    if (C10_UNLIKELY(may_lack_real_storage(impl))) refuse(t);
    out.data = nullptr;
    return;
  }
  // Wrapper subclasses and functional tensors have a storage whose DataPtr is NULL: nothing to hand out.
  if (C10_UNLIKELY(storage->data() == nullptr)) refuse(t);
  // mutable_data() materializes a lazily-cloned (copy-on-write) storage: the consumer may write.
  char* base = static_cast<char*>(storage->mutable_data());
  const int64_t offset = impl->storage_offset() * static_cast<int64_t>(impl->itemsize());
  if (C10_UNLIKELY(has_opaque_data_pointers(impl->device_type()))) {
    out.data = base;  // a handle: arithmetic on it is meaningless, so DLPack carries the view's start apart
    out.byte_offset = static_cast<uint64_t>(offset);
    return;
  }
  out.data = base + offset;
}

// The keys describe() leaves to describe_general(), tested with one mask: the sparse, sparse compressed and
// mkldnn layouts (the keys layout() itself tests), nested, conjugate and negative. Each is a functionality key,
// so has_any() on the mask is the same test as is_sparse() ... is_neg().
constexpr c10::DispatchKeySet kUnusualKeys = c10::sparse_ks | c10::sparse_csr_ks | c10::mkldnn_ks |
                                             c10::DispatchKeySet(c10::DispatchKey::NestedTensor) |
                                             c10::DispatchKeySet(c10::DispatchKey::Conjugate) |
                                             c10::DispatchKeySet(c10::DispatchKey::Negative);

// TensorImpl's protected fields, read as a subclass would (TensorImpl is never really a PlainFields: the cast
// is the usual way to read protected members; no layout change, no virtual call). When policy_free() holds,
// sizes(), strides(), numel(), storage_offset() and device() return exactly these fields, and layout() is
// decided by the dispatch keys alone: that is how the accessors are written, the policy bits being what sends
// them to their virtual _custom() variants. Reading the fields directly lets the compiler keep the fast path
// free of calls (with the accessors, their never-taken virtual calls make it reload and spill).
struct PlainFields : c10::TensorImpl {
  static const PlainFields& of(const c10::TensorImpl* impl) noexcept { return *static_cast<const PlainFields*>(impl); }
  bool policy_free() const noexcept {
    return sizes_strides_policy_ == 0 && !has_symbolic_sizes_strides_ && !device_policy_ && !layout_policy_;
  }
  c10::IntArrayRef plain_sizes() const noexcept { return sizes_and_strides_.sizes_arrayref(); }
  c10::IntArrayRef plain_strides() const noexcept { return sizes_and_strides_.strides_arrayref(); }
  int64_t plain_numel() const noexcept { return numel_; }
  int64_t plain_storage_offset() const noexcept { return storage_offset_; }
};

// Fills `out` from `t`: the fast path, inlined into each exporter, for a non-empty strided tensor on CPU, CUDA
// (or ROCm) or a PrivateUse1 device with a dtype DLPack describes and no custom size, layout or device policy.
// It checks exactly what describe_general() checks, and hands every tensor it is not sure of to
// describe_general(), so both accept and refuse the same tensors and fill the same fields. Every field is read
// before `out` is written: the compiler cannot prove that `out` does not alias the tensor, so a read after a
// store would load again. The data pointer comes last: mutable_data() may call into torch (a copy-on-write
// storage materializes), and little is live across it there.
C10_ALWAYS_INLINE void describe(const at::Tensor& t, DLTensor& out) {
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  const PlainFields& fields = PlainFields::of(impl);
  // With no layout policy and none of the layout keys, layout() is kStrided: that is how it is computed.
  if (C10_UNLIKELY(!fields.policy_free() || impl->key_set().has_any(kUnusualKeys))) return describe_general(t, out);
  const c10::DeviceType device = impl->device_type();
  c10::StorageImpl* storage = impl->unsafe_storage().unsafeGetStorageImpl();
  const auto scalar = static_cast<size_t>(scalar_type(impl));
  if (C10_UNLIKELY((device != c10::DeviceType::CPU && device != c10::DeviceType::CUDA &&
                    device != c10::DeviceType::PrivateUse1) || storage == nullptr ||
                   storage->device_type() != device || scalar >= kNumScalarTypes ||
                   kDLDataTypeTable.of[scalar].bits == 0 || fields.plain_numel() == 0 ||
                   storage->data() == nullptr)) {
    return describe_general(t, out);
  }
  const c10::IntArrayRef sizes = fields.plain_sizes();
  const c10::IntArrayRef strides = fields.plain_strides();
  const DLDataType dtype = kDLDataTypeTable.of[scalar];
  // The item size from DLPack's dtype (bits x lanes / 8 for every dtype the table maps): no TypeMeta lookup.
  const int64_t offset = fields.plain_storage_offset() * ((static_cast<int64_t>(dtype.bits) * dtype.lanes) >> 3);
  DLDevice dl_device{kDLCPU, 0};
  if (C10_UNLIKELY(device != c10::DeviceType::CPU)) {
    const DLDeviceType type = device == c10::DeviceType::CUDA ? (g_cuda_is_rocm ? kDLROCM : kDLCUDA) : kDLExtDev;
    dl_device = {type, impl->device().index()};
  }
  out.device = dl_device;
  out.ndim = static_cast<int32_t>(sizes.size());
  out.dtype = dtype;
  out.shape = const_cast<int64_t*>(sizes.data());
  out.strides = const_cast<int64_t*>(strides.data());
  out.byte_offset = 0;
  // mutable_data() materializes a lazily-cloned (copy-on-write) storage: the consumer may write.
  out.data = static_cast<char*>(storage->mutable_data()) + offset;
}

// One allocation: the managed struct, then shape and strides. It holds the storage, not the tensor, so a
// set_() on the source cannot free the memory, and in-place metadata changes (transpose_, squeeze_, a
// shrinking resize_) cannot change what we handed out. A growing resize_ reallocates inside the storage
// itself; nothing outside torch can prevent that (README: not supported).
struct OwnedExport {
  DLManagedTensorVersioned managed;
  c10::Storage storage;

  int64_t* dims() noexcept { return reinterpret_cast<int64_t*>(this + 1); }
};
static_assert(sizeof(OwnedExport) % alignof(int64_t) == 0, "dims must follow the struct aligned");
static_assert(offsetof(OwnedExport, managed) == 0, "the deleter casts the managed struct back to its holder");

// CPython's "is the interpreter finalizing?" is _Py_IsFinalizing up to 3.12 and Py_IsFinalizing from 3.13.
// One build of this library serves every CPython, so both are weak references under names of our own: the
// running interpreter defines exactly one of them.
extern "C" int tdb_Py_IsFinalizing() __asm__("Py_IsFinalizing") __attribute__((weak));
extern "C" int tdb_private_Py_IsFinalizing() __asm__("_Py_IsFinalizing") __attribute__((weak));

// True once the interpreter is shutting down or gone: a deleter that needs Python can no longer run.
bool python_finalizing() noexcept {
  if (!Py_IsInitialized()) return true;
  if (tdb_Py_IsFinalizing != nullptr) return tdb_Py_IsFinalizing() != 0;
  return tdb_private_Py_IsFinalizing != nullptr && tdb_private_Py_IsFinalizing() != 0;
}

// Safe from any thread, with or without the GIL, and after interpreter shutdown. It touches no Python
// object itself, but dropping the last reference to the storage runs the storage's own deleter, which
// needs the interpreter when Python memory backs the storage (torch.from_numpy, torch.frombuffer: it takes
// the GIL to release the owner). Once the interpreter is finalizing that would crash or hang, so the last
// reference is leaked instead: the process is ending, and torch leaves such storages alive too.
void delete_owned_export(DLManagedTensorVersioned* self) noexcept {
  if (self == nullptr) return;
  auto* holder = reinterpret_cast<OwnedExport*>(self);
  if (C10_UNLIKELY(holder->storage.use_count() == 1) && python_finalizing()) {
    (void)holder->storage.unsafeReleaseStorageImpl();
  }
  holder->~OwnedExport();
  std::free(holder);
}

}  // namespace

namespace {

// One allocation holding the managed struct, its own copy of shape and strides, and a reference to `storage`
// (copied, or moved in by the allocator). Inlined into both export_owning()s.
template <class StorageRef>
C10_ALWAYS_INLINE DLManagedTensorVersioned* make_owned(StorageRef&& storage, const DLTensor& view) {
  const int32_t ndim = view.ndim;
  void* memory = std::malloc(sizeof(OwnedExport) + 2 * static_cast<size_t>(ndim) * sizeof(int64_t));
  if (memory == nullptr) throw std::bad_alloc();
  auto* holder = static_cast<OwnedExport*>(memory);
  new (&holder->storage) c10::Storage(std::forward<StorageRef>(storage));  // every other field is assigned below
  int64_t* dims = holder->dims();
  for (int32_t i = 0; i < ndim; ++i) {  // ndim is small: a loop beats two memcpy calls of unknown length
    dims[i] = view.shape[i];
    dims[ndim + i] = view.strides[i];
  }
  DLManagedTensorVersioned& m = holder->managed;
  m.version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  m.manager_ctx = holder;
  m.deleter = delete_owned_export;
  m.flags = 0;
  m.dl_tensor = view;
  m.dl_tensor.shape = dims;  // for ndim 0: non-NULL and empty, as the borrowed view gives it
  m.dl_tensor.strides = dims + ndim;
  return &m;
}

}  // namespace

DLManagedTensorVersioned* export_owning(c10::Storage storage, const DLTensor& view) {
  return make_owned(std::move(storage), view);
}

c10::Storage* unshared_allocation(DLManagedTensorVersioned* m) noexcept {
  if (m->deleter != delete_owned_export) return nullptr;
  c10::Storage& storage = reinterpret_cast<OwnedExport*>(m)->storage;
  // Only the allocator makes non-resizable storages here; one reference: no tensor or other export shares it.
  if (storage.resizable() || storage.use_count() != 1 || m->dl_tensor.byte_offset != 0 ||
      (m->dl_tensor.data != nullptr && m->dl_tensor.data != storage.data())) {
    return nullptr;
  }
  return &storage;
}

DLManagedTensorVersioned* export_owning(const at::Tensor& t) {
  DLTensor view;
  describe(t, view);
  return make_owned(t.unsafeGetTensorImpl()->unsafe_storage(), view);  // the storage's reference: one increment
}

namespace {

// The exporters' checks of their arguments, in full and in order, for whatever the inline test below does not
// pass (NULL, a subclass, NULL `out`); out of line so that the common call keeps no registers for them.
C10_NOINLINE int dltensor_checked(PyObject* obj, DLTensor* out) noexcept {
  if (obj == nullptr || !is_torch_tensor(obj)) return raise_not_a_tensor(obj);
  if (out == nullptr) return raise_python(ErrorKind::Value, "out must not be NULL");
  return guarded([&] { describe(unpack_tensor(obj), *out); });
}

C10_NOINLINE int managed_checked(PyObject* obj, DLManagedTensorVersioned** out) noexcept {
  if (obj == nullptr || !is_torch_tensor(obj)) return raise_not_a_tensor(obj);
  if (out == nullptr) return raise_python(ErrorKind::Value, "out must not be NULL");
  *out = nullptr;
  return guarded([&] { *out = export_owning(unpack_tensor(obj)); });
}

// torch.Tensor or torch.nn.Parameter exactly: the common case, two compares.
inline bool is_exact_torch_tensor(PyObject* obj) noexcept {
  PyTypeObject* type = Py_TYPE(obj);
  return type == reinterpret_cast<PyTypeObject*>(THPVariableClass) ||
         type == reinterpret_cast<PyTypeObject*>(ParameterClass);
}

}  // namespace

int dltensor_from_py_object_no_sync(void* py_object, DLTensor* out) noexcept {
  auto* obj = static_cast<PyObject*>(py_object);
  if (C10_UNLIKELY(obj == nullptr || out == nullptr || !is_exact_torch_tensor(obj))) return dltensor_checked(obj, out);
  return guarded([&] { describe(unpack_tensor(obj), *out); });
}

// requires_grad as torch's own in-place operations read it (autograd's check_inplace reads the C++ flag; a torch
// function mode sees the operation, not this read), for torch.Tensor and nn.Parameter exactly; -1 for anything
// else: a subclass may answer through its own __torch_function__, so the consumer reads its attribute.
int requires_grad_or_unknown(PyObject* obj) noexcept {
  if (!is_exact_torch_tensor(obj)) return -1;
  return unpack_tensor(obj).requires_grad() ? 1 : 0;
}

namespace {

// The version counter's std::atomic<uint32_t> inside a VariableVersion, or nullptr (an inference tensor has no
// counter). VariableVersion is one intrusive_ptr to a private VersionCounter : intrusive_ptr_target holding the
// atomic just after its base; version_layout_checked() makes sure of it once, on a counter of its own, before
// the fast bump uses it (else bump_version() does it, with an atomic increment).
// kVersionOffset: where the atomic lies in the VersionCounter, also published as TDBAutogradLayout::version_offset.
constexpr size_t kVersionOffset = (sizeof(c10::intrusive_ptr_target) + alignof(std::atomic<uint32_t>) - 1) &
                                  ~(alignof(std::atomic<uint32_t>) - 1);
std::atomic<uint32_t>* version_atomic(const c10::VariableVersion& version) noexcept {
  static_assert(sizeof(c10::VariableVersion) == sizeof(void*), "VariableVersion: one intrusive_ptr");
  char* counter = *reinterpret_cast<char* const*>(&version);
  if (counter == nullptr) return nullptr;
  return reinterpret_cast<std::atomic<uint32_t>*>(counter + kVersionOffset);
}
bool version_layout_checked() noexcept {
  static const bool ok = [] {
    try {
      c10::VariableVersion version(7);
      std::atomic<uint32_t>* v = version_atomic(version);
      if (v == nullptr || v->load() != 7 || version.current_version() != 7) return false;
      version.set_version(123457);
      if (v->load() != 123457) return false;
      v->store(123458);
      return version.current_version() == 123458;
    } catch (...) {
      return false;
    }
  }();
  return ok;
}

}  // namespace

namespace {

// Where TensorImpl keeps its autograd meta (a private unique_ptr, so no accessor gives its address): the one
// pointer-sized slot of a tensor that requires grad holding autograd_meta(); -1 if none or several do.
int64_t autograd_meta_offset() {
  at::Tensor grad = at::empty({1});
  grad.set_requires_grad(true);
  const c10::TensorImpl* impl = grad.unsafeGetTensorImpl();
  const void* meta = impl->autograd_meta();
  int64_t found = -1;
  for (size_t at = 0; meta != nullptr && at + sizeof(void*) <= sizeof(c10::TensorImpl); at += alignof(void*)) {
    const void* slot;
    std::memcpy(&slot, reinterpret_cast<const char*>(impl) + at, sizeof slot);
    if (slot != meta) continue;
    if (found >= 0) return -1;
    found = static_cast<int64_t>(at);
  }
  return found;
}

template <class T>
T read_at(const void* base, int64_t offset) noexcept {
  T value;
  std::memcpy(&value, static_cast<const char*>(base) + offset, sizeof value);
  return value;
}

// Checks `layout` on a tensor of its own: a plain one, one that requires grad, and an inference one.
bool layout_holds(const TDBAutogradLayout& layout) {
  at::Tensor plain = at::empty({1});
  at::Tensor grad = at::empty({1});
  grad.set_requires_grad(true);
  at::Tensor inference;
  {
    c10::InferenceMode guard;
    inference = at::empty({1});
  }
  for (const at::Tensor* t : {&plain, &grad, &inference}) {
    c10::TensorImpl* impl = t->unsafeGetTensorImpl();
    PyObject* obj = THPVariable_Wrap(*t);
    if (obj == nullptr) return false;
    const bool same_impl = read_at<c10::TensorImpl*>(obj, layout.impl_offset) == impl;
    Py_DECREF(obj);
    if (!same_impl) return false;
    if (read_at<const void*>(impl, layout.autograd_meta_offset) != static_cast<const void*>(impl->autograd_meta()))
      return false;
    if ((read_at<const void*>(impl, layout.autograd_meta_offset) == nullptr) == t->requires_grad()) return false;
    char* counter = read_at<char*>(impl, layout.version_counter_offset);
    if ((counter != nullptr) != impl->version_counter().enabled()) return false;
    if (counter != nullptr) {
      const uint32_t before = impl->version_counter().current_version();
      auto* v = reinterpret_cast<std::atomic<uint32_t>*>(counter + layout.version_offset);
      if (v->load() != before) return false;
      impl->bump_version();
      if (v->load() != before + 1) return false;
    }
  }
  return true;
}

}  // namespace

// The layout a consumer header reads inline (dlpack.h, autograd.h), or nullptr when it could not be made sure of
// on this torch (consumers then call requires_grad_or_unknown and bump_version_or_unknown). Needs the GIL once.
const TDBAutogradLayout* autograd_layout() noexcept {
  static const TDBAutogradLayout* const checked = []() -> const TDBAutogradLayout* {
    static TDBAutogradLayout layout{};
    try {
      if (!version_layout_checked()) return nullptr;
      at::Tensor t = at::empty({1});
      PyObject* obj = THPVariable_Wrap(t);
      if (obj == nullptr) {
        PyErr_Clear();
        return nullptr;
      }
      c10::TensorImpl* impl = t.unsafeGetTensorImpl();
      // the at::Tensor in the object, whose only member is the TensorImpl pointer
      layout.impl_offset = reinterpret_cast<const char*>(&unpack_tensor(obj)) - reinterpret_cast<const char*>(obj);
      Py_DECREF(obj);
      static_assert(sizeof(at::Tensor) == sizeof(void*), "at::Tensor: one intrusive_ptr");
      const char* base = reinterpret_cast<const char*>(impl);
      layout.autograd_meta_offset = autograd_meta_offset();
      if (layout.autograd_meta_offset < 0) return nullptr;
      layout.version_counter_offset = reinterpret_cast<const char*>(&impl->version_counter()) - base;
      layout.version_offset = kVersionOffset;  // checked with the rest by version_layout_checked() and layout_holds()
      layout.types[0] = THPVariableClass;
      layout.types[1] = ParameterClass;
      return layout_holds(layout) ? &layout : nullptr;
    } catch (...) {
      return nullptr;
    }
  }();
  return checked;
}

// As torch.autograd.graph.increment_version(obj) for a torch.Tensor or nn.Parameter exactly: an inference tensor
// has no version counter and is left as it is. The increment is atomic, as torch's own: views of one base share
// one counter, and threads writing disjoint views bump it at once (a load and a store would lose bumps, and could
// take the counter back below a value torch set). Subclasses go
// to the consumer's Python call (-1), so that no Python API is needed here: consumers may call this without the
// GIL (a call guard that releases it).
int bump_version_or_unknown(PyObject* obj) noexcept {
  if (!is_exact_torch_tensor(obj)) return -1;
  c10::TensorImpl* impl = unpack_tensor(obj).unsafeGetTensorImpl();
  if (C10_LIKELY(version_layout_checked())) {
    if (std::atomic<uint32_t>* v = version_atomic(impl->version_counter()))
      v->fetch_add(1, std::memory_order_relaxed);
  } else if (impl->version_counter().enabled()) {
    impl->bump_version();  // no counter: nothing to bump, nothing thrown
  }
  return 0;
}

int managed_tensor_from_py_object_no_sync(void* py_object, DLManagedTensorVersioned** out) noexcept {
  auto* obj = static_cast<PyObject*>(py_object);
  if (C10_UNLIKELY(obj == nullptr || out == nullptr || !is_exact_torch_tensor(obj))) return managed_checked(obj, out);
  *out = nullptr;
  return guarded([&] { *out = export_owning(unpack_tensor(obj)); });
}

}  // namespace tdb
