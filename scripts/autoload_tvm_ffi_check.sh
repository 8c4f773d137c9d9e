#!/usr/bin/env bash
# The autoload hook with a real consumer on a torch that has no table of its own: in a fresh venv with torch
# 2.9.1, apache-tvm-ffi and the release wheel, `import tvm_ffi` as the very first import must find this
# project's table (the hook publishes it when tvm_ffi imports torch) and compile nothing; with
# TORCH_DLPACK_BRIDGE_AUTOLOAD=0 tvm-ffi falls back to compiling its own backport, as without this package.
# Prints the import times and what was compiled. Usage: scripts/autoload_tvm_ffi_check.sh [torch version]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
v=${1:-2.9.1}
root=${TDB_AUTOLOAD_DIR:-/tmp/tdb-autoload-check}
wheel=${TDB_WHEEL:-$(ls -t "$repo"/wheelhouse/torch_dlpack_bridge-*.whl | head -n 1)}
venv="$root/venv-torch-$v"
[ -x "$venv/bin/python" ] || { python3 -m venv "$venv" && "$venv/bin/pip" install -q "torch==$v" apache-tvm-ffi; }
"$venv/bin/pip" install -q --force-reinstall --no-deps "$wheel"

probe='
import ctypes, time
start = time.perf_counter()
import tvm_ffi                                   # the first import: tvm_ffi imports torch itself
elapsed = time.perf_counter() - start
import torch, sys
seen = []
get = tvm_ffi.LIB.TVMFFIEnvGetDLPackManagedTensorAllocator
get.restype, get.argtypes = ctypes.c_void_p, []
tvm_ffi.convert(lambda *a: seen.append(get()))(torch.zeros(2))
bridge = sys.modules.get("torch_dlpack_bridge")
ours = bridge and ctypes.c_void_p.from_address(bridge.exchange_api_address() + 16).value
print(f"import tvm_ffi: {elapsed:.1f} s; torch {torch.__version__}; tvm-ffi uses",
      "this project\x27s table" if seen[0] == ours else "another table (its own backport?)")
'
for autoload in 1 0; do
  cache="$root/tvm-ffi-cache-autoload$autoload"
  rm -rf "$cache" && mkdir -p "$cache"
  echo "== TORCH_DLPACK_BRIDGE_AUTOLOAD=$autoload, empty TVM_FFI_CACHE_DIR"
  (cd "$root" && TORCH_DLPACK_BRIDGE_AUTOLOAD=$autoload TVM_FFI_CACHE_DIR="$cache" "$venv/bin/python" -c "$probe")
  echo "   compiled into the cache: $(find "$cache" -type f | wc -l) files"
  (cd "$root" && TORCH_DLPACK_BRIDGE_AUTOLOAD=$autoload TVM_FFI_CACHE_DIR="$cache" "$venv/bin/python" -c "$probe" |
     sed 's/^/   again, cache warm: /')
done
