#!/usr/bin/env bash
# The documentation site (docs/) built and checked: what .ci/run, the release workflow (which publishes it) and
# scripts/release_rehearsal.sh run. Doxygen and Graphviz from Debian (installed when missing; Chromium too, for
# the browser check, where it installs), Sphinx and its extensions pinned in pyproject.toml's `docs` dependency
# group, `sphinx-build -W` (a warning is an error) from a copy of the tracked files, so that nothing but OUT is
# written, then scripts/check_docs.py, which serves OUT on 127.0.0.1 and opens every page in headless Chromium.
# The package and torch must be importable (autodoc, the status command's output on the pages): from the active
# environment (CI: the editable install), or with --wheel-from DIR from a fresh venv in a temporary folder with
# torch 2.13.0 and the x86_64 cp39-abi3 wheel found in DIR (a release documents the wheel it publishes).
#
# Usage: scripts/build_docs.sh [--wheel-from DIR] OUT
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
wheels=
if [ "${1:-}" = --wheel-from ]; then wheels=$(cd "${2:?--wheel-from needs a folder}" && pwd); shift 2; fi
out=${1:?usage: scripts/build_docs.sh [--wheel-from DIR] OUT}
mkdir -p "$out" && out=$(cd "$out" && pwd)
work=$(mktemp -d /tmp/tdb-docs.XXXXXX)
trap 'rm -rf "$work"' EXIT
start=$SECONDS
if [ -n "$wheels" ]; then
  wheel=$(ls "$wheels"/torch_dlpack_bridge-*-cp39-abi3-*_x86_64.whl | head -n 1)
  python3 -m venv "$work/venv"
  . "$work/venv/bin/activate"
  python -m pip install -q torch==2.13.0 "$wheel"
fi
if ! command -v doxygen > /dev/null || ! command -v dot > /dev/null || ! command -v chromium > /dev/null; then
  apt-get update -qq > /dev/null || echo "apt-get update failed; installing what the cache has" >&2
fi
command -v doxygen > /dev/null && command -v dot > /dev/null || apt-get install -y -qq doxygen graphviz > /dev/null
command -v chromium > /dev/null || apt-get install -y -qq chromium > /dev/null 2>&1 || true
python -m pip install --quiet "pip>=25.1"  # --group (a fresh venv may bring an older pip; a no-op otherwise)
python -m pip install --quiet --group "$repo/pyproject.toml:docs"
(cd "$repo" && git ls-files -z | tar --null -T - -cf -) | tar -xf - -C "$work" --one-top-level=src
sphinx-build -W --keep-going -q "$work/src/docs" "$out"
if command -v chromium > /dev/null; then
  python "$repo/scripts/check_docs.py" "$out" --screenshots "$(dirname "$out")/screenshots"
else
  echo "docs browser check NOT RUN: chromium could not be installed on this machine" >&2
fi
echo "docs: built and checked in $((SECONDS - start)) s into $out"
