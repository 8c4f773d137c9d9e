#!/usr/bin/env bash
# A free-threaded CPython (3.13t) and a venv with a cp313t torch, made once into a cache folder outside the
# checkout; prints the venv's python. No distribution ships a free-threaded CPython, so it is built from the
# upstream tarball inside Debian testing's python3.13 source package (about 5 min on 2 cores; needs root for
# apt). Used by scripts/freethreaded_check.sh.
#
#   scripts/freethreaded_env.sh [torch version]      # default 2.12.0, the newest torch with cp313t wheels
#
# TDB_FT_CACHE moves the cache (default ~/.cache/torch_dlpack_bridge-release/freethreaded).
set -euo pipefail
torch_version=${1:-2.12.0}
cache=${TDB_FT_CACHE:-$HOME/.cache/torch_dlpack_bridge-release/freethreaded}
prefix=$cache/cpython-3.13t
python=$prefix/bin/python3.13t
mkdir -p "$cache"

if [ ! -x "$python" ]; then
  echo "building CPython 3.13t into $prefix (once)" >&2
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
    libsqlite3-dev libreadline-dev uuid-dev >/dev/null
  src=$cache/src
  rm -rf "$src" && mkdir -p "$src" && cd "$src"
  apt-get source --download-only -qq python3.13
  tar xf python3.13_*.orig.tar.xz
  cd "$(find . -maxdepth 1 -type d -name 'Python-3.13*' | head -n 1)"
  ./configure -q --disable-gil --prefix="$prefix" --without-ensurepip
  make -s -j"$(nproc)" >/dev/null
  make -s install >/dev/null
  "$python" -m ensurepip >/dev/null
  rm -rf "$src"
fi
"$python" -c 'import sys; assert not sys._is_gil_enabled(), "not a free-threaded build"'

venv=$cache/venv-torch$torch_version
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
# Each time (a no-op once satisfied, so an interrupted install completes). Wheels only for numpy (the newest
# with a cp313t wheel is 2.4) and hypothesis (its newest sdists need a Rust toolchain and crates.io);
# apache-tvm-ffi has no cp313t wheel (its tests skip). auditwheel: for scripts/build_wheels.sh.
"$venv/bin/python" -m pip install -q "torch==$torch_version" "numpy<2.5" pytest hypothesis "setuptools>=77" wheel \
  pybind11 nanobind scikit-build-core cmake ninja auditwheel --only-binary=numpy,hypothesis
echo "$venv/bin/python"
