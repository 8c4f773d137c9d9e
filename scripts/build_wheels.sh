#!/usr/bin/env bash
# Release build: one wheel (cp39-abi3, every CPython 3.9+) holding the torch-free probe and one exchange table
# library per torch minor, each compiled against that torch's own wheel from the registry (downloaded once with
# --no-deps; only its headers and the libraries the table links are unpacked), then tagged with the manylinux
# policy auditwheel finds for it. No torch is installed or imported.
#
# Usage: scripts/build_wheels.sh [torch versions...]   (default: the newest patch of every minor 2.4 ... 2.15)
# Env: TDB_RELEASE_CACHE  downloaded and unpacked torch wheels (default ~/.cache/torch_dlpack_bridge-release)
#      TDB_WHEEL_DIR      where the wheel goes (default wheelhouse/ in the checkout, ignored by git)
#      MAX_JOBS           parallel compiler processes per torch (default: all cores)
# Needs: python with pip, setuptools>=77, wheel and auditwheel; a C++ compiler.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${TDB_RELEASE_CACHE:-$HOME/.cache/torch_dlpack_bridge-release}
out=${TDB_WHEEL_DIR:-$repo/wheelhouse}
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(2.4.1 2.5.1 2.6.0 2.7.1 2.8.0 2.9.1 2.10.0 2.11.0 2.12.1 2.13.0 2.14.1 2.15.0)
mkdir -p "$cache/wheels" "$out"
shopt -s nullglob
torch_wheel() { local found=("$cache/wheels/torch-$1-"*.whl "$cache/wheels/torch-$1+"*.whl); echo "${found[0]:-}"; }

sites=()
for v in "${versions[@]}"; do
  site="$cache/torch-$v"
  if [ ! -f "$site/torch/version.py" ]; then
    wheel=$(torch_wheel "$v")
    if [ -z "$wheel" ]; then
      python -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 "torch==$v" -d "$cache/wheels"
      wheel=$(torch_wheel "$v")
    fi
    echo "unpacking $(basename "$wheel")"
    rm -rf "$site.tmp" && python - "$wheel" "$site.tmp" <<'PY'
import sys, zipfile
wheel, dest = sys.argv[1:]
keep = ("torch/include/", "torch/share/cmake/", "torch/version.py", "torch/lib/libc10.so",
        "torch/lib/libtorch_cpu.so", "torch/lib/libtorch_python.so")
with zipfile.ZipFile(wheel) as z:
    z.extractall(dest, [n for n in z.namelist() if n.startswith(keep)])
PY
    mv "$site.tmp" "$site"
  fi
  sites+=("$site")
done

# Build from the tracked sources only: a developer's in-place build (torch_dlpack_bridge/_lib) stays out.
src=$(mktemp -d /tmp/tdb-release-src.XXXXXX)
trap 'rm -rf "$src"' EXIT
(cd "$repo" && git ls-files | tar -cf - -T -) | tar -xf - -C "$src"
raw="$src/dist" && mkdir -p "$raw"
start=$SECONDS
(cd "$src" && TDB_TORCH_SITES=$(IFS=:; echo "${sites[*]}") \
  python -m pip wheel -q --no-build-isolation --no-deps -w "$raw" .)
echo "built ${#sites[@]} table libraries in $((SECONDS - start)) s"
# What each library needs from CPython (U: must exist in every CPython 3.9+, w: weak, either may be absent);
# scripts/wheel_matrix.sh loads them under each Python to prove it.
echo "CPython C API used by the table libraries: $(nm -D --undefined-only "$src"/build/lib*/torch_dlpack_bridge/_lib/*.so |
  awk '$2 ~ /^_?Py/ {print $1 ":" $2}' | sort -u | tr '\n' ' ')"
built=("$raw"/*.whl)
wheel=${built[0]}

# The platform tag the libraries' glibc/libstdc++ symbol versions allow. torch's own libraries are the
# environment the table is loaded into, not something the wheel may bundle, so they are excluded.
policy=$(python -m auditwheel show "$wheel" 2>&1 | tr '\n' ' ' | grep -oE 'manylinux_[0-9]+_[0-9]+_x86_64' | head -n 1)
[ -n "$policy" ] || { python -m auditwheel show "$wheel"; echo "auditwheel found no manylinux policy" >&2; exit 1; }
python -m wheel tags --remove --platform-tag "$policy" "$wheel" > /dev/null
rm -f "$out"/torch_dlpack_bridge-*.whl
mv "$raw"/*.whl "$out/"
final=("$out"/torch_dlpack_bridge-*.whl)
echo "$final ($(du -k "$final" | cut -f1) KiB):"
python -m zipfile -l "$final" | grep -E '_lib/|_probe'
