#!/usr/bin/env bash
# Installs the release wheel (scripts/build_wheels.sh) into a fresh venv per torch x Python pair, with building at
# import forbidden (TORCH_DLPACK_BRIDGE_BUILD=0, CXX=/nonexistent: a compile attempt is an ImportError), and runs
# the main job, a smoke subset of the tests against the installed wheel, and an import-time measurement.
# Writes the table to scripts/wheel_matrix.md (TDB_MATRIX_OUT=other/file.md to write elsewhere) and prints it.
#
# Usage: scripts/wheel_matrix.sh [torch:python ...]   e.g. scripts/wheel_matrix.sh 2.4.1:3.9 2.15.0:3.13
# Env: TDB_MATRIX_DIR (default /tmp/tdb-wheel-matrix), TDB_WHEEL (default: the newest wheelhouse/*.whl),
#      TDB_MATRIX_KEEP=1 keeps each venv (several GB each: a registry torch brings its CUDA packages).
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
root=${TDB_MATRIX_DIR:-/tmp/tdb-wheel-matrix}
wheel=${TDB_WHEEL:-$(ls -t "$repo"/wheelhouse/torch_dlpack_bridge-*.whl | head -n 1)}
out=${TDB_MATRIX_OUT:-$repo/scripts/wheel_matrix.md}
pairs=("$@")
# Every torch minor once; every CPython 3.9-3.13 at least once (torch 2.9+ needs Python >= 3.10).
[ ${#pairs[@]} -gt 0 ] || pairs=(2.4.1:3.9 2.5.1:3.10 2.6.0:3.13 2.7.1:3.9 2.8.0:3.12 2.9.1:3.10 2.10.0:3.13
                                 2.11.0:3.11 2.12.1:3.12 2.13.0:3.11 2.14.1:3.13 2.15.0:3.11)
smoke=(tests/test_publish.py tests/test_export.py tests/test_import.py tests/test_allocator.py
       tests/test_stream_cpu.py tests/test_loader.py)
mkdir -p "$root"
size_kib=$(du -k "$wheel" | cut -f1)
rows=()
for pair in "${pairs[@]}"; do
  v=${pair%%:*} py=${pair##*:}
  python=$(ls /root/.pyenv/versions/"$py".*/bin/python"$py" 2>/dev/null | head -n 1)
  [ -n "$python" ] || python=$(command -v "python$py")
  venv="$root/torch-$v-py$py" log="$root/torch-$v-py$py.log"
  numpy=numpy
  case "$v" in 2.4.*) numpy="numpy<2" ;; esac  # torch 2.4 wheels predate NumPy 2
  echo "== torch $v, Python $py" | tee "$log"
  rm -rf "$venv"
  if ! { "$python" -m venv "$venv" && "$venv/bin/pip" install -q "torch==$v" "$numpy" pytest hypothesis &&
         "$venv/bin/pip" install -q "$wheel"; } >> "$log" 2>&1; then
    rows+=("| $v | $py | install failed | | | |"); continue
  fi
  flavour=$("$venv/bin/python" -c 'import torch; print(torch.__version__)' 2>>"$log")
  export TORCH_DLPACK_BRIDGE_BUILD=0 CXX=/nonexistent
  if (cd "$root" && "$venv/bin/python" -m torch_dlpack_bridge) >> "$log" 2>&1; then main=pass; else main=FAIL; fi
  # Time added by importing the package after torch, best of 5 fresh processes (the autoload hook off, or
  # `import torch` would already have imported it).
  added=$(for _ in 1 2 3 4 5; do (cd "$root" && TORCH_DLPACK_BRIDGE_AUTOLOAD=0 "$venv/bin/python" -c '
import time; import torch; t = time.perf_counter(); import torch_dlpack_bridge
print(f"{(time.perf_counter() - t) * 1e3:.1f}")'); done 2>>"$log" | sort -n | head -n 1)
  # The smoke tests import the installed package (run from outside the checkout); building is forbidden, so
  # the loader test that builds into a cache is left out here (CI runs it against the wheel once).
  summary=$(cd "$root" && "$venv/bin/python" -m pytest -q -p no:cacheprovider -k "not builds_once" \
            "${smoke[@]/#/$repo/}" 2>&1 | tee -a "$log" | tail -n 1)
  unset TORCH_DLPACK_BRIDGE_BUILD CXX
  rows+=("| $v | $py | $flavour | $main | $summary | ${added:-?} ms |")
  [ "${TDB_MATRIX_KEEP:-0}" = 1 ] || rm -rf "$venv"
done
{
  echo "# Wheel matrix"
  echo
  echo "\`scripts/wheel_matrix.sh\` on $(date -u +%Y-%m-%d): $(basename "$wheel") ($size_kib KiB) installed into a fresh venv"
  echo "per row, no compiler allowed at import (TORCH_DLPACK_BRIDGE_BUILD=0, CXX=/nonexistent). Main job:"
  echo "\`python -m torch_dlpack_bridge\` (status, self-check, quick timing). Tests: ${smoke[*]}"
  echo "(without the cache-build test). Import: time added by \`import torch_dlpack_bridge\` after \`import torch\`,"
  echo "best of 5 processes."
  echo
  echo "| torch | Python | installed torch | main job | smoke tests | import |"
  echo "|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} > "$out"
cat "$out"
