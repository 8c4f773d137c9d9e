#!/usr/bin/env bash
# The release's artifacts, built the way a release builds them: .github/workflows/release.yml runs this on each
# native runner, scripts/release_rehearsal.sh runs it here (aarch64 cross-built on x86_64).
#   x86_64   the cp39-abi3 wheel (scripts/build_wheels.sh), the cp313t wheel (the same script run by the
#            free-threaded CPython of scripts/freethreaded_env.sh) and the sdist (`python -m build --sdist` of the
#            tracked files, with build isolation, as pip builds it)
#   aarch64  the cp39-abi3 aarch64 wheel (scripts/build_wheels.sh --arch aarch64)
# The build tools (setuptools, wheel, auditwheel, build) come from the registry into a venv in a temporary folder,
# removed at the end; torch wheels are cached as scripts/build_wheels.sh says.
#
# Usage: scripts/release_artifacts.sh [--arch x86_64|aarch64] OUTDIR   (default: this machine's architecture)
# Needs: python3 with venv, a C++ compiler, git; root and Debian 12 for the cp313t interpreter and cross builds.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
arch=$(uname -m)
if [ "${1:-}" = --arch ]; then arch=${2:?--arch needs x86_64 or aarch64}; shift 2; fi
out=${1:?usage: scripts/release_artifacts.sh [--arch x86_64|aarch64] OUTDIR}
mkdir -p "$out" && out=$(cd "$out" && pwd)
tools=$(mktemp -d /tmp/tdb-release-tools.XXXXXX)
trap 'rm -rf "$tools"' EXIT
python3 -m venv "$tools/venv"
"$tools/venv/bin/python" -m pip install -q "setuptools>=77" wheel auditwheel build
export PATH=$tools/venv/bin:$PATH TDB_WHEEL_DIR=$out
start=$SECONDS

"$repo/scripts/build_wheels.sh" --arch "$arch"
echo "release: the $arch cp39-abi3 wheel in $((SECONDS - start)) s"
if [ "$arch" = x86_64 ]; then
  step=$SECONDS
  ft_python=$("$repo/scripts/freethreaded_env.sh" --python 3.13)
  PATH=$(dirname "$ft_python"):$PATH "$repo/scripts/build_wheels.sh" --arch x86_64
  echo "release: the cp313t wheel in $((SECONDS - step)) s"
  # The sdist of the tracked files only (a developer's build outputs stay out), from a copy of them.
  src=$tools/src && mkdir "$src"
  (cd "$repo" && git ls-files -z | tar --null -T - -cf -) | tar -xf - -C "$src"
  rm -f "$out"/torch_dlpack_bridge-*.tar.gz
  python -m build --sdist --outdir "$out" "$src" > "$tools/sdist.log" || { cat "$tools/sdist.log"; exit 1; }
fi
echo "release: $arch artifacts in $((SECONDS - start)) s:"
ls -l "$out"
