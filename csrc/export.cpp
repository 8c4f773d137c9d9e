// Export: torch tensor -> DLTensor (borrowed) and DLManagedTensorVersioned (owned).
#include "torch_python.h"

#include <cstdlib>
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

// Explains why `t` cannot be exported; called only once the fast check below has failed.
[[noreturn]] void refuse(const at::Tensor& t) {
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
    fail(ErrorKind::Buffer, prefix + "a meta tensor (or a FakeTensor): it has no data");
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

// Fills `out` from `t`, borrowing shape and strides from the tensor's own metadata (no allocation).
inline void describe(const at::Tensor& t, DLTensor& out) {
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  const DLDataType dtype = dl_dtype_of(scalar_type(impl));
  const int32_t device_type = dl_device_type_of(impl->device_type());
  // The storage is read directly: has_storage() is an out-of-line call, and this pointer answers it too.
  const c10::StorageImpl* storage = impl->unsafe_storage().unsafeGetStorageImpl();
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
  char* base = static_cast<char*>(const_cast<c10::StorageImpl*>(storage)->mutable_data());
  const int64_t offset = impl->storage_offset() * static_cast<int64_t>(impl->itemsize());
  if (C10_UNLIKELY(has_opaque_data_pointers(impl->device_type()))) {
    out.data = base;  // a handle: arithmetic on it is meaningless, so DLPack carries the view's start apart
    out.byte_offset = static_cast<uint64_t>(offset);
    return;
  }
  out.data = base + offset;
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

DLManagedTensorVersioned* export_owning(c10::Storage storage, const DLTensor& view) {
  const int32_t ndim = view.ndim;
  void* memory = std::malloc(sizeof(OwnedExport) + 2 * static_cast<size_t>(ndim) * sizeof(int64_t));
  if (memory == nullptr) throw std::bad_alloc();
  auto* holder = static_cast<OwnedExport*>(memory);
  new (&holder->storage) c10::Storage(std::move(storage));  // every other field is assigned below
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

DLManagedTensorVersioned* export_owning(const at::Tensor& t) {
  DLTensor view;
  describe(t, view);
  return export_owning(t.unsafeGetTensorImpl()->unsafe_storage(), view);
}

int dltensor_from_py_object_no_sync(void* py_object, DLTensor* out) noexcept {
  auto* obj = static_cast<PyObject*>(py_object);
  if (C10_UNLIKELY(obj == nullptr || !is_torch_tensor(obj))) return raise_not_a_tensor(obj);
  if (C10_UNLIKELY(out == nullptr)) return raise_python(ErrorKind::Value, "out must not be NULL");
  return guarded([&] { describe(unpack_tensor(obj), *out); });
}

int managed_tensor_from_py_object_no_sync(void* py_object, DLManagedTensorVersioned** out) noexcept {
  auto* obj = static_cast<PyObject*>(py_object);
  if (C10_UNLIKELY(obj == nullptr || !is_torch_tensor(obj))) return raise_not_a_tensor(obj);
  if (C10_UNLIKELY(out == nullptr)) return raise_python(ErrorKind::Value, "out must not be NULL");
  *out = nullptr;
  return guarded([&] { *out = export_owning(unpack_tensor(obj)); });
}

}  // namespace tdb
