/*!
 * \file torch_dlpack_bridge/names.h
 * \brief Readable names for DLPack data types and devices, for messages ("float32", "bcomplex32", "cuda:1").
 *
 * Needs only the C++ standard library and dlpack.h, so both the consumer header and the table library use
 * it. It names the codes DLPack's main branch added after 1.3 (kDLBcomplex 18; kDLTPU 19, kDLTPUHost 20,
 * kDLAscend 21) by number, so it also compiles after an upstream 1.3 dlpack.h.
 */
#ifndef TORCH_DLPACK_BRIDGE_NAMES_H_
#define TORCH_DLPACK_BRIDGE_NAMES_H_

#include <string>

#include "torch_dlpack_bridge/dlpack.h"

namespace tdb {

/*! \brief A readable name for a data type, torch-style ("float32", "bfloat16", "float8_e4m3fn", "int8x4"). */
inline std::string dtype_name(DLDataType t) {
  static const char* const fp8[] = {"float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn",
                                    "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu",
                                    "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"};
  std::string s;
  switch (t.code) {
    case kDLInt: s = "int" + std::to_string(t.bits); break;
    case kDLUInt: s = "uint" + std::to_string(t.bits); break;
    case kDLFloat: s = "float" + std::to_string(t.bits); break;
    case kDLBfloat: s = "bfloat" + std::to_string(t.bits); break;
    case kDLComplex: s = "complex" + std::to_string(t.bits); break;
    case kDLBool: s = t.bits == 8 ? "bool" : "bool" + std::to_string(t.bits); break;
    case kDLOpaqueHandle: s = "handle" + std::to_string(t.bits); break;
    case 18: s = "bcomplex" + std::to_string(t.bits); break;  // kDLBcomplex (DLPack main, after 1.3)
    default:
      if (t.code >= kDLFloat8_e3m4 && t.code <= kDLFloat4_e2m1fn) s = fp8[t.code - kDLFloat8_e3m4];
      else s = "dtype(code=" + std::to_string(t.code) + ",bits=" + std::to_string(t.bits) + ")";
  }
  return t.lanes == 1 ? s : s + "x" + std::to_string(t.lanes);
}

/*! \brief A readable name for a device type: "cpu", "cuda", "rocm", "oneapi", ... */
inline std::string device_type_name(DLDeviceType type) {
  static const char* const names[] = {"?", "cpu", "cuda", "cuda_host", "opencl", "?", "?", "vulkan", "metal",
                                      "vpi", "rocm", "rocm_host", "ext_dev", "cuda_managed", "oneapi",
                                      "webgpu", "hexagon", "maia", "trn", "tpu", "tpu_host", "ascend"};
  const int t = static_cast<int>(type);  // 19-21: kDLTPU, kDLTPUHost, kDLAscend (DLPack main, after 1.3)
  return (t > 0 && t <= 21 && names[t][0] != '?') ? names[t] : "device_type_" + std::to_string(t);
}

/*! \brief A readable name for a device: "cpu" for kDLCPU/0, otherwise "<type>:<id>" (e.g. "cuda:1"). */
inline std::string device_name(DLDevice d) {
  const std::string s = device_type_name(d.device_type);
  return (d.device_type == kDLCPU && d.device_id == 0) ? s : s + ":" + std::to_string(d.device_id);
}

}  // namespace tdb

#endif  // TORCH_DLPACK_BRIDGE_NAMES_H_
