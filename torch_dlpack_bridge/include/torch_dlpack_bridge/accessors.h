/*!
 * \file torch_dlpack_bridge/accessors.h
 * \brief Accessors for device code: `tdb::StridedView` and `tdb::ContiguousView`, indexable views (`a(i, j)`)
 *        holding a pointer, sizes and strides, trivially copyable so that a CUDA kernel can take them by value.
 *        Python-free.
 *
 * Included by tensor.h, whose `Tensor::view()` makes them.
 */
#ifndef TORCH_DLPACK_BRIDGE_ACCESSORS_H_
#define TORCH_DLPACK_BRIDGE_ACCESSORS_H_

#include <cstdint>

#include "torch_dlpack_bridge/config.h"

namespace tdb {

/*!
 * \brief An indexable view of N dimensions with strides in elements: `a(i, j)` is
 * `data[i * stride(0) + j * stride(1)]`. Holds a pointer, N sizes and N strides, nothing owned: trivially
 * copyable, so a CUDA kernel can take it by value (every member is `__host__ __device__` under nvcc). Valid as
 * long as the tensor's memory is (for a parameter: during the call, or until the kernel launched on the
 * producer's stream has run). No bounds checks.
 */
template <class T, int N>
class StridedView {
 public:
  static_assert(N >= 0, "StridedView: N is the rank");
  using value_type = T;                //!< element type (const for read-only tensors)
  static constexpr int rank = N;       //!< number of dimensions

  /*! \brief An empty view (null data); assign a real one before indexing. */
  StridedView() = default;
  /*! \brief A view of `data` with `sizes` and `strides` (N each, copied; strides in elements). */
  TDB_HOST_DEVICE StridedView(T* data, const int64_t* sizes, const int64_t* strides) : data_(data) {
    for (int d = 0; d < N; ++d) {
      sizes_[d] = sizes[d];
      strides_[d] = strides[d];
    }
  }
  /*! \brief The element at index (i0, ..., iN-1): exactly N integer indices. */
  template <class... I>
  TDB_HOST_DEVICE T& operator()(I... i) const {
    static_assert(sizeof...(I) == N, "StridedView: give exactly one index per dimension");
    int64_t offset = 0;
    int d = 0;
    (void)d;
    ((offset += static_cast<int64_t>(i) * strides_[d++]), ...);
    return data_[offset];
  }
  /*! \brief `a[i]` for a one-dimensional view. */
  TDB_HOST_DEVICE T& operator[](int64_t i) const {
    static_assert(N == 1, "StridedView: operator[] is for one-dimensional views; use a(i, j, ...)");
    return data_[i * strides_[0]];
  }
  /*! \brief Size of dimension `d`. */
  TDB_HOST_DEVICE int64_t size(int d) const { return sizes_[d]; }
  /*! \brief Stride of dimension `d`, in elements. */
  TDB_HOST_DEVICE int64_t stride(int d) const { return strides_[d]; }
  /*! \brief Pointer to element (0, ..., 0). */
  TDB_HOST_DEVICE T* data() const { return data_; }
  /*! \brief Number of elements. */
  TDB_HOST_DEVICE int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < N; ++d) n *= sizes_[d];
    return n;
  }

 private:
  T* data_ = nullptr;
  int64_t sizes_[N > 0 ? N : 1] = {};
  int64_t strides_[N > 0 ? N : 1] = {};
};

/*!
 * \brief An indexable view of a row-major dense tensor: `a(i, j)` is `data[i * size(1) + j]`, the last index
 * taken as is (no stride multiply; one-dimensional views are plain pointer indexing). Row strides are computed
 * from the sizes once, when the view is made. Trivially copyable and `__host__ __device__` under nvcc, like
 * StridedView. Made by `Tensor::view()` for `c_contig` parameters; no bounds checks.
 */
template <class T, int N>
class ContiguousView {
 public:
  static_assert(N >= 0, "ContiguousView: N is the rank");
  using value_type = T;           //!< element type (const for read-only tensors)
  static constexpr int rank = N;  //!< number of dimensions

  /*! \brief An empty view (null data); assign a real one before indexing. */
  ContiguousView() = default;
  /*! \brief A view of the dense row-major array at `data` with `sizes` (N, copied). */
  TDB_HOST_DEVICE ContiguousView(T* data, const int64_t* sizes) : data_(data) {
    int64_t step = 1;
    for (int d = N - 1; d >= 0; --d) {
      sizes_[d] = sizes[d];
      strides_[d] = step;
      step *= sizes[d];
    }
  }
  /*! \brief The element at index (i0, ..., iN-1): exactly N integer indices. */
  template <class... I>
  TDB_HOST_DEVICE T& operator()(I... i) const {
    static_assert(sizeof...(I) == N, "ContiguousView: give exactly one index per dimension");
    if constexpr (N == 0) {
      return *data_;
    } else {
      const int64_t index[N] = {static_cast<int64_t>(i)...};
      int64_t offset = index[N - 1];  // the last dimension's stride is 1
      for (int d = 0; d < N - 1; ++d) offset += index[d] * strides_[d];
      return data_[offset];
    }
  }
  /*! \brief `a[i]` for a one-dimensional view. */
  TDB_HOST_DEVICE T& operator[](int64_t i) const {
    static_assert(N == 1, "ContiguousView: operator[] is for one-dimensional views; use a(i, j, ...)");
    return data_[i];
  }
  /*! \brief Size of dimension `d`. */
  TDB_HOST_DEVICE int64_t size(int d) const { return sizes_[d]; }
  /*! \brief Row-major stride of dimension `d`, in elements (the product of the later sizes). */
  TDB_HOST_DEVICE int64_t stride(int d) const { return strides_[d]; }
  /*! \brief Pointer to element (0, ..., 0); the elements follow densely. */
  TDB_HOST_DEVICE T* data() const { return data_; }
  /*! \brief Number of elements. */
  TDB_HOST_DEVICE int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < N; ++d) n *= sizes_[d];
    return n;
  }

 private:
  T* data_ = nullptr;
  int64_t sizes_[N > 0 ? N : 1] = {};
  int64_t strides_[N > 0 ? N : 1] = {};
};

}  // namespace tdb

#endif  // TORCH_DLPACK_BRIDGE_ACCESSORS_H_
