#!/usr/bin/env bash
# A free-threaded CPython (3.13t or 3.14t) and a venv with a torch built for it, made once into a cache folder
# outside the checkout; prints the venv's python. No distribution ships a free-threaded CPython, so it is built
# from the upstream tarball inside Debian testing's python3.X source package (about 5 min on 2 cores; needs
# root for apt), or from a CPython source tarball named by TDB_FT_SOURCE (Python-3.14.N.tar.xz from
# python.org) where Debian's mirror does not serve that package. Used by scripts/freethreaded_check.sh.
#
#   scripts/freethreaded_env.sh [--python 3.13|3.14] [torch version]
#   (default 3.13; torch 2.12.0 for 3.13t, the newest with cp313t wheels, and 2.13.0 for 3.14t)
#
# TDB_FT_CACHE moves the cache (default ~/.cache/torch_dlpack_bridge-release/freethreaded).
set -euo pipefail
version=3.13
if [ "${1:-}" = --python ]; then version=${2:?--python needs 3.13 or 3.14}; shift 2; fi
case "$version" in
  3.13) torch_version=${1:-2.12.0} ;;
  3.14) torch_version=${1:-2.13.0} ;;
  *) echo "--python: 3.13 or 3.14, not $version" >&2; exit 2 ;;
esac
cache=${TDB_FT_CACHE:-$HOME/.cache/torch_dlpack_bridge-release/freethreaded}
source_tarball=${TDB_FT_SOURCE:+$(realpath "$TDB_FT_SOURCE")}
prefix=$cache/cpython-${version}t
python=$prefix/bin/python${version}t
mkdir -p "$cache"

if [ ! -x "$python" ]; then
  echo "building CPython ${version}t into $prefix (once)" >&2
  export DEBIAN_FRONTEND=noninteractive
  # Source packages of Debian testing only (deb-src: nothing of testing is ever installed from this line).
  cat > /etc/apt/sources.list.d/tdb-testing-src.sources <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: testing
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  apt-get update -qq
  apt-get install -y -qq build-essential dpkg-dev libssl-dev zlib1g-dev libffi-dev libbz2-dev liblzma-dev \
    libsqlite3-dev libreadline-dev uuid-dev libzstd-dev >/dev/null
  src=$cache/src
  rm -rf "$src" && mkdir -p "$src" && cd "$src"
  if [ -n "$source_tarball" ]; then
    tar xf "$source_tarball"
  elif apt-get source --download-only -qq "python$version"; then
    tar xf "python${version}_"*.orig.tar.xz
  else
    echo "Debian's mirror serves no python$version source here: set TDB_FT_SOURCE to a CPython $version" \
      "source tarball (Python-$version.N.tar.xz from python.org)" >&2
    exit 1
  fi
  cd "$(find . -maxdepth 1 -type d -name "Python-$version*" | head -n 1)"
  ./configure -q --disable-gil --prefix="$prefix" --without-ensurepip
  make -s -j"$(nproc)" >/dev/null
  make -s install >/dev/null
  "$python" -m ensurepip >/dev/null
  cd "$cache" && rm -rf "$src"  # not from inside it: pip fails in a deleted working directory
fi
"$python" -c 'import sys; assert not sys._is_gil_enabled(), "not a free-threaded build"'

venv=$cache/venv-${version}t-torch$torch_version
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
# Each time (a no-op once satisfied, so an interrupted install completes). Wheels only for numpy (the newest
# with a cp313t wheel is 2.4), hypothesis (its newest sdists need a Rust toolchain and crates.io) and greenlet
# (3.5's sdist does not build for 3.13t; 3.2.2 has a cp313t wheel); apache-tvm-ffi has no cp313t wheel (its tests
# skip). auditwheel: for scripts/build_wheels.sh.
numpy=numpy
[ "$version" = 3.13 ] && numpy="numpy<2.5"
"$venv/bin/python" -m pip install -q "torch==$torch_version" "$numpy" pytest hypothesis "setuptools>=77" wheel \
  pybind11 nanobind scikit-build-core cmake ninja auditwheel greenlet --only-binary=numpy,hypothesis,greenlet
echo "$venv/bin/python"
