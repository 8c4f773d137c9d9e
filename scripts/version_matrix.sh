#!/usr/bin/env bash
# Builds and tests torch_dlpack_bridge against several torch versions, each in its own virtual environment
# (created once under $TDB_MATRIX_DIR, default /tmp/tdb-matrix, and reused), from a fresh copy of the
# tracked sources. Prints a matrix. Usage: scripts/version_matrix.sh [torch versions...]
# Versions other than those on local disk (2.13.0, 2.14.1) download several GB each from the registry.
# TDB_PYTHON picks the interpreter for the venvs (default python3), e.g. TDB_PYTHON=python3.9.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
root=${TDB_MATRIX_DIR:-/tmp/tdb-matrix}
python=${TDB_PYTHON:-python3}
pytag=$("$python" -c 'import sys; print(f"py{sys.version_info[0]}.{sys.version_info[1]}")')
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(2.4.1 2.9.1 2.13.0 2.14.1)
mkdir -p "$root"
rows=()
for v in "${versions[@]}"; do
  venv="$root/torch-$v" src="$root/src-$v" log="$root/torch-$v.log"
  [ "$python" = python3 ] || { venv="$root/$pytag-torch-$v" src="$root/$pytag-src-$v" log="$root/$pytag-torch-$v.log"; }
  numpy=numpy
  case "$v" in 2.4.*) numpy="numpy<2" ;; esac  # torch 2.4 wheels predate NumPy 2
  start=$SECONDS
  if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv" &&
      "$venv/bin/pip" install -q "torch==$v" "$numpy" pytest hypothesis apache-tvm-ffi setuptools wheel ninja \
        > "$log" 2>&1 || { rows+=("| $v | install failed (see $log) | | |"); continue; }
  fi
  rm -rf "$src" && mkdir -p "$src"
  (cd "$repo" && git ls-files | tar -cf - -T -) | tar -xf - -C "$src"
  if ! (cd "$src" && "$venv/bin/python" setup.py build_ext --inplace >> "$log" 2>&1); then
    rows+=("| $v | build failed (see $log) | | $((SECONDS - start)) s |")
    continue
  fi
  summary=$(cd "$src" && "$venv/bin/python" -m pytest tests -q -p no:cacheprovider 2>&1 | tee -a "$log" | tail -n 1)
  provider=$(cd "$src" && "$venv/bin/python" -c \
    "import torch_dlpack_bridge as b; print(b.active_provider()['__dlpack_c_exchange_api__'])" 2>>"$log")
  rows+=("| $v ($pytag) | built | $summary | default table: $provider; $((SECONDS - start)) s |")
done
echo
echo "| torch | build | tests | notes |"
echo "|---|---|---|---|"
printf '%s\n' "${rows[@]}"
