// The one mapping between torch and DLPack dtypes and devices, shared by export, import, allocation and
// streams. Inline because the export functions consult it on every call.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "errors.h"
#include "torch_dlpack_bridge/dlpack.h"

#if __has_include(<torch/headeronly/version.h>)
#include <torch/headeronly/version.h>
#else
#include <torch/version.h>
#endif

// Compares the torch we compile against with major.minor as a pair, so the test still holds at torch 3.0.
#define TDB_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace tdb {

// Marks a dtype DLPack cannot describe; no real DLDataType has zero bits.
constexpr DLDataType kNoDLDataType{0, 0, 0};

// The mapping, written as a switch (the source of truth); dl_dtype_of below reads a table built from it.
constexpr DLDataType dl_dtype_switch(c10::ScalarType t) noexcept {
  using S = c10::ScalarType;
  switch (t) {
    case S::Bool: return {kDLBool, 8, 1};
    case S::Byte: return {kDLUInt, 8, 1};
    case S::UInt16: return {kDLUInt, 16, 1};
    case S::UInt32: return {kDLUInt, 32, 1};
    case S::UInt64: return {kDLUInt, 64, 1};
    case S::Char: return {kDLInt, 8, 1};
    case S::Short: return {kDLInt, 16, 1};
    case S::Int: return {kDLInt, 32, 1};
    case S::Long: return {kDLInt, 64, 1};
    case S::Half: return {kDLFloat, 16, 1};
    case S::Float: return {kDLFloat, 32, 1};
    case S::Double: return {kDLFloat, 64, 1};
    case S::BFloat16: return {kDLBfloat, 16, 1};
    case S::ComplexHalf: return {kDLComplex, 32, 1};
    case S::ComplexFloat: return {kDLComplex, 64, 1};
    case S::ComplexDouble: return {kDLComplex, 128, 1};
    case S::Float8_e4m3fn: return {kDLFloat8_e4m3fn, 8, 1};
    case S::Float8_e4m3fnuz: return {kDLFloat8_e4m3fnuz, 8, 1};
    case S::Float8_e5m2: return {kDLFloat8_e5m2, 8, 1};
    case S::Float8_e5m2fnuz: return {kDLFloat8_e5m2fnuz, 8, 1};
#if TDB_TORCH_AT_LEAST(2, 7)
    case S::Float8_e8m0fnu: return {kDLFloat8_e8m0fnu, 8, 1};
#endif
#if TDB_TORCH_AT_LEAST(2, 8)
    // torch packs two fp4 values per byte element; DLPack says so with two 4-bit lanes.
    case S::Float4_e2m1fn_x2: return {kDLFloat4_e2m1fn, 4, 2};
#endif
    default: return kNoDLDataType;  // quantized, bits*, and the sub-byte shells uint1..7 / int1..7
  }
}

constexpr size_t kNumScalarTypes = static_cast<size_t>(c10::ScalarType::NumOptions);

struct DLDataTypeTable {
  DLDataType of[kNumScalarTypes];
};

constexpr DLDataTypeTable make_dl_dtype_table() noexcept {
  DLDataTypeTable table{};
  for (size_t i = 0; i < kNumScalarTypes; ++i) table.of[i] = dl_dtype_switch(static_cast<c10::ScalarType>(i));
  return table;
}

inline constexpr DLDataTypeTable kDLDataTypeTable = make_dl_dtype_table();

// The DLPack dtype of a torch dtype, or kNoDLDataType. A load, not a jump table: it runs on every export.
inline DLDataType dl_dtype_of(c10::ScalarType t) noexcept {
  const auto i = static_cast<size_t>(t);
  return i < kNumScalarTypes ? kDLDataTypeTable.of[i] : kNoDLDataType;
}

// The torch dtype for a DLPack dtype; false if torch has none.
inline bool scalar_type_of(DLDataType d, c10::ScalarType& out) noexcept {
  using S = c10::ScalarType;
  auto pick = [&](S s) {
    out = s;
    return true;
  };
  if (d.code == kDLFloat4_e2m1fn) {
#if TDB_TORCH_AT_LEAST(2, 8)
    return d.bits == 4 && d.lanes == 2 && pick(S::Float4_e2m1fn_x2);
#else
    return false;
#endif
  }
  if (d.lanes != 1) return false;
  switch (d.code) {
    case kDLBool: return d.bits == 8 && pick(S::Bool);
    case kDLUInt:
      switch (d.bits) {
        case 8: return pick(S::Byte);
        case 16: return pick(S::UInt16);
        case 32: return pick(S::UInt32);
        case 64: return pick(S::UInt64);
      }
      return false;
    case kDLInt:
      switch (d.bits) {
        case 8: return pick(S::Char);
        case 16: return pick(S::Short);
        case 32: return pick(S::Int);
        case 64: return pick(S::Long);
      }
      return false;
    case kDLFloat:
      switch (d.bits) {
        case 16: return pick(S::Half);
        case 32: return pick(S::Float);
        case 64: return pick(S::Double);
      }
      return false;
    case kDLBfloat: return d.bits == 16 && pick(S::BFloat16);
    case kDLComplex:
      switch (d.bits) {
        case 32: return pick(S::ComplexHalf);
        case 64: return pick(S::ComplexFloat);
        case 128: return pick(S::ComplexDouble);
      }
      return false;
    case kDLFloat8_e4m3fn: return d.bits == 8 && pick(S::Float8_e4m3fn);
    case kDLFloat8_e4m3fnuz: return d.bits == 8 && pick(S::Float8_e4m3fnuz);
    case kDLFloat8_e5m2: return d.bits == 8 && pick(S::Float8_e5m2);
    case kDLFloat8_e5m2fnuz: return d.bits == 8 && pick(S::Float8_e5m2fnuz);
#if TDB_TORCH_AT_LEAST(2, 7)
    case kDLFloat8_e8m0fnu: return d.bits == 8 && pick(S::Float8_e8m0fnu);
#endif
  }
  return false;
}

// True when torch's CUDA device type means HIP (a ROCm build of torch). Worked out in C++ when the library
// is loaded (torch is loaded by then), so no Python module init is needed.
extern bool g_cuda_is_rocm;

// Devices whose DataPtr holds an opaque handle (MPS: an id<MTLBuffer>), not an address. DLPack carries such
// a handle in `data` untouched and the view's start in `byte_offset`.
inline bool has_opaque_data_pointers(c10::DeviceType t) noexcept { return t == c10::DeviceType::MPS; }

// The DLPack device type of a torch device type, or 0 if DLPack has none that torch maps to.
inline int32_t dl_device_type_of(c10::DeviceType t) noexcept {
  using D = c10::DeviceType;
  switch (t) {
    case D::CPU: return kDLCPU;  // pinned host memory too, as torch itself exports it
    case D::CUDA: return g_cuda_is_rocm ? kDLROCM : kDLCUDA;
    case D::XPU: return kDLOneAPI;
    case D::MPS: return kDLMetal;
    case D::PrivateUse1: return kDLExtDev;
    case D::MAIA: return kDLMAIA;
    default: return 0;
  }
}

// The torch device type for a DLPack device type; false if torch has none.
inline bool device_type_of(int32_t dl_type, c10::DeviceType& out) noexcept {
  using D = c10::DeviceType;
  switch (dl_type) {
    case kDLCPU:
    case kDLCUDAHost:  // pinned host memory is CPU memory to torch
    case kDLROCMHost: out = D::CPU; return true;
    case kDLCUDA:
    case kDLCUDAManaged: out = D::CUDA; return !g_cuda_is_rocm;
    case kDLROCM: out = D::CUDA; return g_cuda_is_rocm;
    case kDLOneAPI: out = D::XPU; return true;
    case kDLMetal: out = D::MPS; return true;
    case kDLExtDev: out = D::PrivateUse1; return true;
    case kDLMAIA: out = D::MAIA; return true;
  }
  return false;
}

// Above any real tensor's rank; keeps a corrupt ndim from walking far past a producer's arrays.
constexpr int32_t kMaxDims = 64;

// The refusals of the three checks below, out of line: their inline parts stay a few instructions.
[[noreturn]] void refuse_dtype(DLDataType d, ErrorKind kind);
[[noreturn]] void refuse_shape(int32_t ndim, const int64_t* shape);
c10::Device checked_device(DLDevice d);

// The torch dtype of `d` (throws tdb::Error of `kind` if torch has none).
inline c10::ScalarType torch_dtype_of(DLDataType d, ErrorKind kind) {
  c10::ScalarType t;
  if (C10_UNLIKELY(!scalar_type_of(d, t))) refuse_dtype(d, kind);
  return t;
}

// Element count of a DLPack shape, rejecting bad ndim, NULL or negative shapes and overflow (ValueError).
inline int64_t checked_numel(int32_t ndim, const int64_t* shape) {
  if (C10_UNLIKELY(ndim < 0 || ndim > kMaxDims || (ndim > 0 && shape == nullptr))) refuse_shape(ndim, shape);
  int64_t numel = 1;
  bool bad = false;
  for (int32_t i = 0; i < ndim; ++i) bad |= shape[i] < 0 || __builtin_mul_overflow(numel, shape[i], &numel);
  if (C10_UNLIKELY(bad)) refuse_shape(ndim, shape);
  return numel;
}

// Row-major strides for a shape (throws ValueError on overflow).
void row_major_strides(int32_t ndim, const int64_t* shape, int64_t* strides);

// The DLPack device_id of a torch device. Only XPU differs from torch's index: the oneAPI DLPack spec makes
// device_id the position in sycl::device::get_devices(), which torch's XPU hooks compute.
int32_t dl_device_id_of(c10::Device device);

// The torch device for a DLPack device, checked against the devices this process has
// (throws tdb::Error: BufferError for a device type torch lacks, ValueError for a bad index).
inline c10::Device device_of(DLDevice d) {
  return d.device_type == kDLCPU ? c10::Device(c10::DeviceType::CPU) : checked_device(d);
}

}  // namespace tdb
