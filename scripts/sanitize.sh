#!/usr/bin/env bash
# Builds the extension with AddressSanitizer + UndefinedBehaviorSanitizer (TDB_SANITIZE=1) in a copy of the
# tracked sources, then runs the test suite under it. Usage: scripts/sanitize.sh [pytest args...]
# Needs the current python to have torch and the test deps installed. Leak checking is off: CPython and
# torch keep allocations until exit by design; leaks are the soak's job.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=${TDB_SANITIZE_DIR:-/tmp/tdb-sanitize}
rm -rf "$work" && mkdir -p "$work"
(cd "$repo" && git ls-files | tar -cf - -T -) | tar -xf - -C "$work"
cd "$work"
TDB_SANITIZE=1 python setup.py build_ext --inplace > build.log 2>&1 || { tail -40 build.log; exit 1; }
export LD_PRELOAD="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)"
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:allocator_may_return_null=1  # the tests ask for 1 TB once
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# Left out by default: the soak (ASan's quarantine keeps freed memory resident, so RSS says nothing there) and
# the nvcc compile of the CUDA example (the preloaded ASan runtime crashes nvcc itself).
[ $# -gt 0 ] || set -- tests --ignore=tests/test_soak.py \
  --deselect tests/test_example_kernels.py::test_cuda_example_compiles_with_nvcc
python -m pytest -q -p no:cacheprovider "$@"
