/*!
 * \file torch_dlpack_bridge/managed.h
 * \brief The owning handle `tdb::ManagedTensor`: one exported or allocated DLManagedTensorVersioned, its
 *        deleter called exactly once (on any thread), and the way back to Python through the producer's table.
 *
 * Included by view.h (consumer.h includes it for raw-CPython kernels).
 */
#ifndef TORCH_DLPACK_BRIDGE_MANAGED_H_
#define TORCH_DLPACK_BRIDGE_MANAGED_H_

#include <cstdint>
#include <string>

#include "torch_dlpack_bridge/dlpack.h"
#include "torch_dlpack_bridge/dltensor.h"
#include "torch_dlpack_bridge/errors.h"
#include "torch_dlpack_bridge/protocol.h"
#include "torch_dlpack_bridge/table.h"

namespace tdb {

/*!
 * \brief Owns one DLManagedTensorVersioned: calls its deleter exactly once (destructor or reset()),
 * unless ownership is handed on by release() or to_python(). Movable, not copyable. Also remembers
 * the producer's table (borrowed, static) so the tensor can go back to Python.
 */
class ManagedTensor {
 public:
  /*! \brief An empty handle. */
  ManagedTensor() = default;
  /*!
   * \brief Adopts `t` (takes ownership). If its major version differs from DLPACK_MAJOR_VERSION, calls
   * the deleter at once and throws Error(BufferError), as DLPack requires.
   */
  ManagedTensor(DLManagedTensorVersioned* t, const DLPackExchangeAPI* api) : t_(t), api_(api) {
    if (t_ && t_->version.major != DLPACK_MAJOR_VERSION) {
      const uint32_t major = t_->version.major;
      reset();
      throw Error(PyExc_BufferError, "DLPack tensor of major version " + std::to_string(major) +
                                         " is not supported (need " + std::to_string(DLPACK_MAJOR_VERSION) + ")");
    }
  }
  /*!
   * \brief Exports `obj` (borrowed) and owns the result: through its type's table
   * (managed_tensor_from_py_object_no_sync) when it has one, else through `obj.__dlpack__()` (then api()
   * is nullptr). Throws TypeError naming `name` for an object that is neither, or the producer's error.
   */
  static ManagedTensor from_python(PyObject* obj, const char* name = "tensor") {
    return from_python(obj, find_exchange_api(Py_TYPE(obj)), name);
  }
  /*! \brief As the overload above, with the table already looked up (`api` nullptr: use `__dlpack__`). */
  static ManagedTensor from_python(PyObject* obj, const DLPackExchangeAPI* api, const char* name) {
    if (!api) {
      ManagedTensor m(detail::export_by_protocol(obj, name), nullptr);
      detail::check_described(m.dl(), name);
      return m;
    }
    DLManagedTensorVersioned* out = nullptr;
    if (api->managed_tensor_from_py_object_no_sync(obj, &out) != 0) detail::throw_pending(name);
    ManagedTensor m(out, api);
    detail::check_described(m.dl(), name);  // the deleter runs if this throws
    return m;
  }
  ManagedTensor(const ManagedTensor&) = delete;
  ManagedTensor& operator=(const ManagedTensor&) = delete;
  /*! \brief Takes `o`'s tensor; `o` is left empty (its destructor calls no deleter). */
  ManagedTensor(ManagedTensor&& o) noexcept : t_(o.t_), api_(o.api_) { o.t_ = nullptr; }
  /*! \brief Calls the deleter of the tensor held (if any), then takes `o`'s; `o` is left empty. */
  ManagedTensor& operator=(ManagedTensor&& o) noexcept {
    if (this != &o) {
      reset();
      t_ = o.t_;
      api_ = o.api_;
      o.t_ = nullptr;
    }
    return *this;
  }
  ~ManagedTensor() {
    if (t_) reset();  // the empty handle (e.g. inside a TensorView) costs one test, not a call
  }

  /*!
   * \brief Calls the deleter now (if any tensor is held) and empties the handle. Safe with a Python
   * exception set, and safe on any thread with or without the GIL (also after interpreter shutdown):
   * DLPack deleters take the GIL themselves when they need it.
   */
  void reset() noexcept {
    DLManagedTensorVersioned* t = t_;
    t_ = nullptr;
    if (!t || !t->deleter) return;
    // Only a thread holding the GIL has a Python error indicator to protect from a deleter that runs
    // Python code; touching it without the GIL (PyErr_Fetch) dereferences a NULL thread state.
    if (Py_IsInitialized() && PyGILState_Check()) {
      detail::ErrorStash keep;
      t->deleter(t);
    } else {
      t->deleter(t);
    }
  }
  /*! \brief Gives up ownership: the caller must call the deleter (exactly once) or pass the tensor on. */
  DLManagedTensorVersioned* release() noexcept {
    DLManagedTensorVersioned* t = t_;
    t_ = nullptr;
    return t;
  }
  /*!
   * \brief Hands the tensor to its producer's managed_tensor_to_py_object_no_sync (which takes ownership
   * whatever happens) and returns the new Python object (a new reference). The handle is empty after.
   */
  PyObject* to_python() {
    if (!t_) throw Error(PyExc_ValueError, "ManagedTensor::to_python on an empty handle");
    if (!api_)
      throw Error(PyExc_TypeError, "cannot return a tensor taken through __dlpack__ to Python: its producer "
                                   "has no DLPack exchange table (managed_tensor_to_py_object_no_sync)");
    void* out = nullptr;
    if (api_->managed_tensor_to_py_object_no_sync(release(), &out) != 0) throw Error::pending();
    return static_cast<PyObject*>(out);
  }

  /*! \brief The held tensor (still owned by this handle), or nullptr. */
  DLManagedTensorVersioned* get() const { return t_; }
  /*! \brief The held DLTensor; its shape/strides/data live until the deleter runs. Handle must be non-empty. */
  const DLTensor& dl() const { return t_->dl_tensor; }
  /*! \brief The held DLTensor, writable (e.g. to adjust a view before handing it on). Handle must be non-empty. */
  DLTensor& dl() { return t_->dl_tensor; }
  /*! \brief The producer's table (static), or nullptr (empty handle, or a tensor taken through `__dlpack__`). */
  const DLPackExchangeAPI* api() const { return api_; }
  /*! \brief DLPACK_FLAG_BITMASK_* flags of the held tensor. */
  uint64_t flags() const { return t_ ? t_->flags : 0; }
  /*! \brief Whether a tensor is held (false after a move, release() or to_python()). */
  explicit operator bool() const { return t_ != nullptr; }

 private:
  DLManagedTensorVersioned* t_ = nullptr;
  const DLPackExchangeAPI* api_ = nullptr;
};

}  // namespace tdb

#endif  // TORCH_DLPACK_BRIDGE_MANAGED_H_
