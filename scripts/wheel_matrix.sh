#!/usr/bin/env bash
# Installs the release wheel (scripts/build_wheels.sh, one per architecture) into a fresh environment per row,
# with building at import forbidden (TORCH_DLPACK_BRIDGE_BUILD=0, CXX=/nonexistent: a compile attempt is an
# ImportError), and runs the main job, a smoke subset of the tests against the installed wheel (one pytest
# process) and an import-time measurement. Updates scripts/wheel_matrix.md (TDB_MATRIX_OUT=other/file.md to
# write elsewhere): rows run now replace the same rows there, the others stay with the date they were checked.
#
# Usage: scripts/wheel_matrix.sh [ROW ...]   ROW: [ARCH/]TORCH:PYTHON[:uncovered]
#   e.g. scripts/wheel_matrix.sh 2.4.1:3.9 2.15.0:3.14 aarch64/2.13.0:3.11 aarch64/2.15.0:3.11:uncovered
#   x86_64 (the default ARCH): a venv of that CPython (pyenv's or one on PATH; 3.14 and 3.15 from the Debian
#     testing chroot of scripts/newest_python_env.sh, made once), torch from the registry.
#   aarch64 on an aarch64 machine: as x86_64 above (the release workflow's Arm runner). On x86_64:
#     emulated (scripts/aarch64_env.sh, made once: Debian 12's arm64 CPython 3.11 under qemu-user), the
#     registry's aarch64 torch and the wheel installed by `scripts/aarch64_env.sh pip-install` into a venv
#     folder of the emulated python (the autoload hook at its top, as an install puts it); no compiler for
#     aarch64 is on PATH.
#   :uncovered  the build at import: the wheel's library for that torch minor is deleted after installing (a
#     stand-in for a torch the wheel does not cover, such as a newer minor), the compiler is reachable (for
#     aarch64: the cross compiler as the emulated machine's c++), and the first `import torch` must print the
#     progress line and build into a fresh cache; then the main job runs with building forbidden again,
#     loading the cached library (the smoke tests are left to the covered row of that torch).
# Env: TDB_MATRIX_DIR (default /tmp/tdb-wheel-matrix; under /tmp or /work for chroot rows),
#      TDB_WHEEL_DIR (default wheelhouse/: the newest *_x86_64.whl and *_aarch64.whl there are used),
#      TDB_MATRIX_KEEP=1 keeps each venv (several GB each: a registry torch brings its CUDA packages),
#      TDB_MATRIX_TESTS="tests/a.py tests/b.py" another smoke subset (CI, emulated: a shorter one).
# Exit status: 1 if any row failed (install, main job, build at import or a smoke test), else 0.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
root=${TDB_MATRIX_DIR:-/tmp/tdb-wheel-matrix}
wheels=${TDB_WHEEL_DIR:-$repo/wheelhouse}
out=${TDB_MATRIX_OUT:-$repo/scripts/wheel_matrix.md}
rows_in=("$@")
# Every torch minor once; every CPython 3.9-3.15 at least once (torch 2.9+ needs Python >= 3.10; 3.15 has only
# torch 2.15); aarch64: the oldest minor, 2.9, 2.13 and the newest, and the build at import.
[ ${#rows_in[@]} -gt 0 ] || rows_in=(2.4.1:3.9 2.5.1:3.10 2.6.0:3.13 2.7.1:3.9 2.8.0:3.12 2.9.1:3.10 2.10.0:3.13
                                     2.11.0:3.11 2.12.1:3.12 2.13.0:3.11 2.14.1:3.13 2.15.0:3.11 2.15.0:3.14
                                     2.15.0:3.15 aarch64/2.4.1:3.11 aarch64/2.9.1:3.11 aarch64/2.13.0:3.11
                                     aarch64/2.15.0:3.11 aarch64/2.15.0:3.11:uncovered)
smoke=(tests/test_publish.py tests/test_export.py tests/test_import.py tests/test_allocator.py
       tests/test_stream_cpu.py tests/test_loader.py)
[ -z "${TDB_MATRIX_TESTS:-}" ] || read -r -a smoke <<< "$TDB_MATRIX_TESTS"
# Loader tests that build a table at import in a fresh interpreter (forbidden in these rows).
builds="builds_once or rebuilt_once or private_temporary_folder or never_opened_through_a_symbolic_link"
builds="$builds or hung_compiler or missing_python_headers"
status=0
mkdir -p "$root"
host_python=$(command -v python3)
today=$(date -u +%Y-%m-%d)
results=$root/rows.tsv && : > "$results"
used=()

for spec in "${rows_in[@]}"; do
  arch=x86_64
  case "$spec" in */*) arch=${spec%%/*}; spec=${spec#*/} ;; esac
  IFS=: read -r v py variant <<< "$spec"
  variant=${variant:-}
  wheel=$(ls -t "$wheels"/torch_dlpack_bridge-*-cp39-abi3-*_"$arch".whl 2> /dev/null | head -n 1)  # not a free-threaded one
  name=$arch-torch-$v-py$py${variant:+-$variant}
  venv=$root/$name log=$root/$name.log
  torch_col=$v${variant:+ ($variant)}
  echo "== $arch, torch $v, Python $py${variant:+, $variant}" | tee "$log"
  fail() { status=1; printf '%s\t%s\t%s\t%s\t\t\t\t%s\t%s\n' "$arch" "$torch_col" "$py" "$1" "$2" "$today" >> "$results"; }
  [ -n "$wheel" ] || { fail "no $arch wheel in $wheels" ""; continue; }
  used+=("$wheel")
  run=() note="" emulated=0
  numpy=numpy
  case "$v" in 2.4.*) numpy="numpy<2" ;; esac  # torch 2.4 wheels predate NumPy 2
  rm -rf "$venv"
  if [ "$arch" != "$(uname -m)" ]; then  # aarch64 on x86_64: emulated (on an aarch64 machine: as x86_64 here)
    [ "$arch" = aarch64 ] || { fail "$arch rows need an $arch machine" ""; continue; }
    [ "$py" = 3.11 ] || { fail "aarch64 rows use the emulated CPython 3.11" ""; continue; }
    aenv=$("$repo/scripts/aarch64_env.sh" 2>> "$log") || { fail "scripts/aarch64_env.sh failed" ""; continue; }
    run=("$aenv/bin/aarch64-run") emulated=1
    site=$venv/lib/python3.11/site-packages
    setup() {
      "$repo/scripts/aarch64_env.sh" venv "$venv" &&
      "$repo/scripts/aarch64_env.sh" pip-install "$venv" -q "torch==$v" "$numpy" pytest hypothesis &&
      "$repo/scripts/aarch64_env.sh" pip-install "$venv" -q --no-deps "$wheel"
    }
    note="emulated (qemu-user $("$aenv/bin/qemu-aarch64" --version | head -n 1 | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | head -n 1))"
  else
    python=$(ls /root/.pyenv/versions/"$py".*/bin/python"$py" 2> /dev/null | head -n 1)
    [ -n "$python" ] || python=$(command -v "python$py")
    if [ -z "$python" ]; then
      case "$py" in
        3.14|3.15)
          cenv=$("$repo/scripts/newest_python_env.sh" 2>> "$log") || { fail "scripts/newest_python_env.sh failed" ""; continue; }
          run=("$cenv/bin/chroot-run") python=python$py
          note="Debian testing chroot, CPython $("${run[@]}" "$python" -c 'import platform; print(platform.python_version())')" ;;
        *) fail "no Python $py here" ""; continue ;;
      esac
    fi
    site=""
    setup() {
      "${run[@]}" "$python" -m venv "$venv" &&
      "${run[@]}" "$venv/bin/pip" install -q "torch==$v" "$numpy" pytest hypothesis &&
      "${run[@]}" "$venv/bin/pip" install -q "$wheel"
    }
  fi
  start=$SECONDS
  if ! setup >> "$log" 2>&1; then fail "install failed" "$note"; continue; fi
  echo "installed in $((SECONDS - start)) s" >> "$log"
  [ -n "$site" ] || site=$("${run[@]}" "$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  vpython=$venv/bin/python

  if [ "$variant" = uncovered ]; then
    minor=$(echo "$v" | cut -d. -f1,2)
    removed=$(ls "$site"/torch_dlpack_bridge/_lib/libtdb_torch"$minor"_*.so)
    rm -f "$site"/torch_dlpack_bridge/_lib/libtdb_torch"$minor"_*.so
    echo "removed $removed" >> "$log"
    cache=$root/$name-cache && rm -rf "$cache"
    export TORCH_DLPACK_BRIDGE_CACHE=$cache
    compiler_path=$PATH
    [ $emulated = 1 ] && compiler_path=$aenv/toolchain/bin:$PATH
    # The first import of torch in a fresh cache. Where torch has no table of its own (< 2.10) the hook builds
    # the table (the progress line on stderr); where it has one, the hook builds nothing and says once which
    # command does, and that command builds it.
    probe='import sys, torch; print("published", "torch_dlpack_bridge" in sys.modules and hasattr(torch.Tensor, "__c_dlpack_exchange_api__"))'
    start_ns=$(date +%s%N)
    first=$(cd "$root" && PATH=$compiler_path "${run[@]}" "$vpython" -c "$probe" 2>&1)
    echo "$first" >> "$log"
    how="the first \`import torch\`"
    if echo "$first" | grep -q 'has a DLPack exchange table of its own'; then
      echo "$first" | grep -q '^published False' || status=1
      how="\`import torch\` kept torch's table and said so; \`python -m torch_dlpack_bridge build\`"
      start_ns=$(date +%s%N)
      first=$(cd "$root" && PATH=$compiler_path "${run[@]}" "$vpython" -m torch_dlpack_bridge build 2>&1 &&
              cd "$root" && "${run[@]}" "$vpython" -c "$probe" 2>&1)
      echo "$first" >> "$log"
    fi
    built_s=$(( ($(date +%s%N) - start_ns + 500000000) / 1000000000 ))
    line=$(echo "$first" | grep -m 1 'building the exchange table' | sed 's/ (into .*//')
    lib=$(ls "$cache"/*/libtdb_torch"$minor"_*.so 2> /dev/null | head -n 1)
    if [ -n "$line" ] && [ -n "$lib" ] && echo "$first" | grep -q '^published True'; then
      note="$note${note:+; }wheel without libtdb_torch$minor: $how printed \"$line)\" and built into the cache in $built_s s (whole process)"
    else
      note="$note${note:+; }build at import FAILED (see $log)" status=1
    fi
  fi

  export TORCH_DLPACK_BRIDGE_BUILD=0 CXX=/nonexistent
  main_out=$(cd "$root" && "${run[@]}" "$vpython" -m torch_dlpack_bridge 2>&1)
  main_rc=$?
  echo "$main_out" >> "$log"
  if [ $main_rc = 0 ]; then main=pass; else main=FAIL; status=1; fi
  if [ "$variant" = uncovered ]; then
    echo "$main_out" | grep -qF "$cache" && main="$main (library from the cache)" || { main="$main (library not from the cache?)"; status=1; }
  fi
  # Time added by importing the package after torch, best of 5 fresh processes (3 when emulated), with the
  # autoload hook off (or `import torch` would already have imported it); and `import torch` itself.
  tries=5 && [ $emulated = 1 ] && tries=3
  times=$(for _ in $(seq $tries); do (cd "$root" && TORCH_DLPACK_BRIDGE_AUTOLOAD=0 "${run[@]}" "$vpython" -c '
import time; t0 = time.perf_counter(); import torch; t1 = time.perf_counter(); import torch_dlpack_bridge
t2 = time.perf_counter(); print(f"{(t2 - t1) * 1e3:.1f} {t1 - t0:.1f} {torch.__version__}")'); done 2>> "$log")
  added=$(echo "$times" | sort -n | head -n 1 | cut -d' ' -f1)
  torch_s=$(echo "$times" | sort -k2 -n | head -n 1 | cut -d' ' -f2)
  flavour=$(echo "$times" | head -n 1 | cut -d' ' -f3)
  [ $emulated = 1 ] && note="$note; import torch ${torch_s:-?} s"
  # The smoke tests import the installed package (run from outside the checkout); building is forbidden, so
  # the loader tests that build at import are left out here (CI runs them; :uncovered rows build).
  # (An :uncovered row proves the build at import and the cache; its tests are those of the covered row.)
  summary="not run (see the covered row)"
  [ "$variant" = uncovered ] ||
    summary=$(cd "$root" && "${run[@]}" "$vpython" -m pytest -q -p no:cacheprovider -k "not ($builds)" \
              "${smoke[@]/#/$repo/}" 2>&1 | tee -a "$log" | tail -n 1)
  case "$summary" in *passed*) case "$summary" in *[0-9]\ failed*|*error*) status=1 ;; esac ;; "not run"*) ;; *) status=1 ;; esac
  unset TORCH_DLPACK_BRIDGE_BUILD CXX TORCH_DLPACK_BRIDGE_CACHE
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$arch" "$torch_col" "$py" "${flavour:-?}" "$main" "$summary" \
    "${added:-?} ms" "$note" "$today" >> "$results"
  [ "${TDB_MATRIX_KEEP:-0}" = 1 ] || rm -rf "$venv" "$root/$name-cache"
done

wheel_list=$(for w in $(printf '%s\n' "${used[@]}" | sort -u); do echo "$(basename "$w") ($(du -k "$w" | cut -f1) KiB)"; done |
             paste -sd, - | sed 's/,/, /g')
"$host_python" - "$out" "$results" "$today" "$wheel_list" "${smoke[*]}" <<'PY' || status=1  # a table not written fails too
import os, re, sys

out, results, today, wheel_list, smoke = sys.argv[1:]
columns = ["arch", "torch", "Python", "installed torch", "main job", "smoke tests", "import", "notes", "checked"]
rows = {}
if os.path.exists(out):  # rows checked before stay, keyed by arch, torch and Python
    text = open(out).read()
    dated = re.search(r"on (\d{4}-\d{2}-\d{2})", text)
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or cells[0] in ("torch", "arch") or set(cells[0]) <= set("-"):
            continue
        if len(cells) == 6:  # the table before the arch column: x86_64 rows
            cells = ["x86_64"] + cells + ["", dated.group(1) if dated else "?"]
        if len(cells) == len(columns):
            rows[tuple(cells[:3])] = cells
for line in open(results):
    cells = line.rstrip("\n").split("\t")
    rows[tuple(cells[:3])] = cells


def order(cells):
    version = tuple(int(x) for x in re.findall(r"\d+", cells[1])[:3])
    return (cells[0] != "x86_64", cells[0], version, "(" in cells[1], tuple(int(x) for x in cells[2].split(".")))


with open(out, "w") as f:
    f.write(f"""# Wheel matrix

`scripts/wheel_matrix.sh`: the release wheel of the row's architecture installed into a fresh environment per
row, no compiler allowed at import (TORCH_DLPACK_BRIDGE_BUILD=0, CXX=/nonexistent). Main job:
`python -m torch_dlpack_bridge` (status, self-check, quick timing). Smoke tests, one pytest process: {smoke}
(without the loader tests that build at import: building is forbidden here). Import: time added by `import torch_dlpack_bridge` after `import torch`,
best of 5 processes (3 when emulated). aarch64 rows run under emulation on x86_64 (`scripts/aarch64_env.sh`:
Debian 12's arm64 CPython 3.11 under Debian 13's qemu-user, torch and the wheel installed for aarch64); Python 3.14
and 3.15 come from a Debian testing chroot (`scripts/newest_python_env.sh`). A row marked `(uncovered)` deletes
the wheel's library for that torch minor after installing, so the package builds its table (compiler reachable):
at the first `import torch` where torch has no table of its own, else (from 2026-11-23's rows on) with `python -m
torch_dlpack_bridge build` once `import torch` has kept torch's table; then runs the main job with building forbidden,
from the cache.
Last run on {today}: {wheel_list}. Each row keeps the date it was checked.

| {' | '.join(columns)} |
|{'---|' * len(columns)}
""")
    for cells in sorted(rows.values(), key=order):
        f.write("| " + " | ".join(cells) + " |\n")
PY
cat "$out"
exit $status
