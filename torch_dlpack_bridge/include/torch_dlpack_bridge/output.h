/*!
 * \file torch_dlpack_bridge/output.h
 * \brief Typed owning outputs: a new tensor that a kernel allocates through a producer's table (torch's
 *        allocator for a torch.Tensor input, Paddle's for a Paddle one), writes through a typed view, and
 *        returns to Python as that producer's tensor. Header-only, torch-free, C++17.
 *
 * \code{.cpp}
 * #include <torch_dlpack_bridge/pybind11.h>  // or nanobind.h; both include this header
 *
 * using In = tdb::Tensor<const float, tdb::ndim<2>>;
 * using Out = tdb::OwnedTensor<float, tdb::ndim<2>>;
 *
 * Out scaled(float a, In x) {
 *   Out out = Out::empty_like(x);  // x's producer, x's device, x's shape
 *   auto o = out.view();           // tdb::ContiguousView<float, 2>
 *   auto v = x.view();
 *   for (int64_t i = 0; i < o.size(0); ++i)
 *     for (int64_t j = 0; j < o.size(1); ++j) o(i, j) = a * v(i, j);
 *   return out;                    // a torch.Tensor for a torch.Tensor x
 * }
 * \endcode
 *
 * The references are torch's `torch::empty(sizes, x.options())`, tvm-ffi's `Tensor::FromEnvAlloc` and a
 * nanobind function returning `nb::ndarray<nb::pytorch, float, ...>`; here the framework is not fixed at
 * compile time: it is the producer of the tensor the output is allocated like (or a table the kernel names).
 *
 * Annotations, as for tdb::Tensor (tensor.h): an element type (required, not const), a rank (`tdb::ndim<N>`
 * or `tdb::shape<...>`: required for view(); fixed sizes are checked at allocation), a device type
 * (`tdb::device::cuda`: checked at allocation) and `tdb::named<...>` (the output's name in errors). The memory
 * is always row-major dense (`c_contig`): DLPack's allocator makes nothing else.
 *
 * Returning: the pybind11 and nanobind casters hand the tensor to its producer's
 * `managed_tensor_to_py_object_no_sync` (a `torch.Tensor` for torch's table); a `std::tuple` of outputs becomes a
 * Python tuple (include `nanobind/stl/tuple.h` with nanobind). Functions written against CPython directly
 * return `out.to_python()`, or `tdb::to_python_tuple(std::move(a), std::move(b))` for several.
 *
 * Errors: every failure throws tdb::Error (inside `tdb::guard` or a binding function it becomes a Python
 * exception), its message starting with the output's name (``"output: "``, ``"output 'out': "`` for
 * `tdb::named<kOut>`): the producer's allocation failure with the kind it reported (MemoryError when out of
 * memory, ValueError for more bytes than torch can address), TypeError when the tensor it is allocated like
 * has no producer table (a NumPy array taken through `__dlpack__`), ValueError for a shape or device the
 * annotations refuse, BufferError when the producer's allocator returns another tensor than the one asked for
 * (tdb::allocate checks rank, sizes, dtype, device and strides: a kernel indexes its output with the sizes it
 * asked for).
 *
 * A returned torch.Tensor's storage cannot grow (`out.resize_(8)` on 4 elements: torch's RuntimeError
 * "Trying to resize storage that is not resizable"), as for any `torch.from_dlpack` tensor: torch wraps memory that
 * the DLPack tensor's deleter frees. Shrinking works; `out.clone()` is an ordinary tensor.
 */
#ifndef TORCH_DLPACK_BRIDGE_OUTPUT_H_
#define TORCH_DLPACK_BRIDGE_OUTPUT_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "torch_dlpack_bridge/consumer.h"
#include "torch_dlpack_bridge/tensor.h"

namespace tdb {

/*!
 * \brief An owning, typed, row-major dense tensor allocated through a producer's table:
 * `OwnedTensor<float, tdb::ndim<2>>`. Made by empty() or empty_like(); written through data() or view();
 * returned from a binding function as the producer's tensor (or handed to Python with to_python()).
 * Movable, not copyable; the memory is freed (the producer's deleter) when an OwnedTensor that was not
 * returned is destroyed, on any thread.
 */
template <class... Ts>
class OwnedTensor {
  using Spec = detail::TensorSpec<Ts...>;
  static_assert(Spec::kHasDtype, "tdb::OwnedTensor: declare the element type (e.g. OwnedTensor<float, ...>)");
  static_assert(!Spec::kReadOnly, "tdb::OwnedTensor: an output is written: no const element type, no tdb::ro");
  static_assert(!std::is_same<typename Spec::Order, f_contig>::value,
                "tdb::OwnedTensor: outputs are row-major (DLPack's allocator makes nothing else)");

 public:
  /*! \brief The element type. */
  using Scalar = typename Spec::Element;
  /*! \brief The declared rank, or -1 when any rank is allowed. */
  static constexpr int32_t Rank = Spec::kRank;
  /*! \brief The required device type as an int (a DLDeviceType), or -1 for any device. */
  static constexpr int32_t DeviceType = Spec::kDevice;
  /*! \brief The DLPack data type of Scalar. */
  static constexpr DLDataType dtype() { return dtype_traits<Scalar>::value; }

  /*!
   * \brief A new tensor of `shape` (sizes >= 0) on `like`'s device, allocated by `like`'s producer (its
   * `managed_tensor_allocator`), like `torch::empty(shape, x.options().dtype(...))`. The contents are
   * uninitialized. Throws tdb::Error (see the file comment).
   */
  static OwnedTensor empty(const TensorView& like, std::initializer_list<int64_t> shape) {
    return empty(like, static_cast<int32_t>(shape.size()), shape.begin());
  }
  /*! \brief empty() with a runtime rank: `ndim` sizes at `shape` (read during the call only). */
  static OwnedTensor empty(const TensorView& like, int32_t ndim, const int64_t* shape) {
    return empty(producer_of(like), like.device(), ndim, shape);
  }
  /*! \brief A new tensor with `like`'s shape and device, from `like`'s producer (as `torch::empty_like`). */
  static OwnedTensor empty_like(const TensorView& like) {
    return empty(producer_of(like), like.device(), like.ndim(), like.shape());
  }
  /*!
   * \brief A new tensor of `shape` on `device`, allocated through the table `api` that the kernel names (e.g.
   * `tdb::find_exchange_api(type)` for a tensor type it was given, or the table of an earlier argument).
   * Returned to Python, it is that producer's tensor.
   */
  static OwnedTensor empty(const DLPackExchangeAPI* api, DLDevice device, std::initializer_list<int64_t> shape) {
    return empty(api, device, static_cast<int32_t>(shape.size()), shape.begin());
  }
  /*! \brief empty() through `api` with a runtime rank. */
  static OwnedTensor empty(const DLPackExchangeAPI* api, DLDevice device, int32_t ndim, const int64_t* shape) {
    check_request(device, ndim, shape);
    // which checks what the producer made, and names this output in its errors as prefix() does
    return OwnedTensor(detail::allocate_output(Spec::kName, api, ndim, shape, dtype(), device));
  }

  /*! \brief Moves the tensor; the moved-from one is left empty. Not copyable: one owner, one deleter call. */
  OwnedTensor(OwnedTensor&&) noexcept = default;
  /*! \brief Releases this tensor's memory (if any), then takes the other's, which is left empty. */
  OwnedTensor& operator=(OwnedTensor&&) noexcept = default;
  OwnedTensor(const OwnedTensor&) = delete;
  OwnedTensor& operator=(const OwnedTensor&) = delete;

  /*! \brief Pointer to the first element (NULL when there are no elements); memory owned by this tensor. */
  Scalar* data() const { return data_ptr<Scalar>(m_.dl()); }
  /*!
   * \brief The indexable accessor, a ContiguousView<Scalar, Rank> (trivially copyable: a CUDA kernel can take
   * it by value). Valid while the memory is: until the tensor is destroyed, or, once returned, as long as the
   * Python tensor lives. `U` reinterprets the elements as another type of the same size.
   */
  template <class U = Scalar>
  ContiguousView<U, Rank> view() const {
    static_assert(Rank >= 0, "tdb::OwnedTensor::view: declare the rank (tdb::shape<...> or tdb::ndim<N>)");
    static_assert(sizeof(U) == sizeof(Scalar), "tdb::OwnedTensor::view<U>: U must have the element's size");
    return ContiguousView<U, Rank>(reinterpret_cast<U*>(data()), m_.dl().shape);
  }
  /*! \brief The DLTensor (shape, strides and data owned by this tensor). */
  const DLTensor& dl() const { return m_.dl(); }
  // Shortcuts into dl().
  /*! \brief The number of dimensions. */
  int32_t ndim() const { return m_.dl().ndim; }
  /*! \brief The size of dimension `dim` (0 <= dim < ndim(), unchecked). */
  int64_t size(int32_t dim) const { return m_.dl().shape[dim]; }
  /*! \brief The ndim() sizes (owned by this tensor). */
  const int64_t* shape() const { return m_.dl().shape; }
  /*! \brief The number of elements: the product of the sizes. */
  int64_t numel() const { return tdb::numel(m_.dl()); }
  /*! \brief Where the memory was allocated: the device of the tensor it was made like, or the one asked for. */
  DLDevice device() const { return m_.dl().device; }
  /*! \brief The producer's table that allocated it (static). */
  const DLPackExchangeAPI* api() const { return m_.api(); }
  /*!
   * \brief Hands the tensor to its producer's `managed_tensor_to_py_object_no_sync` and returns the producer's
   * Python tensor (a new reference); this object is empty after, whatever happens. Throws tdb::Error.
   */
  PyObject* to_python() { return m_.to_python(); }
  /*! \brief Gives the untyped owning handle away (this object is empty after). */
  ManagedTensor release() && { return std::move(m_); }
  /*! \brief False once returned, released or moved from. */
  explicit operator bool() const { return static_cast<bool>(m_); }

 private:
  explicit OwnedTensor(ManagedTensor m) : m_(std::move(m)) {}

  static std::string prefix() { return detail::output_prefix(Spec::kName); }
  static const DLPackExchangeAPI* producer_of(const TensorView& like) {
    if (!like.api())
      throw Error(PyExc_TypeError, prefix() + "cannot allocate like argument '" + like.name() + "': its producer "
                                   "has no DLPack exchange table (it was taken through __dlpack__)");
    return like.api();
  }
  /*! \brief The annotations' checks on what is asked for, before anything is allocated. */
  static void check_request(DLDevice device, int32_t ndim, const int64_t* shape) {
    if (ndim < 0 || (ndim > 0 && !shape)) throw Error(PyExc_ValueError, prefix() + "no shape given");
    for (int32_t i = 0; i < ndim; ++i)
      if (shape[i] < 0)
        throw Error(PyExc_ValueError, prefix() + "sizes must be >= 0, got shape " + shape_str(ndim, shape));
    if constexpr (Rank >= 0) {
      if (ndim != Rank)
        throw Error(PyExc_ValueError, prefix() + "expected " + std::to_string(Rank) + " dimension(s), got shape " +
                                          shape_str(ndim, shape));
      if constexpr (!std::is_void<typename Spec::Shape>::value) {
        if (!detail::fixed_sizes<typename Spec::Shape>::ok(shape))
          throw Error(PyExc_ValueError, prefix() + "expected shape " + detail::fixed_sizes<typename Spec::Shape>::text() +
                                            ", got " + shape_str(ndim, shape));
      }
    }
    if constexpr (DeviceType >= 0) {
      if (static_cast<int32_t>(device.device_type) != DeviceType)
        throw Error(PyExc_ValueError, prefix() + "expected a " + device_type_name(static_cast<DLDeviceType>(DeviceType)) +
                                          " tensor, asked for " + device_name(device));
    }
  }

  ManagedTensor m_;
};

/*!
 * \brief Hands every output (tdb::OwnedTensor or tdb::ManagedTensor, moved in) to its producer and returns
 * a Python tuple of the producer's tensors (a new reference), for functions written against CPython directly:
 * `return tdb::to_python_tuple(std::move(a), std::move(b));`. On failure the tensors made so far are released
 * and tdb::Error is thrown; outputs not yet handed over are freed by their destructors.
 */
template <class... Outputs>
PyObject* to_python_tuple(Outputs&&... outputs) {
  static_assert((!std::is_lvalue_reference<Outputs>::value && ...), "tdb::to_python_tuple: pass std::move(out)");
  PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(sizeof...(Outputs)));
  if (!tuple) throw Error::pending();
  Py_ssize_t i = 0;
  try {
    ((PyTuple_SET_ITEM(tuple, i, outputs.to_python()), ++i), ...);  // left to right; stops at a throw
  } catch (...) {
    Py_DECREF(tuple);  // the items set so far (the rest are NULL)
    throw;
  }
  return tuple;
}

}  // namespace tdb

#endif  // TORCH_DLPACK_BRIDGE_OUTPUT_H_
