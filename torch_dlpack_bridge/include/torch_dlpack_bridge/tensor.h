/*!
 * \file torch_dlpack_bridge/tensor.h
 * \brief Typed tensor parameters for kernels: the element type, rank, fixed sizes, memory order, device type
 *        and writability a kernel accepts, declared in its signature and checked when the argument is taken;
 *        plus accessors (`a(i, j)`) that a CUDA kernel can take by value. Header-only, torch-free, C++17.
 *
 * \code{.cpp}
 * #include <torch_dlpack_bridge/tensor.h>  // or pybind11.h / nanobind.h, which include it
 *
 * using Points =
 *     tdb::Tensor<const float, tdb::shape<-1, 3>, tdb::c_contig, tdb::device::cpu>;
 * using Out = tdb::Tensor<float, tdb::ndim<1>, tdb::device::cpu>;
 *
 * // pybind11 / nanobind: the casters check the constraints before the call
 * void norms(Points p, Out out) {
 *   auto a = p.view();    // tdb::ContiguousView<const float, 2>: a(i, j)
 *   auto o = out.view();  // tdb::StridedView<float, 1>: o(i), strides in elements
 *   for (int64_t i = 0; i < a.size(0); ++i)
 *     o(i) = std::sqrt(a(i, 0) * a(i, 0) + a(i, 1) * a(i, 1) + a(i, 2) * a(i, 2));
 * }
 * \endcode
 *
 * The include that gives the typed API; its parts are dtypes.h (element types), annotations.h (the annotations
 * and what a Tensor<Ts...> declares), accessors.h (StridedView, ContiguousView) and signature.h (the type in
 * Python signatures). It includes consumer.h: a tdb::Tensor is a tdb::TensorView.
 *
 * The names follow nanobind's `nb::ndarray<float, nb::shape<-1, 3>, nb::c_contig, nb::device::cuda>`:
 * annotations come in any order after (or before) the element type, each at most once.
 *
 *  - element type: `float`, `double`, `int8_t` ... `uint64_t`, `bool`, `std::complex<float|double>`, or a tag
 *    type for the DLPack types C++ has no name for (`tdb::bfloat16`, `tdb::float16`, `tdb::float8_e4m3fn`,
 *    ...; dtypes.h); any other type through a `tdb::dtype_traits` specialization (e.g. `__nv_bfloat16`).
 *    `const T` accepts read-only tensors; a non-const `T` requires a writable one. No element type: any dtype.
 *  - `tdb::shape<-1, 3>`: the rank and the sizes that are fixed (-1: any size). `tdb::ndim<2>`: the rank only.
 *  - `tdb::c_contig` (row-major dense), `tdb::f_contig` (column-major dense), `tdb::any_contig` (the default).
 *  - `tdb::device::cpu`, `tdb::device::cuda`, ... (`tdb::device::type<kDLXXX>` for any DLDeviceType): the
 *    device type; any device id.
 *  - `tdb::ro`: read-only, as `const T` (also for a tensor without an element type).
 *  - `tdb::named<kName>`: the argument's name in the errors tdb raises itself (`static constexpr char kName[] =
 *    "x";`): the raw CPython flavour, and checks in a function's body (`tdb::check_same_shape(x, y)`); otherwise
 *    "tensor". A binding library's own error names parameters from its `py::arg` / `nb::arg`.
 *
 * Checks: a satisfied constraint costs one compare (contiguity: one per dimension, unrolled for a declared
 * rank), all made on the DLTensor the producer filled. A violated one throws `tdb::Error` naming the argument
 * and the expectation, as the `check_*` functions do, in this order: dtype (TypeError), rank, fixed sizes,
 * device type, memory order, writability (ValueError). A pybind11 / nanobind parameter raises none of them: a
 * tensor that it does not take is an argument that does not match, and the binding library tries the next
 * overload, then raises its TypeError listing the overloads (pybind11.h).
 *
 * Writability: DLPack's non-owning exchange path carries no flags, so a torch.Tensor taken through the
 * exchange table is never read-only; a tensor exported with `DLPACK_FLAG_BITMASK_READ_ONLY` (a read-only NumPy
 * array, through `__dlpack__`) is, and a non-const parameter refuses it. A non-const parameter also refuses a
 * tensor with a dimension of size > 1 and stride 0 (`torch.ones(3).expand(2, 3)`: a kernel writing it would
 * write each element twice), as torch's in-place operations do; other overlapping strides are not detected.
 * Read-only parameters take expanded tensors; a size-1 dimension may have any stride. And a non-const parameter
 * follows torch's autograd as its in-place operations do (autograd.h): in grad mode it refuses a tensor that
 * requires grad (RuntimeError where tdb raises it, as torch does), under `torch.no_grad()` it takes it; and every
 * tensor it takes gets its version counter bumped once, when the kernel is chosen (commit()), whether or not it
 * requires grad. That costs two C calls per written torch.Tensor (a few ns).
 */
#ifndef TORCH_DLPACK_BRIDGE_TENSOR_H_
#define TORCH_DLPACK_BRIDGE_TENSOR_H_

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "torch_dlpack_bridge/accessors.h"
#include "torch_dlpack_bridge/annotations.h"
#include "torch_dlpack_bridge/autograd.h"
#include "torch_dlpack_bridge/config.h"
#include "torch_dlpack_bridge/consumer.h"
#include "torch_dlpack_bridge/dtypes.h"
#include "torch_dlpack_bridge/signature.h"

namespace tdb {

namespace detail {

/*! \brief Row-major density, exactly as tdb::is_contiguous says it (size-1 and empty dimensions). */
inline bool c_dense_exact(int32_t n, const int64_t* sizes, const int64_t* strides) {
  int64_t expected = 1;
  for (int32_t d = n - 1; d >= 0; --d) {
    if (sizes[d] == 0) return true;
    if (sizes[d] != 1 && strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}
/*!
 * \brief Row-major density over `n` dimensions (n is a constant for a declared rank: the loop unrolls). The
 * common case, every stride the row-major one, costs one compare per dimension; anything else (size-1 or empty
 * dimensions with other strides) gets the exact test.
 */
inline bool c_dense(int32_t n, const int64_t* sizes, const int64_t* strides) {
  int64_t expected = 1;
  for (int32_t d = n - 1; d >= 0; --d) {
    if (strides[d] != expected) return c_dense_exact(n, sizes, strides);
    expected *= sizes[d];
  }
  return true;
}
/*! \brief Column-major density over `n` dimensions. */
inline bool f_dense(int32_t n, const int64_t* sizes, const int64_t* strides) {
  int64_t expected = 1;
  for (int32_t d = 0; d < n; ++d) {
    if (sizes[d] == 0) return true;
    if (sizes[d] != 1 && strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

/*!
 * \brief True when a dimension of size > 1 has stride 0 (an expanded tensor: several indices reach one element)
 * and the tensor has elements. `n` is a constant for a declared rank: the loop unrolls. The overlap that is cheap
 * to see, as torch's own in-place operations see it; other overlaps (e.g. strides (1, 1) for shape (2, 2)) pass.
 */
inline bool expanded(int32_t n, const int64_t* sizes, const int64_t* strides) {
  bool zero_stride = false;
  for (int32_t d = 0; d < n; ++d) zero_stride |= (sizes[d] > 1) & (strides[d] == 0);
  if (!zero_stride) return false;
  for (int32_t d = 0; d < n; ++d)
    if (sizes[d] == 0) return false;  // no element: nothing written twice
  return true;
}

/*! \brief Tag for the casters' constructor that leaves the check to them (see Tensor). */
struct unchecked_t {};
constexpr unchecked_t unchecked{};

}  // namespace detail

/*!
 * \brief A tensor parameter with declared constraints: `Tensor<float, shape<-1, 3>, c_contig, device::cuda>`.
 * It is a tdb::TensorView (non-owning, valid during the call; every TensorView accessor and `check_*` function works on
 * it) whose constructor also checks the constraints (see the file comment for the annotations, the order of
 * the checks and the messages), plus typed access: `data()` as `Scalar*`, and `view()`, an indexable
 * accessor of rank `Rank` that can be passed by value to a CUDA kernel.
 *
 * As a pybind11 / nanobind parameter (pybind11.h, nanobind.h), a tensor that violates a constraint is an
 * argument that does not match: the next overload is tried (so `f<float>` and `f<double>` bound under one name
 * dispatch by dtype, and rank- or device-typed overloads by rank or device), and when none takes the call the
 * binding library raises its TypeError listing every overload with its constraints.
 */
template <class... Ts>
class Tensor : public TensorView {
  using Spec = detail::TensorSpec<Ts...>;

 public:
  /*! \brief The element type (const when read-only); void when the parameter accepts any dtype. */
  using Scalar = typename Spec::Scalar;
  /*! \brief The declared rank, or -1 when any rank is accepted. */
  static constexpr int32_t Rank = Spec::kRank;
  /*! \brief True when read-only tensors are accepted (const element type or tdb::ro). */
  static constexpr bool ReadOnly = Spec::kReadOnly;
  /*! \brief True for `c_contig` parameters: view() is a ContiguousView. */
  static constexpr bool CContig = std::is_same<typename Spec::Order, c_contig>::value;
  /*! \brief True for `f_contig` parameters. */
  static constexpr bool FContig = std::is_same<typename Spec::Order, f_contig>::value;
  /*! \brief The required device type as an int (a DLDeviceType), or -1 for any device. */
  static constexpr int32_t DeviceType = Spec::kDevice;
  /*! \brief The name errors use unless the constructor is given one: tdb::named<...>, else "tensor". */
  static constexpr const char* DefaultName = Spec::kName;

  /*!
   * \brief Takes `obj` (borrowed) as a TensorView named `name` and checks the constraints. Throws tdb::Error:
   * TypeError for a non-tensor or a wrong dtype, ValueError for another violated constraint, or the
   * producer's own error. For extension functions written against CPython directly (`METH_FASTCALL`).
   */
  TDB_ALWAYS_INLINE explicit Tensor(PyObject* obj, const char* name = Spec::kName) : TensorView(obj, name) {
    check(*this);
    commit();
  }
  /*! \brief As above with type(obj)'s table already looked up (nullptr: through `obj.__dlpack__()`). */
  TDB_ALWAYS_INLINE Tensor(PyObject* obj, const DLPackExchangeAPI* api, const char* name) : TensorView(obj, api, name) {
    check(*this);
    commit();
  }
  /*!
   * \brief Adopts a view and checks the constraints against it (throws tdb::Error naming the view). These three
   * constructors are a kernel's own: a written tensor's version counter is bumped here (see commit()).
   */
  explicit Tensor(TensorView&& view) : TensorView(std::move(view)) {
    check(*this);
    commit();
  }
  /*!
   * \private \brief For the binding casters: takes `obj` without checking; they call satisfied_by() while the
   * binding library tries overloads, and commit() once theirs is chosen.
   */
  TDB_ALWAYS_INLINE Tensor(detail::unchecked_t, PyObject* obj, const DLPackExchangeAPI* api, const char* name)
      : TensorView(detail::lent, obj, api, name) {}
  /*! \brief Moves the view (and any owning export it holds), as TensorView does. */
  Tensor(Tensor&&) noexcept = default;
  /*! \brief Move assignment, as TensorView's. */
  Tensor& operator=(Tensor&&) noexcept = default;

  /*! \brief True when `v` satisfies every constraint: one compare per constraint, never throws. */
  static TDB_ALWAYS_INLINE bool satisfied_by(const TensorView& v) noexcept { return satisfied_by(v, nullptr); }
  /*! \private \brief As above, with the autograd functions of the view's type when the caller has them. */
  static TDB_ALWAYS_INLINE bool satisfied_by(const TensorView& v, const detail::AutogradFunctions* autograd) noexcept {
    (void)autograd;  // (a read-only parameter asks autograd nothing)
    const DLTensor& t = v.dl();
    if constexpr (Spec::kHasDtype) {
      if (detail::dtype_key(t.dtype) != detail::spec_dtype<Spec>::key) return false;
    }
    if constexpr (Rank >= 0) {
      if (t.ndim != Rank) return false;
      if (!detail::fixed_sizes<typename Spec::Shape>::ok(t.shape)) return false;
    }
    if constexpr (Spec::kDevice >= 0) {
      if (static_cast<int32_t>(t.device.device_type) != Spec::kDevice) return false;
    }
    if constexpr (CContig) {
      if (!detail::c_dense(Rank >= 0 ? Rank : t.ndim, t.shape, t.strides)) return false;
    }
    if constexpr (FContig) {
      if (!detail::f_dense(Rank >= 0 ? Rank : t.ndim, t.shape, t.strides)) return false;
    }
    if constexpr (!ReadOnly) {
      if (v.read_only()) return false;
      // A dense order has no stride 0 on a dimension of size > 1: known without a look.
      if constexpr (!CContig && !FContig) {
        if (detail::expanded(Rank >= 0 ? Rank : t.ndim, t.shape, t.strides)) return false;
      }
      // Last, as it may call Python code (a subclass's requires_grad). No effect: the bump is commit()'s.
      if (detail::autograd_refuses_write(v.object(), autograd)) return false;
    }
    return true;
  }
  /*!
   * \brief For a written parameter (non-const element type), bumps the tensor's version counter once, as torch's
   * in-place operations do (autograd.h); nothing for a read-only one. Call it once the kernel that writes the
   * tensor is chosen: the checking constructors do, and the binding casters when they convert the argument for
   * the chosen overload, so that a refused call, or an overload that tried the tensor and was not chosen, leaves
   * the counter as it was. Never throws.
   */
  TDB_ALWAYS_INLINE void commit() const noexcept { commit(nullptr); }
  /*! \private \brief As above, with the autograd functions of the tensor's type when the caller has them. */
  TDB_ALWAYS_INLINE void commit(const detail::AutogradFunctions* autograd) const noexcept {
    if constexpr (!ReadOnly) detail::commit_write(object(), autograd);
    else (void)autograd;
  }
  /*! \brief Throws tdb::Error for the first constraint `v` violates (named with v.name()); returns otherwise. */
  static TDB_ALWAYS_INLINE void check(const TensorView& v) {
    if (!satisfied_by(v)) fail(v);
  }
  /*! \brief A readable form of the constraints, e.g. `float32, shape [-1, 3], c_contig, device cuda, writable`. */
  static std::string describe() {
    std::string s = Spec::kHasDtype ? dtype_name(spec_dtype()) : std::string("any dtype");
    if constexpr (Rank >= 0) s += rank_text();
    if constexpr (CContig) s += ", c_contig";
    if constexpr (FContig) s += ", f_contig";
    if constexpr (Spec::kDevice >= 0) s += ", device " + device_type_name(static_cast<DLDeviceType>(Spec::kDevice));
    s += ReadOnly ? ", read-only" : ", writable";
    return s;
  }

  using TensorView::data;
  /*! \brief Pointer to the first element (`data + byte_offset`), typed with the element type. */
  Scalar* data() const { return TensorView::data<Scalar>(); }

  /*!
   * \brief The indexable accessor: a `ContiguousView<Scalar, Rank>` for a `c_contig` parameter (no stride multiply
   * on the last index), else a `StridedView<Scalar, Rank>`. `U` reinterprets the elements as another type of the
   * same size (e.g. `view<__half>()` for a tdb::float16 tensor); const is kept for read-only parameters.
   */
  template <class U = Scalar>
  auto view() const {
    using E = element_as<U>;
    if constexpr (CContig) {
      return ContiguousView<E, Rank>(reinterpret_cast<E*>(TensorView::data<char>()), shape());
    } else {
      return StridedView<E, Rank>(reinterpret_cast<E*>(TensorView::data<char>()), shape(), strides());
    }
  }
  /*! \brief A StridedView whatever the memory order (strides from the tensor). */
  template <class U = Scalar>
  auto strided_view() const {
    using E = element_as<U>;
    return StridedView<E, Rank>(reinterpret_cast<E*>(TensorView::data<char>()), shape(), strides());
  }

 private:
  template <class U>
  struct element_as_impl {
    static_assert(Spec::kHasDtype, "tdb::Tensor::view: declare an element type (e.g. Tensor<float, ...>)");
    static_assert(Rank >= 0, "tdb::Tensor::view: declare the rank (tdb::shape<...> or tdb::ndim<N>)");
    static_assert(!std::is_void<U>::value && sizeof(std::remove_const_t<U>) ==
                                                 sizeof(std::conditional_t<std::is_void<Scalar>::value, char,
                                                                           std::remove_const_t<Scalar>>),
                  "tdb::Tensor::view<U>: U must have the size of the element type");
    using type = std::conditional_t<ReadOnly, const std::remove_const_t<U>, U>;
  };
  template <class U>
  using element_as = typename element_as_impl<U>::type;

  static constexpr DLDataType spec_dtype() {
    if constexpr (Spec::kHasDtype) return detail::spec_dtype<Spec>::value;
    else return DLDataType{0, 0, 0};
  }
  static std::string rank_text() {
    if constexpr (std::is_void<typename Spec::Shape>::value) {
      return ", " + std::to_string(Rank) + " dimension(s)";
    } else {
      return ", shape " + detail::fixed_sizes<typename Spec::Shape>::text();
    }
  }
  /*! \brief Raises the first violated constraint (the slow path, out of line). */
  [[noreturn]] static TDB_NOINLINE void fail(const TensorView& v) {
    const DLTensor& t = v.dl();
    const char* name = v.name();
    if constexpr (Spec::kHasDtype) check_dtype(t, name, spec_dtype());
    if constexpr (Rank >= 0) {
      check_ndim(t, name, Rank);
      detail::fixed_sizes<typename Spec::Shape>::check(t, name);
    }
    if constexpr (Spec::kDevice >= 0) check_device(t, name, static_cast<DLDeviceType>(Spec::kDevice));
    if constexpr (CContig) check_contiguous(t, name);
    if constexpr (FContig) {
      if (!detail::f_dense(t.ndim, t.shape, t.strides))
        throw Error(PyExc_ValueError, detail::arg(name) + "expected a column-major (f_contig) tensor, got strides " +
                                          shape_str(t.ndim, t.strides) + " for shape " + shape_str(t.ndim, t.shape));
    }
    if constexpr (!ReadOnly) {
      // As check_writable() says it; a parameter that only reads declares a const element type (or tdb::ro).
      if (v.read_only()) throw Error(PyExc_ValueError, detail::arg(name) + "is read-only");
      if (detail::expanded(t.ndim, t.shape, t.strides))
        throw Error(PyExc_ValueError, detail::arg(name) + "is written, and more than one index reaches one element "
                                      "(strides " + shape_str(t.ndim, t.strides) + " for shape " +
                                      shape_str(t.ndim, t.shape) + "; an expanded tensor): pass a copy, "
                                      "or declare the parameter read-only (const T or tdb::ro)");
      // torch's RuntimeError, as its own in-place operations raise it (autograd.h).
      if (const char* why = detail::autograd_refuses_write(v.object()))
        throw Error(PyExc_RuntimeError, detail::arg(name) + why);
    }
    throw Error(PyExc_RuntimeError, detail::arg(name) + "violates " + describe());  // not reached
  }
};

namespace detail {

/*!
 * \brief A tdb::Tensor as a binding library's own std::optional or std::vector caster holds it while it tries
 * overloads: the same tensor under a type whose caster does not commit (those casters convert each element as
 * they load it, before the overload is chosen). The binding headers' container casters convert these into
 * tdb::Tensor and commit() each one when the container is converted for the chosen overload (pybind11.h,
 * nanobind.h).
 */
template <class V>
struct Uncommitted : V {
  using V::V;
};

/*! \brief The chosen overload's container: each element moved out of `from` and committed (see Uncommitted). */
template <class V>
std::vector<V> committed(std::vector<Uncommitted<V>>&& from) {
  std::vector<V> out;
  out.reserve(from.size());
  for (Uncommitted<V>& element : from) {
    element.commit();
    out.push_back(std::move(element));
  }
  return out;
}
/*! \brief As above for a std::optional. */
template <class V>
std::optional<V> committed(std::optional<Uncommitted<V>>&& from) {
  if (!from) return std::nullopt;
  from->commit();
  return std::optional<V>(std::move(*from));
}

}  // namespace detail

}  // namespace tdb

#endif  // TORCH_DLPACK_BRIDGE_TENSOR_H_
