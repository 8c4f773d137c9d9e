/*!
 * \file torch_dlpack_bridge/view.h
 * \brief The non-owning view `tdb::TensorView`: a DLTensor describing a Python tensor argument, filled on
 *        the stack by the producer's table during the call (or owning a `__dlpack__` export).
 *
 * The base of every typed parameter (tensor.h). Included by allocate.h and checks.h (consumer.h includes it for
 * raw-CPython kernels).
 */
#ifndef TORCH_DLPACK_BRIDGE_VIEW_H_
#define TORCH_DLPACK_BRIDGE_VIEW_H_

#include <cstdint>

#include "torch_dlpack_bridge/call.h"
#include "torch_dlpack_bridge/config.h"
#include "torch_dlpack_bridge/dlpack.h"
#include "torch_dlpack_bridge/dltensor.h"
#include "torch_dlpack_bridge/errors.h"
#include "torch_dlpack_bridge/managed.h"
#include "torch_dlpack_bridge/table.h"

namespace tdb {

namespace detail {
/*! \brief Tag for the casters' views, which may borrow their call's export (call.h). */
struct lent_t {};
constexpr lent_t lent{};
/*! \brief Tag for the view of a description taken earlier (refusals.h words a refusal with it after the call). */
struct described_t {};
constexpr described_t described{};
}  // namespace detail

/*!
 * \brief A DLTensor describing a Python tensor argument, filled on the stack by the producer's
 * `dltensor_from_py_object_no_sync`: no allocation, no reference taken. It owns nothing and is valid only
 * while `obj` is alive and unchanged, i.e. during the extension call that received `obj` (do not keep it,
 * and do not release the GIL while other threads may resize the tensor). If the producer has no
 * `dltensor_from_py_object_no_sync`, or no table at all (then `obj.__dlpack__()` is used), the view holds
 * an owning export instead, freed with the view; it keeps the producer's data alive until then.
 * `name` (a string literal, borrowed) names the argument in every error message.
 */
class TensorView {
 public:
  /*! \brief Describes `obj` (borrowed). Throws TypeError for a non-tensor, or the producer's error, named. */
  TDB_ALWAYS_INLINE TensorView(PyObject* obj, const char* name)
      : TensorView(obj, find_exchange_api(Py_TYPE(obj)), name) {}
  /*!
   * \brief Describes `obj` (borrowed) through `api`, the table find_exchange_api(Py_TYPE(obj)) returned
   * (nullptr: through `obj.__dlpack__()`). For type casters that have looked the table up already.
   */
  TDB_ALWAYS_INLINE TensorView(PyObject* obj, const DLPackExchangeAPI* api, const char* name)
      : TensorView(obj, api, name, false) {}
  /*!
   * \private \brief For the binding casters: as above, except that a tensor taken through `__dlpack__` while a
   * wrapped call of this module is open (`tdb::explain_refusals`) is that call's export, lent: its producer is
   * asked once per call, however many overloads and passes try it (call.h).
   */
  TDB_ALWAYS_INLINE TensorView(detail::lent_t, PyObject* obj, const DLPackExchangeAPI* api, const char* name)
      : TensorView(obj, api, name, true) {}
  /*!
   * \private \brief A view of `t`, a description taken earlier (its shape and strides are the caller's; `obj` is only
   * named): refusals.h runs a typed parameter's checks on it to word a refusal after the call. Owns nothing.
   */
  TensorView(detail::described_t, PyObject* obj, const DLTensor& t, bool read_only, const char* name) noexcept
      : t_(t), obj_(obj), name_(name), api_(nullptr), read_only_(read_only) {}
  TensorView(const TensorView&) = delete;
  TensorView& operator=(const TensorView&) = delete;
  /*! \brief Moves the view (and any owning export it holds); shape/strides stay where they were. */
  TensorView(TensorView&&) noexcept = default;
  /*! \brief As the move constructor, releasing any export this view held (std::variant's casters assign). */
  TensorView& operator=(TensorView&&) noexcept = default;

  /*! \brief The DLTensor (shape/strides/data owned by the producer or by this view). */
  const DLTensor& dl() const { return t_; }
  /*! \brief The argument name used in errors. */
  const char* name() const { return name_; }
  /*! \brief The Python object described (borrowed: valid as long as the view), e.g. for autograd's checks. */
  PyObject* object() const { return obj_; }
  /*!
   * \brief Renames the argument for later error messages (`name` is borrowed: use a string literal).
   * For views made by a binding library's type caster, which cannot know the parameter's name.
   */
  TensorView& set_name(const char* name) {
    name_ = name;
    return *this;
  }
  /*!
   * \brief The producer's table (static), e.g. for allocate() and current_stream(); nullptr for a tensor
   * taken through `__dlpack__` (its producer publishes no table).
   */
  const DLPackExchangeAPI* api() const { return api_; }
  // Shortcuts into dl(): borrowed values, valid as long as the view.
  /*! \brief The number of dimensions (0 for a scalar). */
  int32_t ndim() const { return t_.ndim; }
  /*! \brief The size of dimension `dim` (0 <= dim < ndim(), unchecked). */
  int64_t size(int32_t dim) const { return t_.shape[dim]; }
  /*! \brief The stride of dimension `dim` in elements, not bytes (0 <= dim < ndim(), unchecked). */
  int64_t stride(int32_t dim) const { return t_.strides[dim]; }
  /*! \brief The ndim() sizes (borrowed; not to be read for a scalar). */
  const int64_t* shape() const { return t_.shape; }
  /*! \brief The ndim() strides in elements (borrowed; present whenever ndim() > 0). */
  const int64_t* strides() const { return t_.strides; }
  /*! \brief The element type, e.g. tdb::kFloat32. */
  DLDataType dtype() const { return t_.dtype; }
  /*! \brief Where the data lives: device type and index, e.g. {kDLCPU, 0}. */
  DLDevice device() const { return t_.device; }
  /*! \brief The number of elements: the product of the sizes (1 for a scalar). */
  int64_t numel() const { return tdb::numel(t_); }
  /*! \brief Whether the elements are dense in row-major order (size-1 dims and empty tensors ignore strides). */
  bool is_contiguous() const { return tdb::is_contiguous(t_); }
  /*! \brief True only when the producer said so (the non-owning path carries no flags: then false). */
  bool read_only() const { return read_only_; }
  /*! \brief Typed pointer to the first element (data + byte_offset); memory owned by the producer. */
  template <class T>
  T* data() const { return data_ptr<T>(t_); }

 private:
  /*! \brief Both constructors above: `lend` (a constant once inlined) says whether an export may be the call's. */
  TDB_ALWAYS_INLINE TensorView(PyObject* obj, const DLPackExchangeAPI* api, const char* name, bool lend)
      : obj_(obj), name_(name), api_(api) {
    if (api_ && api_->dltensor_from_py_object_no_sync) {  // the fast path: no allocation, no reference
      if (api_->dltensor_from_py_object_no_sync(obj, &t_) != 0) detail::throw_pending(name);
      detail::check_described(t_, name);
    } else {
      export_owned(lend && !api_);
    }
  }
  /*! \brief The slow path: an owning export (checked by from_python()), or the call's, lent when `lend`. */
  TDB_NOINLINE void export_owned(bool lend) {
    const DLManagedTensorVersioned* m = lend ? detail::lent_export(obj_, name_) : nullptr;
    if (!m) {
      owned_ = ManagedTensor::from_python(obj_, api_, name_);
      m = owned_.get();
    }
    t_ = m->dl_tensor;
    read_only_ = (m->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0;
  }

  DLTensor t_{};
  PyObject* obj_;
  const char* name_;
  const DLPackExchangeAPI* api_;
  ManagedTensor owned_;
  bool read_only_ = false;
};

}  // namespace tdb

#endif  // TORCH_DLPACK_BRIDGE_VIEW_H_
