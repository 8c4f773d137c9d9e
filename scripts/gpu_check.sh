#!/usr/bin/env bash
# Builds torch_dlpack_bridge against the installed (CUDA) torch and runs the GPU suite, on a machine with a
# CUDA device and no network.
#
#   scripts/gpu_check.sh            build, main job, tests/test_gpu.py (+ the rest of the suite: TDB_GPU_FULL=1)
#
# Environment: PYTHON (default python3), TDB_GPU_FULL=1 (also run every other test file whose imports are
# present), TDB_GPU_SKIP_BUILD=1 (reuse an existing in-place build).
# Needs torch with CUDA, pytest, numpy, setuptools, wheel; uses cupy, numba-cuda and nvcc when present (the
# tests that need one of them skip alone, naming it). Exits non-zero if a step fails, if torch sees no CUDA
# device, or if tests/test_gpu.py ran nothing: a skipped GPU suite is not a pass.
set -u -o pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
LOGS="${TDB_GPU_LOGS:-/tmp/tdb-gpu-check}"
mkdir -p "$LOGS"
export TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$LOGS/torch_extensions}"
FAILED=0
step() {  # step NAME PASS|FAIL|SKIP DETAIL
  echo ">>> $2 $1: $3"
  [ "$2" = FAIL ] && FAILED=1
  return 0
}

# ---- 0. what this machine has ----------------------------------------------------------------------------
"$PY" - <<'PYEOF' | tee "$LOGS/env.txt"
import importlib, platform, shutil, sys
import torch
print("python", sys.version.split()[0], platform.machine())
print("torch", torch.__version__, "cuda", torch.version.cuda, "hip", torch.version.hip)
print("cuda devices", torch.cuda.device_count() if torch.cuda.is_available() else 0,
      [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else [])
for name in ["numpy", "pytest", "hypothesis", "cupy", "numba.cuda", "cuda.core", "pybind11", "nanobind", "tvm_ffi"]:
    try:
        mod = importlib.import_module(name)
        print(f"{name:12s}", getattr(mod, "__version__", "present"))
    except Exception as e:
        print(f"{name:12s} missing ({type(e).__name__})")
print("nvcc", shutil.which("nvcc"))
PYEOF
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  step gpu FAIL "torch sees no CUDA device: nothing to check here"
  exit 1
fi

# ---- 1. build against this torch ------------------------------------------------------------------------
if [ "${TDB_GPU_SKIP_BUILD:-0}" = 1 ]; then
  step build SKIP "TDB_GPU_SKIP_BUILD=1"
elif "$PY" -m pip install --no-build-isolation --no-deps --no-index -e . >"$LOGS/build.log" 2>&1; then
  step build PASS "pip install --no-build-isolation -e . (log: $LOGS/build.log)"
elif "$PY" setup.py build_ext --inplace >>"$LOGS/build.log" 2>&1; then  # e.g. no `wheel` for an editable wheel
  step build PASS "pip install -e failed; setup.py build_ext --inplace worked (log: $LOGS/build.log)"
else
  tail -40 "$LOGS/build.log"
  step build FAIL "see $LOGS/build.log"
  exit 1
fi

# ---- 2. the main job (self-check, which table consumers get) ----------------------------------------------
if "$PY" -m torch_dlpack_bridge >"$LOGS/main.log" 2>&1; then
  step main-job PASS "python -m torch_dlpack_bridge: $(tail -n 1 "$LOGS/main.log")"
else
  step main-job FAIL "$(tail -n 1 "$LOGS/main.log") (all of it: $LOGS/main.log)"
fi
cat "$LOGS/main.log"  # the self-check of every device, and the timings

# ---- 3. the GPU suite: must run, not skip ----------------------------------------------------------------
"$PY" -m pytest tests/test_gpu.py -v -rs -p no:cacheprovider --junitxml="$LOGS/gpu.xml" 2>&1 | tee "$LOGS/gpu.log"
status=${PIPESTATUS[0]}
counts=$("$PY" - "$LOGS/gpu.xml" <<'PYEOF'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suite = root if root.tag == "testsuite" else root.find("testsuite")
get = lambda k: int(suite.get(k, 0))
ran = get("tests") - get("skipped")
print(ran, get("failures") + get("errors"), get("skipped"))
PYEOF
)
read -r ran bad skipped <<<"$counts"
if [ "$status" = 0 ] && [ "${ran:-0}" -gt 0 ]; then
  step gpu-suite PASS "tests/test_gpu.py: $ran ran, $skipped skipped (reasons above)"
else
  step gpu-suite FAIL "tests/test_gpu.py: exit $status, $ran ran, $bad failed, $skipped skipped"
fi

# ---- 4. optionally the rest of the suite, leaving out files whose imports this machine lacks --------------
if [ "${TDB_GPU_FULL:-0}" = 1 ]; then
  ignore=()
  "$PY" -c "import hypothesis" 2>/dev/null || ignore+=(--ignore=tests/test_fuzz.py)
  if "$PY" -m pytest tests -q -rs -p no:cacheprovider --ignore=tests/test_gpu.py "${ignore[@]}" >"$LOGS/full.log" 2>&1; then
    step full-suite PASS "$(tail -1 "$LOGS/full.log") ${ignore[*]}"
  else
    grep -E "^(FAILED|ERROR)" "$LOGS/full.log" | head -30
    step full-suite FAIL "$(tail -1 "$LOGS/full.log") (log: $LOGS/full.log)"
  fi
fi

[ "$FAILED" = 0 ] && echo "OVERALL: PASS" || echo "OVERALL: FAIL"
exit "$FAILED"
