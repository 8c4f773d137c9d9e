#!/usr/bin/env bash
# Builds first_kernel (pybind11) and first_kernel_nb (nanobind) in this folder against
# the installed torch_dlpack_bridge, pybind11 and nanobind: the commands of
# docs/guides/first-kernel.md, run by tests/test_first_kernel.py.
set -euo pipefail

# [pybind11]
c++ -O2 -std=c++17 -shared -fPIC -fvisibility=hidden \
    $(python -m pybind11 --includes) \
    $(python -m torch_dlpack_bridge --includes) \
    first_kernel.cpp -o first_kernel$(python -m pybind11 --extension-suffix)
# [pybind11 end]

# [nanobind]
cmake -S . -B build -DPython_EXECUTABLE="$(command -v python)"
cmake --build build
# [nanobind end]
