#!/usr/bin/env bash
# Builds torch_dlpack_bridge against a CUDA build of torch (2.14.1) and checks it on this GPU-less machine.
#
#   scripts/check_cuda_build.sh [VENV_DIR]      (default /tmp/tdb-cuda-venv)
#
# Environment: PYTHON (interpreter for the venv, default python3.11), TDB_CUDA_TORCH (default 2.14.1),
# TDB_CUDA_SRC (copy of the repo to build in, default /tmp/tdb-cuda-src), TDB_CUDA_KEEP_VENV=1 (reuse an
# existing venv instead of recreating it).
#
# Nothing in the repository is modified: the tracked (and untracked, not ignored) files are copied to
# TDB_CUDA_SRC and the package is installed from there (editable), so the in-place .so files of the working tree
# (built for another torch) stay as they are. Steps:
#   1. fresh venv + pip install torch==$TDB_CUDA_TORCH and the README's build and test dependencies
#   2. copy of the repo, pip install --no-build-isolation -e . there (the README's build, autoload hook included;
#      compiler errors land in $LOGS/build.log)
#   3. python -m pytest tests -q -x           (the CPU suite)
#   4. without a GPU, current_work_stream(kDLCUDA, 0) and a kDLCUDA allocation must fail with a Python
#      exception (ValueError/BufferError/RuntimeError), not crash; each runs in its own process.
# Prints a PASS/FAIL line per step and exits non-zero if any step failed.
set -u -o pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-/tmp/tdb-cuda-venv}"
SRC="${TDB_CUDA_SRC:-/tmp/tdb-cuda-src}"
PYTHON="${PYTHON:-python3.11}"
TORCH_VERSION="${TDB_CUDA_TORCH:-2.14.1}"
LOGS="${SRC}.logs"
PY="$VENV/bin/python"

declare -a RESULTS=()
FAILED=0
record() {  # record NAME PASS|FAIL|SKIP DETAIL
  RESULTS+=("$(printf '%-6s %-14s %s' "$2" "$1" "$3")")
  [ "$2" = FAIL ] && FAILED=1
  echo ">>> $2 $1: $3"
}
summary() {
  echo
  echo "================ check_cuda_build summary ================"
  echo "repo:  $REPO"
  echo "copy:  $SRC"
  echo "venv:  $VENV"
  echo "logs:  $LOGS"
  printf '%s\n' "${RESULTS[@]}"
  if [ "$FAILED" = 0 ]; then echo "OVERALL: PASS"; else echo "OVERALL: FAIL"; fi
  exit "$FAILED"
}

for path in "$VENV" "$SRC"; do  # refuse to delete the repository or something outside a scratch location
  case "$(realpath -m "$path")" in
    "$REPO"|"$REPO"/*|/|/work|/work/*|"$HOME") echo "refusing to use $path (inside the repo or a protected dir)"; exit 2 ;;
  esac
done
rm -rf "$LOGS"
mkdir -p "$LOGS"
echo "logs in $LOGS"

# ---- 1. venv with the CUDA torch ------------------------------------------------------------------------
if [ "${TDB_CUDA_KEEP_VENV:-0}" = 1 ] && [ -x "$PY" ]; then
  echo "reusing $VENV"
else
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV" || { record venv FAIL "$PYTHON -m venv $VENV failed"; summary; }
fi
echo "installing torch==$TORCH_VERSION (several GB, may take a while) ..."
# The README's build and test dependencies (pyproject.toml's test group; pip >= 25.1 installs it), so the whole
# suite runs as in CI.
if "$PY" -m pip install -q --upgrade pip >"$LOGS/pip.log" 2>&1 &&
    "$PY" -m pip install -q "torch==$TORCH_VERSION" --group "$REPO/pyproject.toml:test" >>"$LOGS/pip.log" 2>&1; then
  TORCH_DESC="$(TORCH_DLPACK_BRIDGE_AUTOLOAD=0 "$PY" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "hip", torch.version.hip)' 2>&1)"
  record install PASS "$TORCH_DESC"
else
  record install FAIL "pip install failed, see $LOGS/pip.log: $(tail -n 3 "$LOGS/pip.log" | tr '\n' ' ')"
  summary
fi
if [ "$("$PY" -c 'import torch; print(torch.version.cuda is not None)' 2>/dev/null)" != True ]; then
  record install FAIL "torch in $VENV is not a CUDA build"
  summary
fi

# ---- 2. copy of the repo, build ---------------------------------------------------------------------------
rm -rf "$SRC"
mkdir -p "$SRC"
(
  cd "$REPO" &&
  git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done |
    tar --null -T - -cf - | tar -xf - -C "$SRC"
) || { record copy FAIL "copying the repository to $SRC failed"; summary; }
echo "copied $(find "$SRC" -type f | wc -l) files to $SRC"

echo "building against torch $TORCH_VERSION (several minutes on 2 cores) ..."
START=$(date +%s)
if (cd "$SRC" && MAX_JOBS="${MAX_JOBS:-2}" "$PY" -m pip install -v --no-build-isolation -e .) >"$LOGS/build.log" 2>&1; then
  record build PASS "built in $(( $(date +%s) - START ))s ($(cd "$SRC" && ls torch_dlpack_bridge/*.so torch_dlpack_bridge/_lib/*.so | xargs -n1 basename | tr '\n' ' '))"
else
  record build FAIL "see $LOGS/build.log; first errors:"
  grep -n -E 'error|Error' "$LOGS/build.log" | head -n 20
  summary
fi
if ! (cd "$SRC" && "$PY" -c 'import torch_dlpack_bridge as b; print(b.build_info())') >"$LOGS/import.log" 2>&1; then
  record import FAIL "$(tail -n 3 "$LOGS/import.log" | tr '\n' ' ')"
  summary
fi
record import PASS "$(cat "$LOGS/import.log")"

# ---- 3. CPU test suite -------------------------------------------------------------------------------------
echo "running the test suite ..."
(cd "$SRC" && "$PY" -m pytest tests -q -x -p no:cacheprovider) >"$LOGS/pytest.log" 2>&1
STATUS=$?
TAIL="$(grep -E '(passed|failed|error|skipped|xfailed)' "$LOGS/pytest.log" | tail -n 1)"
if [ "$STATUS" = 0 ]; then
  record tests PASS "$TAIL"
else
  record tests FAIL "pytest exit $STATUS: $TAIL (see $LOGS/pytest.log)"
  grep -E '^(FAILED|ERROR)' "$LOGS/pytest.log" | head -n 10
fi

# ---- 4. CUDA entry points without a GPU -------------------------------------------------------------------
# Each check runs in its own process: a crash (abort, segfault) shows up as a signal exit code.
cuda_check() {  # cuda_check NAME PYTHON_SNIPPET
  local name="$1" code="$2" out status
  out="$(cd "$SRC" && "$PY" - 2>&1 <<EOF
import torch, torch_dlpack_bridge
from torch_dlpack_bridge import _probe
api = torch_dlpack_bridge.exchange_api()
assert torch.version.cuda is not None, "not a CUDA build"
assert torch.cuda.device_count() == 0, "this check expects a machine without a GPU"
try:
    result = $code
except (ValueError, BufferError, RuntimeError) as e:
    print("CLEAN-ERROR %s: %s" % (type(e).__name__, e))
else:
    print("UNEXPECTED-SUCCESS %r" % (result,))
EOF
)"
  status=$?
  echo "$out" >"$LOGS/$name.log"
  local line
  line="$(grep -E '^(CLEAN-ERROR|UNEXPECTED-SUCCESS)' <<<"$out" | head -n 1)"
  if [ "$status" -gt 128 ]; then
    record "$name" FAIL "crashed (signal $((status - 128))): $(tail -n 3 <<<"$out" | tr '\n' ' ')"
  elif [ "$status" != 0 ]; then
    record "$name" FAIL "exit $status: $(tail -n 3 <<<"$out" | tr '\n' ' ')"
  elif [[ "$line" == CLEAN-ERROR* ]]; then
    record "$name" PASS "${line#CLEAN-ERROR }"
  else
    record "$name" FAIL "${line:-no result}"
  fi
}
cuda_check cuda-stream "_probe.current_stream(api, 2, 0)"
cuda_check cuda-alloc "_probe.allocate(api, [4, 3], (2, 32, 1), (2, 0))"

# For comparison only (not part of PASS/FAIL): torch's own table on the same calls.
NATIVE="$(cd "$SRC" && "$PY" - 2>&1 <<'EOF'
import torch, torch_dlpack_bridge
from torch_dlpack_bridge import _probe
native = torch_dlpack_bridge._native_capsule()
if native is None:
    print("torch has no native table")
else:
    for name, call in [("stream", lambda: _probe.current_stream(native, 2, 0)),
                       ("alloc", lambda: _probe.allocate(native, [4, 3], (2, 32, 1), (2, 0)))]:
        try:
            print("native %s -> %r" % (name, call()))
        except Exception as e:
            print("native %s -> %s: %s" % (name, type(e).__name__, str(e).splitlines()[0] if str(e) else ""))
EOF
)"
NATIVE_STATUS=$?
echo "$NATIVE" >"$LOGS/native.log"
[ "$NATIVE_STATUS" -gt 128 ] && NATIVE="$NATIVE [torch's table crashed the process: signal $((NATIVE_STATUS - 128))]"
record native-info INFO "$(tr '\n' ';' <<<"$NATIVE")"

summary
