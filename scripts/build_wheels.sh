#!/usr/bin/env bash
# Release build: one wheel (cp39-abi3, every CPython 3.9+ with a GIL) holding the torch-free probe and one
# exchange table library per torch minor, each compiled against that torch's own wheel from the registry
# (downloaded once with --no-deps; only its headers and the libraries the table links are unpacked), then
# tagged with the manylinux policy auditwheel finds for it. No torch is installed or imported.
# Run by a free-threaded CPython (e.g. `PATH=<3.13t venv>/bin:$PATH`, see scripts/freethreaded_env.sh), it
# builds that interpreter's own wheel instead (cp313-cp313t, cp314-cp314t: free-threaded CPython has no stable
# ABI), against the torch minors that publish wheels for it (cp313t: 2.7-2.12), beside the abi3 one.
# The wheel records the torch versions its libraries were built against (torch_dlpack_bridge/_lib/
# torch_versions.txt, written by setup.py).
#
# Usage: scripts/build_wheels.sh [--arch x86_64|aarch64] [torch versions...]
#        (default: this machine's architecture; the torch versions scripts/torch_versions.py reads from the index
#        pip uses: every minor from 2.4 to the newest, each at its newest patch with a wheel for this build)
# --arch aarch64 (Linux aarch64: Grace GH200/GB200, Arm servers) builds against torch's aarch64 wheels: natively
# on an aarch64 machine (the release's Arm runner), or cross-built on x86_64 with Debian's cross compiler and the
# aarch64 CPython headers of scripts/aarch64_env.sh (made once).
# Each wheel replaces only the previous wheel of its architecture and Python tag in the wheel folder.
# Env: TDB_RELEASE_CACHE  downloaded and unpacked torch wheels (default ~/.cache/torch_dlpack_bridge-release;
#                         aarch64 ones under its aarch64/)
#      TDB_WHEEL_DIR      where the wheel goes (default wheelhouse/ in the checkout, ignored by git)
#      MAX_JOBS           parallel compiler processes per torch (default: all cores)
# Needs: python with pip, setuptools>=77, wheel and auditwheel; a C++ compiler (to cross-build: root and Debian 12,
# see scripts/aarch64_env.sh).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
arch=$(uname -m)
if [ "${1:-}" = --arch ]; then arch=${2:?--arch needs x86_64 or aarch64}; shift 2; fi
case "$arch" in
  x86_64) [ "$(uname -m)" = x86_64 ] || { echo "build on x86_64 (this is $(uname -m))" >&2; exit 2; } ;;
  aarch64) ;;
  *) echo "--arch: x86_64 or aarch64, not $arch" >&2; exit 2 ;;
esac
cross=0
[ "$arch" = "$(uname -m)" ] || cross=1
cache=${TDB_RELEASE_CACHE:-$HOME/.cache/torch_dlpack_bridge-release}
platform=()
nm=nm
if [ "$arch" = aarch64 ]; then
  cache=$cache/aarch64
  # torch's aarch64 wheels are manylinux2014 (2.4, 2.5) or manylinux_2_28 (2.6 on).
  platform=(--platform manylinux_2_28_aarch64 --platform manylinux_2_17_aarch64 --platform manylinux2014_aarch64
            --implementation cp)
fi
if [ $cross = 1 ]; then
  env=$("$repo/scripts/aarch64_env.sh")
  nm=aarch64-linux-gnu-nm
  # The cross compiler, wrapped to put the aarch64 CPython headers ahead of the build Python's own: CXX for the
  # table (torch_dlpack_bridge/_build.py) and the probe (setuptools compiles C++ with CXX; it gets the headers
  # from the extra setuptools config below, which also names the platform).
  export CXX=$env/toolchain/bin/c++ CC=$env/toolchain/bin/gcc LDSHARED="$env/toolchain/bin/gcc -shared"
  extra_config=$(mktemp /tmp/tdb-release-cfg.XXXXXX)
  printf '[build_ext]\ninclude_dirs = %s\n[bdist_wheel]\nplat_name = linux_aarch64\n' \
    "$env/sysroot/usr/include/python3.11:$env/sysroot/usr/include" > "$extra_config"
  export DIST_EXTRA_CONFIG=$extra_config
fi
out=${TDB_WHEEL_DIR:-$repo/wheelhouse}
# abi3, or the free-threaded interpreter's own tag (cp313t, cp314t), whose torch wheels (libtorch_python) are
# its own.
python_abi=$(python -c 'import sys; print("cp%d%dt" % sys.version_info[:2] if "t" in sys.abiflags else "abi3")')
versions=("$@")
if [ ${#versions[@]} -eq 0 ]; then  # what scripts/torch_versions.py finds on the index, the one place it is decided
  listed=$(python "$repo/scripts/torch_versions.py" --python-abi "$python_abi" --arch "$arch")
  read -r -a versions <<< "$listed"
fi
torch_python=(--python-version 3.11)
if [ "$python_abi" != abi3 ]; then
  torch_python=(--python-version "$(python -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
                --abi "$python_abi" --implementation cp)
  cache=$cache/$python_abi
fi
mkdir -p "$cache/wheels" "$out"
shopt -s nullglob
torch_wheel() { local found=("$cache/wheels/torch-$1-"*.whl "$cache/wheels/torch-$1+"*.whl); echo "${found[0]:-}"; }

sites=()
for v in "${versions[@]}"; do
  site="$cache/torch-$v"
  if [ ! -f "$site/torch/version.py" ]; then
    wheel=$(torch_wheel "$v")
    if [ -z "$wheel" ]; then
      python -m pip download -q --no-deps --only-binary=:all: "${torch_python[@]}" ${platform[@]+"${platform[@]}"} \
        "torch==$v" -d "$cache/wheels"
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
trap 'rm -rf "$src" ${extra_config:+"$extra_config"}' EXIT
(cd "$repo" && git ls-files | tar -cf - -T -) | tar -xf - -C "$src"
raw="$src/dist" && mkdir -p "$raw"
start=$SECONDS
(cd "$src" && TDB_TORCH_SITES=$(IFS=:; echo "${sites[*]}") \
  python -m pip wheel -q --no-build-isolation --no-deps -w "$raw" .)
echo "built ${#sites[@]} table libraries in $((SECONDS - start)) s"
# What each library needs from CPython (U: must exist in every CPython 3.9+, w: weak, either may be absent);
# scripts/wheel_matrix.sh loads them under each Python to prove it.
echo "CPython C API used by the table libraries: $($nm -D --undefined-only "$src"/build/lib*/torch_dlpack_bridge/_lib/*.so |
  awk '$2 ~ /^_?Py/ {print $1 ":" $2}' | sort -u | tr '\n' ' ')"
built=("$raw"/*.whl)
wheel=${built[0]}
# Every shared object in the wheel is for the architecture asked for (readelf -h reads any ELF).
machine=$([ "$arch" = aarch64 ] && echo AArch64 || echo X86-64)
for so in "$src"/build/lib*/torch_dlpack_bridge/_probe*.so "$src"/build/lib*/torch_dlpack_bridge/_lib/*.so; do
  readelf -h "$so" | grep -qE "Machine: .*$machine\$" || { echo "$so is not $arch" >&2; exit 1; }
done

# The platform tag the libraries' glibc/libstdc++ symbol versions allow. torch's own libraries are the
# environment the table is loaded into, not something the wheel may bundle, so they are excluded.
policy=$(python -m auditwheel show "$wheel" 2>&1 | tr '\n' ' ' | grep -oE "manylinux_[0-9]+_[0-9]+_$arch" | head -n 1)
[ -n "$policy" ] || { python -m auditwheel show "$wheel"; echo "auditwheel found no manylinux policy" >&2; exit 1; }
python -m auditwheel show "$wheel" | tr '\n' ' ' | grep -oE 'constrains the platform tag to "[^"]+"' || true
python -m wheel tags --remove --platform-tag "$policy" "$wheel" > /dev/null
tag=$([ "$python_abi" = abi3 ] && echo cp39-abi3 || echo "${python_abi%t}-$python_abi")
rm -f "$out"/torch_dlpack_bridge-*-"$tag"-*_"$arch".whl
mv "$raw"/*.whl "$out/"
final=("$out"/torch_dlpack_bridge-*-"$tag"-*_"$arch".whl)
echo "$final ($(du -k "$final" | cut -f1) KiB):"
python -m zipfile -l "$final" | grep -E '_lib/|_probe'
