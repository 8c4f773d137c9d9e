"""A "practical floor" for dltensor_from_py_object_no_sync: the least any exporter must do, with no checks.

The probe's own floor copies an already filled 48-byte DLTensor (about 1 ns): no exporter can come near it,
because an export has to find the TensorImpl behind the PyObject and read it. This module compiles (once,
cached by torch version under benchmarks/.cache) a table whose only function does exactly that and nothing
else: an exact-type check, THPVariable_Unpack, the TensorImpl fields (sizes, strides, dtype through a lookup
table, device, data pointer + storage offset) and the stores. It validates nothing (no layout, conj/neg,
nested, symbolic, storage or dtype checks), so it is NOT a usable exporter: only a yardstick.

The table also has a minimal OWNING export, `managed_tensor_from_py_object_no_sync`: one allocation for the
managed struct, shape and strides, filled from the tensor as above, the storage's reference taken (a
c10::Storage copy: one atomic increment); its deleter drops the reference (one atomic decrement) and frees.
That is the least an owning export can do and still keep the memory alive; the probe's "managed" timing
(export + deleter) uses it. Nothing else in the table is filled.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional, Tuple

import torch

HERE = Path(__file__).resolve().parent

SOURCE = r"""
#include <torch/csrc/autograd/python_variable.h>
#include <cstdlib>
#include <new>
#include <torch_dlpack_bridge/dlpack.h>

namespace {

struct DT { uint8_t code, bits; uint16_t lanes; };
// ScalarType -> DLDataType for the common types, by index (others {0,0,0}); built once.
DT g_dtypes[64];

int minimal_dltensor(void* py_object, DLTensor* out) noexcept {
  auto* obj = static_cast<PyObject*>(py_object);
  if (Py_TYPE(obj) != reinterpret_cast<PyTypeObject*>(THPVariableClass)) return -1;
  c10::TensorImpl* impl = THPVariable_Unpack(obj).unsafeGetTensorImpl();
  const c10::IntArrayRef sizes = impl->sizes();
  out->ndim = static_cast<int32_t>(sizes.size());
  out->shape = const_cast<int64_t*>(sizes.data());
  out->strides = const_cast<int64_t*>(impl->strides().data());
  const DT d = g_dtypes[static_cast<int>(c10::typeMetaToScalarType(impl->dtype())) & 63];
  out->dtype = {d.code, d.bits, d.lanes};
  out->device = {kDLCPU, 0};
  const c10::StorageImpl* storage = impl->unsafe_storage().unsafeGetStorageImpl();
  out->data = static_cast<char*>(const_cast<void*>(storage->data())) + impl->storage_offset() * (d.bits / 8);
  out->byte_offset = 0;
  return 0;
}

// The owning floor: struct, shape and strides in one allocation; the storage's reference is all it holds.
struct MinimalOwned {
  DLManagedTensorVersioned managed;
  c10::Storage storage;
};

void minimal_deleter(DLManagedTensorVersioned* self) noexcept {
  auto* holder = reinterpret_cast<MinimalOwned*>(self);
  holder->storage.~Storage();  // drops the reference
  std::free(holder);
}

int minimal_managed(void* py_object, DLManagedTensorVersioned** out) noexcept {
  auto* obj = static_cast<PyObject*>(py_object);
  if (Py_TYPE(obj) != reinterpret_cast<PyTypeObject*>(THPVariableClass)) return -1;
  c10::TensorImpl* impl = THPVariable_Unpack(obj).unsafeGetTensorImpl();
  const c10::IntArrayRef sizes = impl->sizes();
  const c10::IntArrayRef strides = impl->strides();
  const int32_t ndim = static_cast<int32_t>(sizes.size());
  auto* holder = static_cast<MinimalOwned*>(std::malloc(sizeof(MinimalOwned) + 2 * sizeof(int64_t) * ndim));
  if (holder == nullptr) return -1;
  int64_t* dims = reinterpret_cast<int64_t*>(holder + 1);
  for (int32_t i = 0; i < ndim; ++i) {
    dims[i] = sizes[i];
    dims[ndim + i] = strides[i];
  }
  new (&holder->storage) c10::Storage(impl->unsafe_storage());  // takes the reference
  DLManagedTensorVersioned& m = holder->managed;
  m.version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  m.manager_ctx = holder;
  m.deleter = minimal_deleter;
  m.flags = 0;
  DLTensor& t = m.dl_tensor;
  t.ndim = ndim;
  t.shape = dims;
  t.strides = dims + ndim;
  const DT d = g_dtypes[static_cast<int>(c10::typeMetaToScalarType(impl->dtype())) & 63];
  t.dtype = {d.code, d.bits, d.lanes};
  t.device = {kDLCPU, 0};
  const c10::StorageImpl* storage = holder->storage.unsafeGetStorageImpl();
  t.data = static_cast<char*>(const_cast<void*>(storage->data())) + impl->storage_offset() * (d.bits / 8);
  t.byte_offset = 0;
  *out = &m;
  return 0;
}

DLPackExchangeAPI g_api;

}  // namespace

int64_t minimal_api_address() {
  if (g_api.header.version.major == 0) {
    g_dtypes[static_cast<int>(c10::ScalarType::Float)] = {kDLFloat, 32, 1};
    g_dtypes[static_cast<int>(c10::ScalarType::Double)] = {kDLFloat, 64, 1};
    g_dtypes[static_cast<int>(c10::ScalarType::Half)] = {kDLFloat, 16, 1};
    g_dtypes[static_cast<int>(c10::ScalarType::Long)] = {kDLInt, 64, 1};
    g_dtypes[static_cast<int>(c10::ScalarType::Int)] = {kDLInt, 32, 1};
    g_api.header.version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
    g_api.dltensor_from_py_object_no_sync = minimal_dltensor;
    g_api.managed_tensor_from_py_object_no_sync = minimal_managed;
  }
  return reinterpret_cast<int64_t>(&g_api);
}
"""


def build(cache_dir: Path = HERE / ".cache") -> Tuple[Optional[int], str]:
    """(table address, message); compiles with torch's cpp_extension on first use (about a minute)."""
    import torch_dlpack_bridge
    from torch.utils.cpp_extension import load_inline

    import hashlib
    digest = hashlib.sha256(SOURCE.encode()).hexdigest()[:8]  # a changed source builds anew
    key = (f"minimal_export-torch{torch.__version__}-cxx11abi{int(torch.compiled_with_cxx11_abi())}-{digest}"
           .replace("+", "_"))
    build_dir = Path(cache_dir) / key
    build_dir.mkdir(parents=True, exist_ok=True)
    try:
        module = load_inline(name="tdb_minimal_export", cpp_sources=[SOURCE], functions=["minimal_api_address"],
                             extra_include_paths=[torch_dlpack_bridge.get_include()], extra_cflags=["-O3"],
                             build_directory=str(build_dir), verbose=False)
    except Exception as e:  # a failed build is reported, the benchmark goes on
        return None, f"minimal export build failed: {type(e).__name__}: {str(e)[-1500:]}"
    return int(module.minimal_api_address()), f"minimal export: {build_dir}"


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    address, message = build()
    print(message, hex(address) if address else "")
    if address:
        from torch_dlpack_bridge import _probe
        t = torch.empty(8, 16, 32)[:, ::2, 1:]
        print(_probe.dltensor(address, t))
        print("ns:", _probe.time(address, "dltensor", t, 20000, 7),
              "managed:", _probe.time(address, "managed", t, 20000, 7),
              "floor:", _probe.time(address, "floor", t, 20000, 7))
    sys.exit(0 if address else 1)
